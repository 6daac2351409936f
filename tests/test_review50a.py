"""Review 50a (a hostile review of stops 48 and 49's product changes): what it found.

- A kernel row whose stored options are JSON nested 100,000 deep (a hostile bundle's, under
  4 MiB): a production process missing a build of that entry with other options explained
  the miss (`reordered_hint`, stop 49: are they the same options in another order?) by
  parsing the held options, and Python's JSON parser's `RecursionError` ended the process
  with a traceback (with or without WARM_EXPLAIN), where a cold one runs its kernel.
- A tune miss whose key holds a float (`float_hint`, stop 49: does a held key differ in its
  floats only?) masked every held key of the operation anew, each miss: 0.2 s a miss over
  100,000 held tunes, in the production process, for every key drawn at random (each a
  miss), where the key forms' hint beside it is made once per listing. Now made once too.
- Out of memory while a command's modules are imported (`ulimit -v` of 30 to 70 MB, where
  `warm stats --json` of stop 49 runs): the dynamic loader's refusal to map numpy's (or
  SQLite's) library is an ImportError, not the MemoryError `warmcli.__main__` answers, so
  `warm check`, `warm verify` and `warm diff` ended in numpy's 40-line traceback, exit 1: for
  them "found something missing or corrupt". Now one line, exit 2, as any out of memory.
- `warm stats --json` of a 5,000-kernel, 5,000-tune bundle under `ulimit -v` of 46 to 52 MB
  (stop 49's case) said it ran out of memory as bytes made beforehand (`exit_code`: even the
  line ran out), on stderr only: stdout was empty, where README promises a failure's JSON
  document under `--json`. The document is made beforehand too, and written.
  (`memory_limit.ended_as_promised` now asserts it for test_speed43b's and test_faults34's.)
- `warm run --arch sm_90 sm_80 w.py` (stop 49: one --arch each, said so): the parser takes
  `sm_80` for the workload, and `w.py` was refused as the workload's argument ("a workload
  takes no arguments (w.py)"), where `warm check --arch sm_90 sm_80 b.warm`, and `warm run
  w.py --arch sm_90 sm_80`, say --arch takes one architecture. Now so does it.
- `warm check B --arch sm_90 compute_90` (or run's) said "write --arch compute_90", which
  warm then refuses ("a virtual (PTX) architecture, not a GPU's: use sm_90"). Now it names
  the GPU's, `--arch sm_90` (whose build keeps compute_90's PTX).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from big_bundle import build_big
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from memory_limit import ended_as_promised, stats_json_under, warm_under

# A production process launching the host example's bias_relu built with -O1 (the bundle
# holds it built with none): a miss, compiled here; what it computed, and the misses.
BIAS_O1 = """\
import json, sys
import numpy as np
import warmcli
from warmcli import Kernel
sys.path.insert(0, "examples")
from matmul_host import BIAS_RELU
k = Kernel(BIAS_RELU.source, "bias_relu", "PPii", options=("-O1",))
rt = warmcli.runtime("host")
c = rt.upload(np.array([-1, 2, -3, 4], dtype=np.float32))
b = rt.upload(np.array([2, 1], dtype=np.float32))
rt.launch(k, c, b, 2, 2)
print(json.dumps({"c": rt.read(c).tolist(), "misses": len(warmcli.report().misses)}))
"""


def _components(path: Path, entry: str, change: Callable[[dict[str, str]], None]) -> None:
    """`change` made to the components of `path`'s kernel row of `entry` (its key kept)."""
    conn = sqlite3.connect(path)
    with conn:
        key, text = conn.execute(
            "SELECT key, components FROM kernels WHERE entry = ?", (entry,)
        ).fetchone()
        components = json.loads(text)
        change(components)
        conn.execute(
            "UPDATE kernels SET components = ? WHERE key = ?", (json.dumps(components), key)
        )
    conn.close()


def test_held_options_nested_deep_leave_a_miss_explained(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "nested.warm")
    _components(bundle, "bias_relu", lambda c: c.update(options="[" * 100_000 + "]" * 100_000))
    cold = warm.production(BIAS_O1)
    assert cold["c"] == [1.0, 3.0, 0.0, 5.0]
    explaining = warm.with_env(WARM_EXPLAIN="1")
    assert explaining.production(BIAS_O1, bundle=bundle) == {"c": cold["c"], "misses": 1}


class _Counted(list[dict[str, str]]):
    """Held keys that count the rows read from them (each pass over them reads them all)."""

    read = 0

    def __iter__(self) -> Iterator[dict[str, str]]:
        for row in super().__iter__():
            self.read += 1
            yield row


def test_misses_of_keys_drawn_at_random_mask_the_held_keys_once() -> None:
    from warmcli.runtime.nearest import FLOAT_CHANGED, Listed, float_hint

    held = _Counted({"shape": f"float32[{i}] 0.5"} for i in range(1000))
    listed: Listed[dict[str, str]] = Listed(held, held)
    said = [float_hint(listed, f"float32[{1000 + i}] 0.{i}") for i in range(100)]
    assert said == [""] * 100
    assert float_hint(listed, "float32[7] 0.25") == FLOAT_CHANGED
    assert float_hint(listed, "float32[7] 0.25 1") == ""
    assert held.read == 1000, held.read  # (each miss read all: 102,000 rows; once: 1,000)


def test_out_of_memory_importing_a_commands_modules_is_one_line(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    ends = [ended_as_promised(warm_under(warm, mb, "check", bundle), mb) for mb in (35, 50)]
    assert 2 in ends, ends  # (one limit at least refused a library: this test's case)


def test_out_of_memory_saying_so_under_json_prints_its_document(warm: Warm, tmp_path: Path) -> None:
    big = build_big(tmp_path / "big.warm", 5000, 5000)
    ends = [ended_as_promised(stats_json_under(warm, big, mb), mb) for mb in (48, 50)]
    assert 2 in ends, ends


def test_a_second_arch_taken_for_the_workload_is_said_to_want_its_own_arch(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "w.py").write_text("def workload(rt):\n    pass\n")
    done = warm("run", "--arch", "sm_90", "sm_80", tmp_path / "w.py", "-b", tmp_path / "b.warm")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("warm: error: sm_80: --arch takes one architecture"), done.stderr
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "b.warm").exists()


def test_a_stray_ptx_arch_is_told_the_gpus_arch_to_write(warm: Warm, tmp_path: Path) -> None:
    done = warm("check", tmp_path / "b.warm", "--arch", "sm_80", "compute_90")
    assert done.returncode == 2, done.stderr
    said = "compute_90: --arch takes one architecture, one --arch each, a GPU's"
    assert done.stderr.startswith(f"warm: error: {said} (write --arch sm_90)"), done.stderr
