"""Review of trial43b: the strict report (`warmcli.report().refused`, `WARM_REPORT=1` under
`WARM_STRICT=1`) names what strict mode refused with no bundle loaded and on a runtime
closed before exit too, never `served everything`, and not a forked child's parent's; the
refused-read note says what is lost; a caught Ctrl-C is a stop before a thread's failure.
Real CLI, real production processes, real C compiler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from add_only import KERNELS, warmed
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A strict process: `add` launched, `mul` refused twice (caught), then `{then}`.
STRICT = """
import sys, numpy as np, warmcli
from kernels import ADD, MUL
rt = warmcli.runtime("host")
x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)
for k in (ADD, MUL, MUL):
    try:
        rt.launch(k, x, o, 4)
    except warmcli.StrictMissError:
        print("refused")
{then}
print(len(warmcli.report().refused))
"""


def _served(warm: Warm, cwd: Path, then: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The strict process run in `cwd` with `WARM_STRICT=1 WARM_REPORT=1` and `env`."""
    environ = dict(warm.env, WARM_STRICT="1", WARM_REPORT="1", **env)
    if "WARM_BUNDLE" not in env:
        environ.pop("WARM_BUNDLE", None)
    code = STRICT.format(then=then)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=environ, capture_output=True, text=True
    )


def test_strict_without_a_bundle_names_what_it_refused(warm: Warm, tmp_path: Path) -> None:
    """WARM_STRICT=1 with no bundle loaded (WARM_BUNDLE unset, none at the default path)
    refuses every compile (`no bundle is loaded`); its report said only `this process
    compiled 0 kernel(s) and tuned 0 operation(s) itself`, and `report().refused` was
    empty: those refusals were never recorded. Both name them now."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    home = tmp_path / "home"
    home.mkdir()
    proc = _served(warm, tmp_path, "", WARM_HOME=str(home))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused"] * 3 + ["2"], proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("warm: no bundle is loaded"), proc.stderr
    assert "strict mode refused 2" in first and first.endswith(":"), proc.stderr
    assert "kernel add on host" in proc.stderr and "kernel mul on host" in proc.stderr
    assert proc.stderr.count("kernel mul on host") == 1, proc.stderr
    assert "no-bundle" in proc.stderr, proc.stderr


def test_strict_refusals_outlive_close(warm: Warm, tmp_path: Path) -> None:
    """A served process that calls `warmcli.production.close()` (a suite's teardown, a server's
    shutdown) before exit: its misses were still reported (kept on close), but what strict
    mode refused was read off the open runtimes only, so the report at exit forgot it and
    `report().refused` was empty. Kept on close as the misses are."""
    warmed(warm, tmp_path)
    proc = _served(
        warm,
        tmp_path,
        "import warmcli.production\nwarmcli.production.close()",
        WARM_BUNDLE="b.warm",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", "refused", "1"], proc.stdout + proc.stderr
    assert "served everything" not in proc.stderr, proc.stderr
    # the bundle's lack, as closed (trial48c: it said `no bundle is loaded` before)
    assert "bundle b.warm lacked 1 kernel(s) and 0 tune(s), which strict" in proc.stderr
    assert "kernel mul on host" in proc.stderr and "kernel add" not in proc.stderr


def test_use_bundle_forgets_the_last_bundles_refusals(warm: Warm, tmp_path: Path) -> None:
    """`use_bundle` starts a report about the bundle now in use (its misses forgotten, as
    before): so are the refusals kept on close, the report saying the new bundle served."""
    warmed(warm, tmp_path)
    then = "warmcli.use_bundle('b.warm', strict=True)\nwarmcli.runtime('host')"
    proc = _served(warm, tmp_path, then, WARM_BUNDLE="b.warm")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", "refused", "0"], proc.stdout + proc.stderr
    assert "served everything" in proc.stderr, proc.stderr


def test_a_forked_childs_report_has_not_its_parents_refusals(warm: Warm, tmp_path: Path) -> None:
    """A child forked after its parent's refusal reports what it did itself, as its misses
    are: the parent's refusal is not the child's (its report served everything)."""
    warmed(warm, tmp_path)
    then = (
        "import os\npid = os.fork()\nif pid:\n    os.waitpid(pid, 0)\nelse:\n"
        "    print('child', len(warmcli.report().refused))\n    sys.stdout.flush()\n"
        "    os._exit(0)"
    )
    proc = _served(warm, tmp_path, then, WARM_BUNDLE="b.warm")
    assert proc.returncode == 0, proc.stderr
    assert "child 0" in proc.stdout, proc.stdout + proc.stderr
    assert os.linesep.join(["refused", "refused"]) in proc.stdout


def test_the_refused_read_note_says_only_the_readers_rest_is_lost(
    warm: Warm, tmp_path: Path
) -> None:
    """A workload catching a refused read goes on: what it launches after its `except`
    (`mul` here) is warmed, the verify pass complete. The note said `what it launches or
    tunes after such a read is not warmed in this pass`, untrue of this run: it is what the
    code that read would have launched after the read (the rest of a test) that is lost."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(
        "import numpy as np, warmcli\nfrom kernels import ADD, MUL\n\ndef workload(rt):\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n    try:\n        rt.read(o)\n"
        "    except warmcli.DiscardedReadError:\n        pass\n    rt.launch(MUL, x, o, 4)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the bundle is complete" in proc.stdout, proc.stdout
    notes = [line for line in proc.stdout.splitlines() if "(DiscardedReadError)" in line]
    assert len(notes) == 2, proc.stdout
    assert "what it launches or tunes after such a read is not warmed" not in notes[0]
    assert "the code that read would have launched or tuned after" in notes[0], notes[0]


def test_a_caught_ctrl_c_wins_over_a_threads_failure(warm: Warm, tmp_path: Path) -> None:
    """A workload whose thread died of a refused read, then caught Ctrl-C and returned:
    the thread's failure was said (exit 2) where the same Ctrl-C not caught stops the run
    (exit 130). A stop is a stop, caught or not. (A started `warm run`, never a fork: the
    SIGINT its workload sends itself is what is tried.)"""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(
        "import os, signal, threading, numpy as np\nfrom kernels import ADD\n\n"
        "def workload(rt):\n    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n"
        "    t = threading.Thread(target=lambda: rt.read(o))\n    t.start()\n    t.join()\n"
        "    try:\n        os.kill(os.getpid(), signal.SIGINT)\n"
        "    except KeyboardInterrupt:\n        print('caught')\n"
    )
    proc = Warm(warm.env)("run", "w.py", "-b", "b.warm", cwd=tmp_path, timeout=120)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted" in proc.stderr and "error" not in proc.stderr, proc.stderr
