"""A project's own pytest suite as the warm-up (trial43b): `warm run` of a module calling
`pytest.main`, whose runner catches what warm raises into the workload (Ctrl-C's
`KeyboardInterrupt`, a discarding pass's refused read) and goes on. Real CLI, real pytest,
real C compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

KERNELS = """
import numpy as np
from warmcli import Kernel

ADD = Kernel("void add(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]+1;}",
             "add", "PPi")
MUL = Kernel("void mul(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]*2;}",
             "mul", "PPi")
"""

# Each suite runs without this environment's Hypothesis plugin (pytest loads every plugin
# installed; importing Hypothesis took 0.8 s of CPU at each run's first `pytest.main`):
# no project's suite here has a Hypothesis test, and nothing warm does depends on it.
WARMUP = """
import os
import pytest


def workload(rt):
    pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                 "--rootdir", os.getcwd(), "tests"])
"""


def _project(tmp_path: Path, test_body: str) -> Path:
    """A project in `tmp_path`: `kernels.py`, `warmup.py` (runs its suite) and `tests/`."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "warmup.py").write_text(WARMUP)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
    )
    (tmp_path / "tests" / "test_one.py").write_text(test_body)
    return tmp_path


STOPS_ITSELF = """
import os, signal
import numpy as np
import warmcli
from kernels import ADD


def test_stopped():
    with open("ran.count", "a") as f:
        f.write("x")
    rt = warmcli.runtime()
    o = rt.buffer(4)
    rt.launch(ADD, rt.upload(np.ones(4, np.float32)), o, 4)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaching the worker mid-suite
"""


def test_ctrl_c_that_pytest_catches_still_stops_the_run(warm: Warm, tmp_path: Path) -> None:
    """pytest catches `KeyboardInterrupt` (its `INTERRUPTED` exit) and `pytest.main` returns:
    warm's stop must not be lost there (it went on to the next passes, its compiles refused,
    and exited 1 naming a miss), but end the run as any Ctrl-C does, exit 130."""
    project = _project(tmp_path, STOPS_ITSELF)
    proc = warm("run", "warmup.py", "-b", "b.warm", cwd=project, timeout=120)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted" in proc.stderr
    assert "miss:" not in proc.stdout + proc.stderr
    assert (project / "ran.count").read_text() == "x"  # no later pass ran the suite again


READS_THEN_LAUNCHES = """
import numpy as np
import warmcli
from kernels import ADD, MUL


def test_add_then_mul():
    rt = warmcli.runtime()
    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)
    rt.launch(ADD, x, o, 4)
    assert rt.read(o).tolist() == [2.0] * 4
    rt.launch(MUL, x, o, 4)
    assert rt.read(o).tolist() == [2.0] * 4
"""


def test_a_refused_read_the_suite_catches_is_noted(warm: Warm, tmp_path: Path) -> None:
    """A discarding pass refuses `rt.read`; pytest catches the `DiscardedReadError` as the
    test's failure and goes on, so `mul`, launched after the read, is never queued and the
    verify pass misses it. The run said nothing of the refusal (only pytest's own output
    did): it notes it, once a pass, with what to do."""
    project = _project(tmp_path, READS_THEN_LAUNCHES)
    proc = warm("run", "warmup.py", "-b", "b.warm", cwd=project, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "miss: kernel mul: absent" in proc.stdout
    lines = [line.strip() for line in proc.stdout.splitlines()]
    notes = [line for line in lines if line.startswith("note:") and "DiscardedReadError" in line]
    assert len(notes) == 2, proc.stdout  # CompileOnly's and CompileAndAutotune's
    assert "under CompileOnly" in notes[0] and "--allow-discarded-reads" in notes[0]
    proc = warm(
        "run", "warmup.py", "-b", "b.warm", "--allow-discarded-reads", cwd=project, timeout=120
    )
    # read on, the test's assert fails on the untouched buffer instead: mul is still missed
    assert "miss: kernel mul: absent" in proc.stdout, proc.stdout + proc.stderr
    assert not [line for line in proc.stdout.splitlines() if "(DiscardedReadError)" in line]


def test_a_refused_read_that_ends_the_run_is_said_once(warm: Warm, tmp_path: Path) -> None:
    """A read the workload does not catch ends the run with its error line, as before: no
    note beside it says that the workload caught it."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(
        "import numpy as np\nfrom kernels import ADD\n\ndef workload(rt):\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n    rt.read(o)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("DiscardedReadError") == 1, proc.stderr


def test_strict_report_names_what_it_refused(warm: Warm, tmp_path: Path) -> None:
    """The served suite under WARM_STRICT=1 WARM_REPORT=1: a test meets a kernel the bundle
    lacks (`StrictMissError`, the test fails), and the report at exit said `served everything:
    compiled 0 kernels`: it names what strict mode refused instead."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(
        "import numpy as np\nfrom kernels import ADD\n\ndef workload(rt):\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    code = (
        "import numpy as np, warmcli\nfrom kernels import ADD, MUL\nrt = warmcli.runtime('host')\n"
        "x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\nrt.launch(ADD, x, o, 4)\n"
        "for _ in range(2):\n    try:\n        rt.launch(MUL, x, o, 4)\n"
        "    except warmcli.StrictMissError:\n        print('refused')\n"
    )
    env = dict(warm.env, WARM_BUNDLE="b.warm", WARM_STRICT="1", WARM_REPORT="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout == "refused\nrefused\n", proc.stderr
    assert "served everything" not in proc.stderr, proc.stderr
    assert "lacked 1 kernel(s) and 0 tune(s), which strict mode refused" in proc.stderr
    assert "kernel mul on host" in proc.stderr and "absent" in proc.stderr
    assert "kernel add" not in proc.stderr


def test_launched_nothing_says_a_subprocess_is_not_seen(warm: Warm, tmp_path: Path) -> None:
    """`pytest -n 2` in the warm-up runs every test in xdist's worker processes: warm saw
    nothing, stored nothing and exited 0 saying only `the workload launched nothing`; the
    line now says why that may be (a process it started did the work, unseen)."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    child = (
        "import numpy as np, warmcli\nfrom kernels import ADD\nrt = warmcli.runtime('host')\n"
        "x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\nrt.launch(ADD, x, o, 4)\n"
    )
    (tmp_path / "w.py").write_text(
        "import subprocess, sys\n\ndef workload(rt):\n"
        f"    subprocess.run([sys.executable, '-c', {child!r}], check=True)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the workload launched nothing and tuned nothing" in proc.stdout
    assert "pytest -n" in proc.stdout and "not seen" in proc.stdout, proc.stdout


def test_verify_replay_of_a_suite_that_catches_ctrl_c_is_no_verdict(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm verify --workload` replays the suite once; pytest caught the Ctrl-C and
    returned, and verify judged the replay cut short: `the bundle is complete`, exit 0. It
    is interrupted, exit 130, as `warm run` is."""
    project = _project(tmp_path, STOPS_ITSELF)
    (project / "w.py").write_text(
        "import numpy as np\nfrom kernels import ADD\n\ndef workload(rt):\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", cwd=project, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = warm("verify", "b.warm", "--workload", "warmup.py", cwd=project, timeout=120)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "complete" not in proc.stdout and "interrupted" in proc.stderr


def test_a_read_warning_made_an_error_is_noted(warm: Warm, tmp_path: Path) -> None:
    """Under `--allow-discarded-reads` a read warns; a project whose pytest.ini says
    `filterwarnings = error` (common) makes that warning an exception, which pytest takes
    for the test's failure: `mul`, after the read, was missed with nothing said. Noted."""
    project = _project(tmp_path, READS_THEN_LAUNCHES)
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    proc = warm(
        "run", "warmup.py", "-b", "b.warm", "--allow-discarded-reads", cwd=project, timeout=120
    )
    assert "miss: kernel mul: absent" in proc.stdout, proc.stdout + proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    notes = [line for line in lines if line.startswith("note: a read back under")]
    assert len(notes) == 2 and "DiscardedReadWarning" in notes[0], proc.stdout


def test_ctrl_c_then_the_warmup_raising_on_pytests_code_is_a_stop(
    warm: Warm, tmp_path: Path
) -> None:
    """The README's warm-up raises on pytest's codes but 0 and 1: after Ctrl-C pytest returns
    INTERRUPTED and the module raises on it, or exits with it: a stop, exit 130, not the
    workload's error (exit 2)."""
    project = _project(tmp_path, STOPS_ITSELF)
    for end in ("raise RuntimeError(f'pytest exited {code!r}')", "sys.exit(code)"):
        (project / "warmup.py").write_text(
            "import os, sys\nimport pytest\n\ndef workload(rt):\n"
            "    code = pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:hypothesispytest',"
            " '--rootdir', os.getcwd(), 'tests'])\n"
            f"    if code not in (0, 1):\n        {end}\n"
        )
        proc = warm("run", "warmup.py", "-b", "b.warm", cwd=project, timeout=120)
        assert proc.returncode == 130, proc.stdout + proc.stderr
        assert "interrupted" in proc.stderr and "error" not in proc.stderr, proc.stderr
