"""Autotuning as a performance engineer leans on it, trial 34: the real CLI in a
subprocess, the host backend (real cc), real bundles.

- A tune key whose text is over what a bundle holds (a `key=` of megabytes, a tuple
  input of a million ints) was measured and stored, then every reader called the row
  corrupt: the verify pass failed (`1 tune(s) measured, not in the bundle`, exit 1)
  printing the megabytes of key twice; production missed it on every start. It is
  refused where the tune is called, in one line naming the tunable.
- `check=` compared only the inputs' buffers, not a buffer the launch function launches
  on that is none of the inputs (one the app keeps), which warm keeps too: a candidate
  writing a wrong result there passed the check (`ok`) and could be picked.
- A tune inside a tunable's launch function (nested, on the same stream) dropped the
  outer tune's watch on its launches when it finished: a buffer the outer candidates
  then wrote in place, none of the inputs, was not kept, so a cold start or a miss
  accumulated every warm-up and repeat into it (13.0 where a hit computed 1.0).
- A tune's candidates document over the 4 MiB a bundle reads (every sample of 2
  candidates x 300,000 repeats; a candidate's reason of megabytes, from its exception's
  message) was stored, then every reader called the row corrupt (the verify pass
  failed). The samples are refused where the Tunable is made; a reason is cut to fit.
- `key=["n"]`, a list of argument names as Triton's autotune takes, was accepted where
  the Tunable was made and failed at its first tune with `TypeError: 'list' object is not
  callable`, naming neither the tunable nor `key=`. It is refused where it is made.
- A `check=` callable with no Python code of its own (a builtin, a C or Cython function,
  a numpy function) was keyed by its type's `__call__`, the same for every such function:
  a bundle warmed under one check served its pick to a process checking with another,
  never run (a cold start raised `every candidate failed` where the hit computed).
- A function a check holds (in its closure, a default, a `functools.partial`'s
  arguments, its object's attributes: `make_check(strict)`, `partial(compare,
  cmp=np.allclose)`, `Judge(strict)`) was not keyed:
  changing it to another kept the old picks, checked by the other function.
- `warm merge` printed each tune it kept or dropped with its whole shape key (a key= of
  3 MiB: 6 MB of output), where stats and diff cut a cell to 512 characters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


HEAD = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, int n) {{ for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f + V; }}"


def launch(rt, kernel, y, n, tag, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


KS = {{f"v{{i}}": Kernel(SRC, "f", "Pi", defines={{"V": 0, "W": i}}) for i in range(2)}}
T = Tunable("big", KS, launch{key})


def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8, {tag})
"""
HUGE = {  # the Tunable's key= and the tag input: a key text over 4 MiB characters
    "key=": (", key=lambda y, n, tag: tag", '"x" * (5 << 20)'),
    "input": ("", "tuple(range(1_000_000))"),
}


@pytest.mark.parametrize("case", HUGE)
def test_a_tune_key_over_what_a_bundle_holds_is_one_line_not_a_corrupt_row(
    warm: Warm, workload_file, bundle_path: Path, case: str
) -> None:
    key, tag = HUGE[case]
    script = workload_file(HEAD.format(key=key, tag=tag))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stderr[:2000]
    assert len(proc.stderr) < 2000, proc.stderr[:2000]
    [line] = proc.stderr.strip().splitlines()
    assert "tunable big: its tune key's text is" in line, line
    assert "over the 4194304 a bundle holds" in line, line


def test_the_key_text_limit_is_the_bundles() -> None:
    from warmcli.bundle.rows import MAX_TEXT_CHARS
    from warmcli.runtime.tune_spec import MAX_KEY_TEXT

    assert MAX_KEY_TEXT == MAX_TEXT_CHARS


BESIDE = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(const float *x, float *out, int n) { for (int i = 0; i < n; i++) out[i] = x[i] * F; }"
STATE = {}


def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, STATE["out"], n, stream=stream)  # the app's own output buffer


def ok(outputs, inputs):  # the output must be twice the input
    return bool((outputs[-1] == inputs[0] * 2).all())


KS = {"good": Kernel(SRC, "f", "PPi", defines={"F": 2}),
      "wrong": Kernel(SRC, "f", "PPi", defines={"F": 3}),
      "good2": Kernel(SRC, "f", "PPi", defines={"F": 2, "G": 1})}
T = Tunable("beside", KS, launch, check=CHECK)


def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    STATE["out"] = rt.buffer(64, "float32")
    rt.tune(T, x, 64)
"""


@pytest.mark.parametrize("check", ['"good"', "ok"])
def test_the_check_compares_a_kept_buffer_that_is_none_of_the_inputs(
    warm: Warm, workload_file, bundle_path: Path, check: str
) -> None:
    script = workload_file(BESIDE.replace("CHECK", check))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stderr
    [tune] = warm.json("stats", bundle_path)["tunes"]
    status = {c["name"]: (c["status"], c.get("reason") or "") for c in tune["candidates"]}
    assert status["good"][0] == status["good2"][0] == "ok", status
    assert status["wrong"][0] == "failed", status
    assert status["wrong"][1].startswith("check: "), status
    assert tune["pick"] in ("good", "good2"), tune


NESTED = """\
import json
import sys

import numpy as np
import warmcli
from warmcli import Kernel, Tunable

DEVICE = "host"
ID = "void f(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 1.0f; }"
ACC = "void acc(const float *x, float *out, int n) { for (int i = 0; i < n; i++) out[i] += x[i]; }"
STATE = {}


def launch_inner(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


INNER = Tunable("inner", {f"i{i}": Kernel(ID, "f", "Pi", defines={"W": i}) for i in range(2)},
                launch_inner)


def launch_outer(rt, kernel, x, n, *, stream=None):
    rt.tune(INNER, x, n, stream=stream)  # a tune inside the outer's candidates
    rt.launch(kernel, x, STATE["out"], n, stream=stream)  # the app's own buffer, in place


OUTER = Tunable("outer", {f"o{i}": Kernel(ACC, "acc", "PPi", defines={"W": i}) for i in range(2)},
                launch_outer)


def workload(rt):
    x = rt.upload(np.ones(4, dtype=np.float32))
    STATE["out"] = rt.upload(np.zeros(4, dtype=np.float32))
    rt.tune(OUTER, x, 4)


if __name__ == "__main__":
    warmcli.use_bundle(sys.argv[1] if len(sys.argv) > 1 else None)
    rt = warmcli.runtime("host")
    workload(rt)
    print(json.dumps(rt.read(STATE["out"]).tolist()))
"""


def test_a_nested_tune_keeps_the_outer_tunes_watch_cold_miss_and_hit_agree(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(NESTED)
    code = f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    assert warm.production(code) == [1.0] * 4  # cold: no bundle
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert warm.production(code, bundle_path) == [1.0] * 4  # a hit


SAMPLES = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 1.0f; }"


def launch(rt, kernel, y, n, *, stream=None):
    if str(dict(kernel.defines)["W"]) == "1":
        raise RuntimeError("bad " * (2 << 20))  # a reason of 8 MiB
    rt.launch(kernel, y, n, stream=stream)


KS = {f"c{i}": Kernel(SRC, "f", "Pi", defines={"W": i}) for i in range(CANDIDATES)}
T = Tunable("rows", KS, launch, warmup=0, repeats=REPEATS, restore=())


def workload(rt):
    rt.tune(T, rt.upload(np.ones(1, dtype=np.float32)), 1)
"""


def test_samples_over_what_a_tunes_row_holds_are_refused_where_the_tunable_is_made(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(SAMPLES.replace("CANDIDATES", "1 + 2").replace("REPEATS", "150_000"))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "workload failed to import: " in line, line
    assert "tunable rows: 3 candidates x 150000 repeats" in line, line
    assert not bundle_path.exists() or bundle_path.stat().st_size == 0


def test_a_reason_of_megabytes_is_cut_to_fit_the_tunes_row(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(SAMPLES.replace("CANDIDATES", "3").replace("REPEATS", "5"))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stderr[:2000]
    assert "the bundle is complete" in proc.stdout, proc.stdout[:2000]
    [tune] = warm.json("stats", bundle_path)["tunes"]
    reason = {c["name"]: c.get("reason") or "" for c in tune["candidates"]}["c1"]
    assert reason.startswith("RuntimeError: bad bad "), reason[:100]
    assert "characters cut ...]" in reason and len(reason) < 4 << 20, len(reason)


def test_the_row_limits_are_the_bundles() -> None:
    from warmcli.bundle.candidates import MAX_PACKED_BYTES
    from warmcli.runtime.tune_spec import MAX_TUNE_ROW

    assert MAX_TUNE_ROW == MAX_PACKED_BYTES


def test_a_key_that_is_no_callable_is_refused_where_the_tunable_is_made(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    source = SAMPLES.replace("CANDIDATES", "2").replace("REPEATS", "5")
    script = workload_file(source.replace("restore=()", 'restore=(), key=["n"]'))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "workload failed to import: " in line, line
    assert "tunable rows: key= is a callable of the inputs" in line, line
    assert "not a list" in line, line


BUILTIN_CHECK = """\
import operator
import os
import sys

import numpy as np
import warmcli
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f; }"


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


KS = {f"c{i}": Kernel(SRC, "f", "Pi", defines={"W": i}) for i in range(2)}
# operator.is_not accepts every candidate; operator.is_ rejects every one
T = Tunable("builtin", KS, launch, check=getattr(operator, os.environ["CHECK"]))


def workload(rt):
    rt.tune(T, rt.upload(np.ones(4, dtype=np.float32)), 4)


if __name__ == "__main__":
    warmcli.use_bundle(sys.argv[1] if len(sys.argv) > 1 else None)
    try:
        workload(warmcli.runtime("host"))
    except warmcli.TuneFailure:
        print("every candidate failed")
    else:
        print("computed")
"""


def test_checks_with_no_python_code_of_their_own_key_apart(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    import subprocess
    import sys

    script = workload_file(BUILTIN_CHECK)
    warm.env["CHECK"] = "is_not"  # warmed under a check accepting every candidate
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stderr

    def serve(*bundle: Path) -> str:
        env = dict(warm.env, CHECK="is_", PYTHONPATH=str(ROOT))  # this tree's warmcli
        run = [sys.executable, str(script), *map(str, bundle)]
        done = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert serve() == "every candidate failed"  # cold
    assert serve(bundle_path) == "every candidate failed"  # the bundle's pick is another check's


def _strict(outputs, inputs):
    return bool((outputs[0] == inputs[0] * 2).all())


def _loose(outputs, inputs):
    return True


def _make_check(judge):
    return lambda outputs, inputs: judge(outputs, inputs)


def _compare(outputs, inputs, cmp=None):
    return bool(cmp(outputs[0], inputs[0] * 2))


def _with_default(outputs, inputs, judge=_strict):
    return judge(outputs, inputs)


class _Judge:
    def __init__(self, judge):
        self.judge = judge

    def __call__(self, outputs, inputs):
        return self.judge(outputs, inputs)


def _defaulted(judge):
    def check(outputs, inputs, judge=judge):  # the same code, another default
        return judge(outputs, inputs)

    return check


@pytest.mark.parametrize(
    "pair",
    [
        "closure",
        "partial of a library function",
        "partial of a function",
        "default",
        "attribute",
    ],
)
def test_a_function_a_check_holds_keys_its_tunes(pair: str) -> None:
    import functools

    import numpy as np

    from warmcli import Kernel, Tunable

    src = "void f(float *y, int n) { }"
    ks = {f"c{i}": Kernel(src, "f", "Pi", defines={"W": i}) for i in range(2)}

    def launch(rt, kernel, y, n, *, stream=None):
        rt.launch(kernel, y, n, stream=stream)

    one, other = {
        "closure": (_make_check(_strict), _make_check(_loose)),
        "partial of a library function": (
            functools.partial(_compare, cmp=np.allclose),
            functools.partial(_compare, cmp=np.array_equal),
        ),
        "partial of a function": (
            functools.partial(_with_default, judge=_strict),
            functools.partial(_with_default, judge=_loose),
        ),
        "default": (_defaulted(_strict), _defaulted(_loose)),
        "attribute": (_Judge(_strict), _Judge(_loose)),
    }[pair]
    sums = {Tunable("op", ks, launch, check=c).checksum for c in (one, other)}
    assert len(sums) == 2, pair


def test_merge_cuts_a_long_shape_key_as_stats_and_diff_do(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    script = workload_file(HEAD.format(key=", key=lambda y, n, tag: tag", tag='"x" * (3 << 20)'))
    paths = [tmp_path / f"{n}.warm" for n in "abm"]
    for path in paths[:2]:
        proc = warm("run", script, "-b", path, "--quiet")
        assert proc.returncode == 0, proc.stderr[:2000]
    proc = warm("merge", *paths[:2], "-o", paths[2])
    assert proc.returncode == 0, proc.stderr[:2000]
    assert "tune big" in proc.stdout, proc.stdout[:2000]
    assert len(proc.stdout) < 20_000, len(proc.stdout)
    assert "(3,145,728 characters)" in proc.stdout, proc.stdout[:2000]


SIDE_EFFECT = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * 2.0f; }"
POKE = "void poke(float *s, int n) { for (int i = 0; i < n; i++) s[i] = 7.0f; }"
STATE = {}


def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)
    if dict(kernel.defines).get("POKE"):  # this candidate also writes the app's scratch
        rt.launch(STATE["poke"], STATE["scratch"], n, stream=stream)


KS = {"good": Kernel(SRC, "f", "Pi", defines={"W": 0}),
      "sneaky": Kernel(SRC, "f", "Pi", defines={"W": 1, "POKE": 1}),
      "good2": Kernel(SRC, "f", "Pi", defines={"W": 2})}
T = Tunable("side", KS, launch, check="good")


def workload(rt):
    STATE["poke"] = Kernel(POKE, "poke", "Pi")
    STATE["scratch"] = rt.upload(np.zeros(16, dtype=np.float32))
    rt.tune(T, rt.upload(np.arange(16, dtype=np.float32)), 16)
"""


def test_a_buffer_only_another_candidate_writes_is_compared_as_it_was(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(SIDE_EFFECT), "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stderr
    [tune] = warm.json("stats", bundle_path)["tunes"]
    status = {c["name"]: (c["status"], c.get("reason") or "") for c in tune["candidates"]}
    assert status["good"][0] == status["good2"][0] == "ok", status
    assert status["sneaky"][0] == "failed", status
    assert "check: output 2 (float32[16])" in status["sneaky"][1], status
    assert "7.0 != 0.0" in status["sneaky"][1], status


SELF_HELD = """\
from warmcli import Kernel, Tunable


class Judge:  # every method held by the object itself: keyed once each, not as a lattice
    def __init__(self):
        self.a, self.b, self.c, self.d = self.m1, self.m2, self.m3, self.m1

    def m1(self, outputs, inputs):
        return True

    def m2(self, outputs, inputs):
        return self.a(outputs, inputs)

    def m3(self, outputs, inputs):
        return self.b(outputs, inputs)

    def __call__(self, outputs, inputs):
        return self.c(outputs, inputs)


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


KS = {f"c{i}": Kernel("void f(float *y, int n) { }", "f", "Pi", defines={"W": i}) for i in range(2)}
print(Tunable("op", KS, launch, check=Judge()).checksum)
"""


def test_a_check_object_holding_its_own_methods_is_keyed_at_once(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "held.py"
    script.write_text(SELF_HELD)
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this tree's warmcli
    run = [sys.executable, str(script)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip()) == 64, done.stdout
