"""Stop 53's mutation review, part 2 (keys, tunes and data safety): the guards whose mutant
no earlier test caught, each held here by what a user sees through the real CLI and real
compiles (one `warm run` of a host workload, its bundle copied for each test).

- A tunable that buckets nothing keys a buffer by its exact shape: tuned on 12 and on 16
  elements, it measures both (its shapes bucketed to powers of two whatever it asked, one).
- A tune's key names the device it was measured on: a bundle's tune measured on another CPU
  is measured again here, never served as this one's (its key without the device served it);
  so is one whose key checks out but whose pick is no candidate of the workload's tunable (a
  row from elsewhere naming a candidate "c9": a hit that took it raised `KeyError: 'c9'`).
- `warm clean --tune OP` removes that tunable's tunes and no foreign entry beside them, as
  `--keep-foreign` keeps them: another CPU's tunes of another tunable stay (taken as foreign
  too, they went); a corrupt kernel still goes (kept as under `--keep-foreign`, its binary
  failing its sha256 stayed for every process to refuse).
- `warm merge A B` keeps each kernel's latest last use of any input: A used it now, B long
  ago, and a clean of the merge by age keeps it (B's time over A's, the clean took it).
- A clean planned its removals without the write lock and applied them under it: a kernel a
  writer touched in between (a process served it) went as "not used in the last 1d". Where
  another writer committed since the plan (SQLite's `data_version`), the clean plans again
  under the lock (a product fault, fixed; the interleaving made here by running the real
  plan and then a real write of another connection, in its place).
- A kernel stored again with another binary frees its old one only where no other kernel uses
  it: two host kernels built in one batch share one shared object, and the first rebuilt
  leaves the second's binary in place (freed whatever used it, `warm verify` found it gone).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import ForkedWarm

from warmcli.bundle.store import Bundle
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

# A host tunable of two candidates that compute alike, keyed by its one buffer's shape, tuned
# on 16 elements and on 12; its candidates built in one batch (`--jobs 1`): one binary.
TUNED = """
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0f + 0 * U; }"
T = Tunable(
    name="inc",
    candidates={f"c{u}": Kernel(SRC, "inc", "Pi", defines={"U": u}) for u in range(2)},
    launch=lambda rt, k, x, *, stream=None: rt.launch(k, x, x.shape[0], stream=stream),
)


def workload(rt):
    for n in (16, 12):
        rt.tune(T, rt.buffer(n))
"""


@pytest.fixture(scope="module")
def warmed(
    tmp_path_factory: pytest.TempPathFactory, forking_servers: Any
) -> tuple[ForkedWarm, Path, dict[str, Any]]:
    """warm (its commands forked), the workload `TUNED` and its bundle beside it, and what
    the run's measuring pass counted of its tunes."""
    base = tmp_path_factory.mktemp("mut53b")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"))), forking_servers)
    (base / "w.py").write_text(TUNED)
    return warm, base / "w.py", _autotune(warm, base / "w.py", base / "b.warm", "--jobs", "1")


def _autotune(warm: Any, workload: Path, bundle: Path, *options: str) -> dict[str, int]:
    """The measuring pass's autotune counts of `warm run workload -b bundle`."""
    proc = warm("run", workload, "-b", bundle, "--json", "-q", "--no-verify", *options)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["passes"][1]["autotune"]  # type: ignore[no-any-return]


def _copy(warmed: tuple[Any, Path, Any], tmp_path: Path) -> Path:
    return Path(shutil.copyfile(warmed[1].parent / "b.warm", tmp_path / "b.warm"))


def test_a_tunable_that_buckets_nothing_measures_each_shape_apart(warmed: Any) -> None:
    assert warmed[2]["measured"] == 2, warmed[2]
    with sqlite3.connect(warmed[1].parent / "b.warm") as conn:
        shapes = sorted(s for (s,) in conn.execute("SELECT shape_key FROM tunes"))
    assert shapes == ["float32[12]", "float32[16]"], shapes


def _measured_elsewhere(bundle: Path, operation: str = "", shape: str | None = None) -> None:
    """Each of `bundle`'s tunes (of `shape`, if given) as another CPU's, as a bundle warmed
    there holds it: moved there, or (given `operation`) copied there under that operation."""
    with sqlite3.connect(bundle) as conn:
        of = conn.execute("SELECT * FROM tunes WHERE ?1 IS NULL OR shape_key = ?1", (shape,))
        for row in of.fetchall():
            old, op, shape, device, checksum = row[:5]
            other = device.replace("|", "|Another CPU ", 1)
            new = bytes.fromhex(tune_key(operation or op, shape, other, checksum.hex()))
            if operation:
                values = (new, operation, shape, other, *row[4:])
                conn.execute("INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
            else:
                conn.execute(
                    "UPDATE tunes SET key = ?, device = ? WHERE key = ?", (new, other, old)
                )
        fp = conn.execute("SELECT data FROM fingerprints WHERE kind = 'device'").fetchone()[0]
        data = json.dumps({**json.loads(fp), "name": other.split("|")[1]}, sort_keys=True)
        conn.execute("INSERT INTO fingerprints VALUES (?, 'device', ?)", ("device:" + other, data))


def test_tunes_from_another_cpu_or_picking_no_candidate_are_measured_again(
    warmed: Any, tmp_path: Path
) -> None:
    warm, workload, _ = warmed
    bundle = _copy(warmed, tmp_path)
    with Bundle.open(bundle, write=True) as opened:  # 12 elements': a candidate c9 picked
        (tune,) = [t for t in opened.tunes() if t.shape_key == "float32[12]"]
        opened.put(tunes=[replace(tune, pick="c9", candidates=_renamed(tune, "c9"))])
    _measured_elsewhere(bundle, shape="float32[16]")
    again = _autotune(warm, workload, bundle)
    assert (again["measured"], again["hits"]) == (2, 0), again


def _renamed(tune: TuneRecord, name: str) -> tuple[CandidateMeasurement, ...]:
    """`tune`'s candidates, its pick's renamed `name`."""
    return tuple(replace(c, name=name) if c.name == tune.pick else c for c in tune.candidates)


def test_clean_of_one_tunable_keeps_foreign_tunes_and_still_removes_a_corrupt_kernel(
    warmed: Any, tmp_path: Path
) -> None:
    bundle = _copy(warmed, tmp_path)
    _measured_elsewhere(bundle, "other")  # foreign here: a plain clean would drop them
    with sqlite3.connect(bundle) as conn:  # the batch's binary, zeroed: fails its sha256
        conn.execute("UPDATE blobs SET data = zeroblob(length(data))")
    cleaned = warmed[0]("clean", bundle, "--tune", "inc")
    assert cleaned.returncode == 0, cleaned.stdout[-2000:] + cleaned.stderr[-2000:]
    with sqlite3.connect(bundle) as conn:
        left = conn.execute("SELECT operation, count(*) FROM tunes GROUP BY operation")
        assert left.fetchall() == [("other", 2)]
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (0,)


def test_a_kernel_stored_again_keeps_the_binary_its_batch_mate_uses(
    warmed: Any, tmp_path: Path
) -> None:
    bundle = _copy(warmed, tmp_path)
    with Bundle.open(bundle, write=True) as opened:
        one, two = opened.kernels()
        assert one.sha256 == two.sha256  # one batch: one shared object
        rebuilt = opened.blob(one.sha256) + b"\0"  # the same code, another binary
        sha = hashlib.sha256(rebuilt).hexdigest()
        opened.put([(replace(one, sha256=sha, size=len(rebuilt)), rebuilt)])
    checked = warmed[0]("verify", bundle)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_a_merge_keeps_the_latest_use_and_a_clean_by_age_keeps_what_it_used(
    warmed: Any, tmp_path: Path
) -> None:
    used_now = _copy(warmed, tmp_path)
    used_long_ago = Path(shutil.copyfile(used_now, tmp_path / "old.warm"))
    with sqlite3.connect(used_long_ago) as conn:  # its kernels last used in 2024
        conn.execute("UPDATE kernels SET last_used = 1704067200")
    out = tmp_path / "merged.warm"
    for args in (
        ("merge", used_now, used_long_ago, "-o", out),
        ("clean", out, "--older-than", "1d"),
    ):
        done = warmed[0](*args)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (2,)


def test_a_kernel_used_while_a_clean_plans_is_kept(
    warmed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmcli.ops import clean

    bundle = _copy(warmed, tmp_path)
    with sqlite3.connect(bundle) as conn:  # last used in 2024: a clean by age evicts them
        conn.execute("UPDATE kernels SET last_used = 1704067200")
    planned = clean._plan

    def served_meanwhile(*args: Any) -> Any:  # a process serves them once the plan is made
        plan = planned(*args)
        with Bundle.open(bundle, write=True) as other:
            other.touch(dict.fromkeys((k.key for k in other.kernels()), time.time()))
        return plan

    monkeypatch.setattr(clean, "_plan", served_meanwhile)
    report = clean.clean_bundle(bundle, older_than=86400)
    with sqlite3.connect(bundle) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (2,), report
