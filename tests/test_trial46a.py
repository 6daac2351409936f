"""trial46a: warm added to a project's CI from the README alone (a package of host C kernels,
one with a header, one tunable, warmed through its pytest suite, cached between CI jobs,
shipped as package data, served by a pre-fork server). What it found that README and warm
disagreed on, each a test that failed before its fix."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

# A workload that prints once a pass and then lingers, so that a terminal's progress bars are
# redrawn (Rich's `Live` redraws at each print, and ten times a second) while each pass runs.
LINGERING = r"""
import time
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void sc(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * F; }"
T = Tunable(
    "sc",
    {f"f{f}": Kernel(SRC, "sc", "Pi", defines={"F": f}, name="sc") for f in (1, 2)},
    lambda rt, k, x, n, *, stream=None: rt.launch(k, x, n, stream=stream),
)


def workload(rt):
    x = rt.buffer(64, "float32")
    rt.tune(T, x, 64)
    print("pass-ended", flush=True)
    time.sleep(0.6)
"""


def _in_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """`python -m warmcli *args` under a pseudo-terminal: its exit code and all it drew."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "warmcli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_no_progress_bar_is_drawn_during_the_verify_pass(tmp_path: Path) -> None:
    """README: the bars are shown "each only while the pass can advance it". The verify pass
    advances neither, yet the CompileAndAutotune pass's bars (kernels 2/2, candidates 2/2)
    were drawn again at every print and every tenth of a second until the run ended."""
    (tmp_path / "w.py").write_text(LINGERING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path / "home"), COLUMNS="120", LINES="40", TERM="xterm")
    code, shown = _in_terminal(["run", "w.py", "--bundle", "w.warm"], tmp_path, env)
    assert code == 0, shown
    marks = shown.split("pass-ended")
    assert len(marks) == 4, shown  # once a pass, the verify pass's last
    assert "CompileAndAutotune: candidates measured" in marks[1] + marks[2], shown
    assert "kernels compiled" not in marks[3] and "candidates measured" not in marks[3], marks[3]


# A Ctrl-C that lands while a fork's own hooks run (`os.register_at_fork`'s, warm's
# `warmcli.forking._after_in_parent` releasing the locks it took), made certain here: a fake
# held lock whose release, called from that hook, raises SIGINT at the process.
FORK_HOOK_CTRL_C = r"""
import os, signal, sys, time
from warmcli import forking
from warmcli.warming.isolation import interrupt_on_signals
import warmcli.__main__ as cli


class FakeHeldLock:
    '''A lock `forking` takes before a fork and releases after it, in the parent; its
    release sends SIGINT, so that the handler runs inside the fork's hook.'''

    def __init__(self):
        self.armed = False

    def acquire(self, blocking=True, timeout=-1):
        return True

    def release(self):
        if self.armed and os.getpid() == PARENT:
            self.armed = False
            signal.raise_signal(signal.SIGINT)


class Owner:
    pass


PARENT = os.getpid()
owner = Owner()
forking.new_rlock(owner, held=True)
owner._lock = FakeHeldLock()
for name, install in (("supervisor", lambda: signal.signal(signal.SIGINT, cli._on_ctrl_c)),
                      ("worker", interrupt_on_signals)):
    install()
    owner._lock.armed = True
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        for _ in range(200):  # a signal sent again comes within these few milliseconds
            time.sleep(0.005)
        print(name, "lost", flush=True)
    except KeyboardInterrupt:
        print(name, "interrupted", flush=True)
"""


def test_a_ctrl_c_landing_in_a_forks_hook_still_stops(tmp_path: Path) -> None:
    """README: SIGINT "at any point stops the run" (exit 130), and no command prints a
    traceback. A Ctrl-C sent as `warm run` forked its worker, landing in warm's own
    after-fork hook, raised its `KeyboardInterrupt` where Python only prints it: `Exception
    ignored in: <function _after_in_parent ...>`, a traceback, and the run went on to exit 0
    (seen about 1 run in 40, the signal sent 0.2 to 0.65 s after the start). Now the handler
    sends it again, answered once the hook has returned, in the supervisor and in the worker
    alike (a workload's fork)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run(
        [sys.executable, "-c", FORK_HOOK_CTRL_C],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["supervisor interrupted", "worker interrupted"], (
        proc.stdout + proc.stderr
    )


# Ctrl-C landing in a C extension's init, under the import of warm's command module, where the
# extension turns it into an ImportError after printing it (as numpy's `import_array()` does:
# `numpy._core.multiarray failed to import`, seen in a trial, Ctrl-C sent 0.2 s after `warm run`
# began). A real C extension, built here, does that; a `sitecustomize` loads it as
# `warmcli.cli.run` makes its first import, and the module its init imports sends SIGINT.
MANGLER_C = r"""
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "mangler", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_mangler(void) {
    PyObject *core = PyImport_ImportModule("mangler_core");  /* as numpy's import_array() */
    if (core == NULL) {
        PyErr_Print();
        PyErr_SetString(PyExc_ImportError, "mangler_core failed to import");
        return NULL;
    }
    Py_DECREF(core);
    return PyModule_Create(&def);
}
"""
MANGLER_CORE = """
import signal
signal.raise_signal(signal.SIGINT)
len("the handler runs here, in this module's import")
"""
SITECUSTOMIZE = """
import builtins

_import = builtins.__import__


def _importing(name, globals=None, *args, **kwargs):
    if (globals or {}).get("__name__") == "warmcli.cli.run":
        builtins.__import__ = _import
        import mangler  # noqa: F401
    return _import(name, globals, *args, **kwargs)


builtins.__import__ = _importing
"""


def test_ctrl_c_in_a_c_extensions_import_is_one_line_and_130(tmp_path: Path) -> None:
    """README (Exit codes): interrupted is `warm: interrupted`, exit 130; none is a traceback.
    Ctrl-C landing in a C extension's init as the command module was imported (numpy's, by
    `warmcli.cli.run`) was printed as a traceback by the extension and turned into an
    ImportError, which left warm with its own traceback, exit 1. The command module's import
    now holds a stop until it has finished, then answers it as before (one line, 130)."""
    import sysconfig

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "mangler_core.py").write_text(MANGLER_CORE)
    (tmp_path / "mangler.c").write_text(MANGLER_C)
    built = site / ("mangler" + sysconfig.get_config_var("EXT_SUFFIX"))
    include = sysconfig.get_paths()["include"]
    cc = ["cc", "-shared", "-fPIC", f"-I{include}", str(tmp_path / "mangler.c"), "-o", str(built)]
    subprocess.run(cc, check=True, capture_output=True, timeout=120)
    (tmp_path / "w.py").write_text('DEVICE = "host"\ndef workload(rt):\n    pass\n')
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{root}", WARM_HOME=str(tmp_path / "h"))
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", "w.py", "-b", "w.warm"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (130, "warm: interrupted\n"), proc.stderr
    assert not (tmp_path / "w.warm").exists()


CATCHES = r"""
from warmcli import Kernel

K = Kernel("void k(float *x, int n) { x[0] = 1; }", "k", "Pi")


def workload(rt):
    b = rt.buffer(4, "float32")
    try:  # as pytest does with each test's error
        rt.launch(K, b, 4)
    except Exception as exc:
        print("caught", type(exc).__name__)
"""


def test_a_missing_compiler_stops_the_run_though_the_workload_caught_it(tmp_path: Path) -> None:
    """README (Environment variables): a `WARM_CC` not found "stops `warm run` with `warm:
    error: cc: compiler '...' not found ...; needed at FILE:LINE during CompileOnly`" (exit 2:
    no compiler). Warming a pytest suite (each test's error caught), the run instead went on:
    `the workload launched nothing`, `stored 0`, `verify: ... the bundle is complete`, exit 0,
    an empty bundle left for CI to cache and serve. The pass now fails on it once the entry
    returns, as where the workload lets it out (a compile that fails is a verify miss, exit 1)."""
    (tmp_path / "w.py").write_text(CATCHES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path / "h"), WARM_CC="nosuchcc")
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", "w.py", "-b", "w.warm"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    said = "warm: error: cc: compiler 'nosuchcc' not found (the host backend's C compiler: "
    said += f"named by WARM_CC); needed at {tmp_path / 'w.py'}:10 during CompileOnly\n"
    assert (proc.returncode, proc.stderr) == (2, said), proc.stdout + proc.stderr
    assert "complete" not in proc.stdout
    assert not (tmp_path / "w.warm").exists() and not (tmp_path / "w.warm.lock").exists()


def test_a_narrow_terminal_cuts_a_name_before_its_value(tmp_path: Path) -> None:
    """README: in a terminal too narrow, "where a name and its value do not both fit, the name
    is cut (`…`), never the value". At 12 columns a pass table's list kept each name 5 cells
    wide (half the width) and folded the value: `seco…  0.000` over a line `s`. A value that
    fits once the name is cut further is now shown whole (`s…  0.000 s`)."""
    (tmp_path / "w.py").write_text(LINGERING.replace("time.sleep(0.6)", "pass"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path / "home"), COLUMNS="12", LINES="40", TERM="dumb")
    code, shown = _in_terminal(["run", "w.py", "--bundle", "w.warm"], tmp_path, env)
    assert code == 0, shown
    lines = [ln.rstrip() for ln in shown.replace("\r", "").split("\n")]
    assert "s" not in [ln.strip() for ln in lines], lines  # no value's unit folded apart
    whole = [ln for ln in lines if re.fullmatch(r"\S+…  \d+\.\d{3} s", ln)]
    assert len(whole) == 6, lines  # each pass's compilation and autotune seconds
    assert max(len(ln) for ln in lines if "…" in ln) <= 12, lines
