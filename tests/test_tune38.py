"""tune38: a tune's pick never changes what a process computes (real CLI, real cc).

A checked tunable's pick was judged on the build `warm run` made of it. Where this
process builds that candidate otherwise (a flag a wrapper `WARM_CC` adds from `$CFLAGS`:
another kernel key, a build not served here), the stored pick's verdict is of another
binary: it was served unchecked all the same, and computed what a cold start (whose check
refuses that build) does not. Such a pick is measured again, in production and in `warm
run`, and `warm check` says so; a pick of a build served alike (another compiler version)
is kept. A candidate added to `tunable.candidates` after it was made was measured and
served under a checksum without it: refused. A tune a Ctrl-C cut short is named by the
production report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = '''
import os
import numpy as np
from warmcli import Kernel, Tunable
from warmcli.execution.process_mode import current_process_mode

DEVICE = "host"
SRC = """
void axpy(float *y, const float *x, long n) {
    for (int r = 0; r < REPS; r++) { volatile float s = 0; for (long i = 0; i < n; i++) s += x[i]; }
#ifdef FAST
    if (REPS == 0) { for (long i = 0; i < n; i++) y[i] = 0; return; }
#endif
    for (long i = 0; i < n; i++) y[i] = y[i] * 2 + x[i];
}"""


def launch(rt, kernel, y, x, n, *, stream=None):
    rt.launch(kernel, y, x, n, stream=stream)


CHECKED = Tunable(
    "checked",
    {
        "ref": Kernel(SRC, "axpy", "PPl", defines={"REPS": 300}),
        "quick": Kernel(SRC, "axpy", "PPl", defines={"REPS": 0}),
    },
    launch,
    check="ref",
)


def workload(rt):
    n = 64
    y = rt.upload(np.arange(n, dtype=np.float32))
    x = rt.upload(np.linspace(-1, 1, n, dtype=np.float32))
    pick = rt.tune(CHECKED, y, x, n)
    if not current_process_mode().discards and os.environ.get("OUT"):
        np.save(os.environ["OUT"], rt.read(y))
        print("pick", pick)
'''

PRODUCTION = (
    "import runpy, sys, warmcli; runpy.run_path(sys.argv[1])['workload'](warmcli.runtime())"
)


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `w.py`, `cc.sh` (a C compiler that adds `$CFLAGS`) and `b.warm`,
    warmed by `warm run` with that compiler and no `CFLAGS`."""
    base = tmp_path_factory.mktemp("tune38")
    (base / "w.py").write_text(WORKLOAD)
    (base / "cc.sh").write_text('#!/bin/sh\nexec cc $CFLAGS "$@"\n')
    (base / "cc.sh").chmod(0o755)
    done = _run(base, [sys.executable, "-m", "warmcli", "run", "w.py", "-b", "b.warm", "-q"])
    assert done.returncode == 0, done.stderr
    return base


def _env(base: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_") and k != "CFLAGS"}
    env.update(WARM_HOME=str(base / "home"), WARM_CC=str(base / "cc.sh"), PYTHONPATH=str(ROOT))
    return {**env, **extra}


def _run(base: Path, argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    env = _env(base, **extra)
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=base, timeout=120)


def _production(base: Path, out: str, **extra: str) -> tuple[np.ndarray, str, str]:
    """The workload run as a production process: its output array, stdout and stderr."""
    done = _run(base, [sys.executable, "-c", PRODUCTION, "w.py"], OUT=str(base / out), **extra)
    assert done.returncode == 0, done.stderr
    return np.load(base / out), done.stdout, done.stderr


def test_a_checked_pick_built_otherwise_here_is_measured_again_not_served(warmed: Path) -> None:
    cold, cold_pick, _ = _production(warmed, "cold.npy", CFLAGS="-DFAST")
    assert cold_pick.split() == ["pick", "ref"]  # the check refuses quick's build here
    served, pick, report = _production(
        warmed, "served.npy", CFLAGS="-DFAST", WARM_BUNDLE="b.warm", WARM_REPORT="1"
    )
    assert pick.split() == ["pick", "ref"], report
    assert served.tobytes() == cold.tobytes()
    assert "1 tune(s)" in report and "tune checked" in report


def test_the_same_build_is_served_and_computes_what_cold_does(warmed: Path) -> None:
    cold, _, _ = _production(warmed, "cold0.npy")
    served, _, report = _production(warmed, "served0.npy", WARM_BUNDLE="b.warm", WARM_REPORT="1")
    assert "served everything" in report
    y, x = np.arange(64, dtype=np.float32), np.linspace(-1, 1, 64, dtype=np.float32)
    assert served.tobytes() == cold.tobytes() == (y * 2 + x).tobytes()


def test_warm_run_with_another_build_measures_the_pick_again(warmed: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b.warm"
    bundle.write_bytes((warmed / "b.warm").read_bytes())
    argv = [sys.executable, "-m", "warmcli", "run", "w.py", "-b", str(bundle), "-q"]
    done = _run(warmed, argv, CFLAGS="-DFAST")
    assert done.returncode == 0, done.stderr
    assert "1 new tune(s)" in done.stderr + done.stdout
    _, pick, report = _production(
        warmed, "rewarmed.npy", CFLAGS="-DFAST", WARM_BUNDLE=str(bundle), WARM_REPORT="1"
    )
    assert "served everything" in report and pick.split() == ["pick", "ref"]


def test_warm_check_names_the_tune_whose_pick_is_built_otherwise_here(warmed: Path) -> None:
    argv = [sys.executable, "-m", "warmcli", "check", "b.warm", "--json"]
    done = _run(warmed, argv, CFLAGS="-DFAST")
    assert done.returncode == 1, done.stderr
    assert '"tune"' in done.stdout and "checked" in done.stdout, done.stdout
    same = _run(warmed, argv)
    assert same.returncode == 0, same.stdout + same.stderr


def test_a_pick_measured_on_a_build_served_alike_here_is_kept(warmed: Path, tmp_path: Path) -> None:
    """Another compiler version whose builds serve each other's: a re-warm by it builds its
    own kernels beside but keeps the tune (no two compilers re-measuring each other's picks),
    and a production process with it is served everything."""
    from conftest import cc_binary

    other = cc_binary(tmp_path / "cc-other", "cc (Other) 99.1")
    bundle = tmp_path / "b.warm"
    argv = [sys.executable, "-m", "warmcli", "run", "w.py", "-b", str(bundle), "-q"]
    assert _run(warmed, argv, WARM_CC="cc").returncode == 0
    done = _run(warmed, argv, WARM_CC=str(other))
    assert done.returncode == 0, done.stderr
    assert "and 0 new tune(s)" in done.stderr + done.stdout, done.stdout
    _, _, report = _production(
        warmed, "other.npy", WARM_CC=str(other), WARM_BUNDLE=str(bundle), WARM_REPORT="1"
    )
    assert "served everything" in report, report


SLOW = '''
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = """
#include <fcntl.h>
#include <unistd.h>
void axpy(float *y, const float *x, long n) {
    for (long i = 0; i < n; i++) y[i] = y[i] * 2 + x[i];
    if (SLOW) { close(creat("measuring", 0644)); usleep(200000); }
}"""


def launch(rt, kernel, y, x, n, *, stream=None):
    rt.launch(kernel, y, x, n, stream=stream)


T = Tunable(
    "slow",
    {
        "fast": Kernel(SRC, "axpy", "PPl", defines={"SLOW": 0}),
        "slow": Kernel(SRC, "axpy", "PPl", defines={"SLOW": 1}),
    },
    launch,
    repeats=50,
)


def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    x = rt.upload(np.ones(8, dtype=np.float32))
    rt.tune(T, y, x, 8)
'''


def test_a_tune_a_ctrl_c_cut_short_is_named_by_the_report(tmp_path: Path) -> None:
    """A production process a Ctrl-C interrupted while it measured a tune the bundle lacked
    said `compiled 2 kernel(s) and tuned 0 operation(s)`: the tune it had to measure was
    not named (a compile a Ctrl-C cut short is)."""
    import signal
    import time

    (tmp_path / "w.py").write_text(SLOW)
    env = _env(tmp_path, WARM_REPORT="1", WARM_CC="cc")
    proc = subprocess.Popen(
        [sys.executable, "-c", PRODUCTION, "w.py"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "measuring").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the slow candidate never ran"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, err
    assert "compiled 2 kernel(s) and tuned 1 operation(s)" in err, err
    assert "tune slow float32[8] float32[8] 8 (measuring interrupted: nothing stored)" in err, err


LATE = """
import os
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] * 2; }"
CANDIDATES = {"a": Kernel(SRC, "f", "Pl"), "b": Kernel(SRC + " ", "f", "Pl")}


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


T = Tunable("late", CANDIDATES, launch, check="a")
T.candidates["c"] = Kernel(os.environ.get("EDITED", SRC) + "  ", "f", "Pl")


def workload(rt):
    rt.tune(T, rt.buffer(4), 4)
"""


def test_candidates_added_after_the_tunable_is_made_are_refused(tmp_path: Path) -> None:
    """A tunable keyed its candidate set where it was made, but held the caller's dict: a
    candidate added to it afterwards (`T.candidates["c"] = ...`) was measured, and picked,
    under the old checksum, so an edit of it (`EDITED`: `y[i] = -1`, which the check refuses
    cold) was served that pick unmeasured, unchecked (`served everything`). The candidates are
    fixed where the Tunable is made: a change is refused, naming it."""
    (tmp_path / "w.py").write_text(LATE)
    argv = [sys.executable, "-m", "warmcli", "run", "w.py", "-b", "b.warm", "-q"]
    done = _run(tmp_path, argv, WARM_CC="cc")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "tunable late: its candidates are fixed where the Tunable is made" in done.stderr


def test_fixed_candidates_still_copy_and_pickle() -> None:
    import copy
    import pickle

    from warmcli import Kernel, Tunable

    k = Kernel("void f(float *y) { }", "f", "P")
    mine = {"a": k, "b": Kernel("void f(float *y) {  }", "f", "P")}
    t = Tunable("t", mine, _launch_nothing)
    mine["c"] = k  # the caller's own dict: the tunable keeps the set its checksum keys
    assert list(t.candidates) == ["a", "b"]
    again = pickle.loads(pickle.dumps(t.candidates))
    assert dict(again) == dict(t.candidates) and copy.copy(t.candidates) == t.candidates
    assert {**t.candidates, "c": k}["c"] is k  # a new mapping from it is the caller's own
    with pytest.raises(TypeError, match="tunable t: its candidates are fixed"):
        again["c"] = k  # type: ignore[index]


def _launch_nothing(rt: object, kernel: object, y: object, *, stream: object = None) -> None:
    pass
