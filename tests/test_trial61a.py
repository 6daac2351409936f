"""User trial 61a: the ways production runs Python processes against a bundle.

A pre-fork server whose thread reaches warm first (`warmcli.use_bundle` in a worker thread,
the first name of warm's it reads) imports `warmcli.production`, a second of imports on a
loaded machine, under that module's import lock. A fork made by the main thread meanwhile, before
that import reached `warmcli.forking` (whose hook makes a fork wait for such an import), made a
child whose own first `warmcli.use_bundle` waited for ever on the lock its parent's thread held
(trial61a: the child asleep in importlib's `acquire`). `import warmcli` now registers a hook that
waits for another thread's import for warm (`warmcli.import_wait`) until `warmcli.forking` waits
itself.

Real parts: a fresh interpreter forking with `os.fork`, the real import system (a finder on
`sys.meta_path` only holds the thread's import long enough for the fork to land inside it).
"""

from __future__ import annotations

from fresh_python import fresh_code
from test_production_lifecycle import CHILD_WAITED

FORK_DURING_FIRST_IMPORT = (
    r"""
import os, sys, threading, time
import warmcli

inside = threading.Event()

class Slow:  # the thread's first import of a module of warm's held 1.5 s (its lock taken)
    def find_spec(self, name, path=None, target=None):
        mine = threading.current_thread() is not threading.main_thread()
        if mine and name.startswith("warmcli.") and not inside.is_set():
            inside.set()
            time.sleep(1.5)
        return None

sys.meta_path.insert(0, Slow())
thread = threading.Thread(target=lambda: warmcli.use_bundle(None))
thread.start()
assert inside.wait(60), "the thread imported no module of warm's"
assert "warmcli.forking" not in sys.modules  # (no hook of forking's yet)
pid = os.fork()
if pid == 0:
    warmcli.use_bundle(None)  # the child's own first use: importlib's lock of the module
    os._exit(0)
thread.join()
"""
    + CHILD_WAITED  # (a hang, the child waiting for ever, said after 30 s)
)


def test_a_fork_during_a_threads_first_import_of_warm_waits_for_it() -> None:
    """Before: `child hung` (its `use_bundle` asleep on `warmcli.production`'s import lock)."""
    done = fresh_code(FORK_DURING_FIRST_IMPORT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child exit 0", done.stdout + done.stderr


STOP_DURING_THE_WAIT = r"""
import importlib.machinery, os, signal, sys, threading, time
import warmcli

inside, main = threading.Event(), threading.main_thread().ident

def in_the_forks_wait():
    frame = sys._current_frames().get(main)
    while frame is not None and frame.f_code.co_name != "_before_fork":
        frame = frame.f_back
    return frame is not None

class Slow:  # the thread's first module of warm's: its import lock held until Ctrl-C is sent
    def find_spec(self, name, path=None, target=None):
        mine = threading.current_thread() is not threading.main_thread()
        if not (mine and name.startswith("warmcli.") and not inside.is_set()):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def slow(module):
            inside.set()
            for _ in range(600):  # the main thread's fork waits for this import: Ctrl-C then
                if in_the_forks_wait():
                    os.kill(os.getpid(), signal.SIGINT)
                    break
                time.sleep(0.01)
            time.sleep(0.5)
            run(module)
        spec.loader.exec_module = slow
        return spec

sys.meta_path.insert(0, Slow())
thread = threading.Thread(target=lambda: warmcli.use_bundle(None))
thread.start()
assert inside.wait(60), "the thread imported no module of warm's"
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    for _ in range(50):
        time.sleep(0.1)
    print("lost")
except KeyboardInterrupt:
    print("interrupted")
thread.join()
"""


def test_a_ctrl_c_while_a_fork_waits_for_a_threads_first_import_of_warm_is_raised() -> None:
    """The package's hook (before `warmcli.forking` is imported) waited in a loop of its own,
    where a Ctrl-C's `KeyboardInterrupt` is raised inside the fork's hook: Python printed it
    ("Exception ignored in: <function _before_fork ...>", a traceback) and the fork went on,
    the Ctrl-C lost (review62a). The hook now waits as `warmcli.forking`'s does: the stop ends
    the wait and is raised once the fork has returned, nothing printed."""
    done = fresh_code(STOP_DURING_THE_WAIT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted", done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


# The same, the Ctrl-C sent as the fork's hook imports `warmcli.forking` (its wait's module):
# the main thread's import of it sends SIGINT from the finder, inside the hook.
STOP_DURING_THE_HOOKS_IMPORT = STOP_DURING_THE_WAIT.replace(
    "sys.meta_path.insert(0, Slow())",
    """class InTheHook:  # the hook's own import of forking: Ctrl-C there
    def find_spec(self, name, path=None, target=None):
        if name == "warmcli.forking" and threading.current_thread() is threading.main_thread():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        return None

sys.meta_path.insert(0, Slow())
sys.meta_path.insert(0, InTheHook())""",
)


def test_a_ctrl_c_as_the_forks_hook_imports_its_wait_is_raised() -> None:
    """Before: the hook imported `warmcli.forking` with the program's handler set, and a
    Ctrl-C inside that import (a loaded machine's seconds: `typing` and the rest) raised there,
    printed as "Exception ignored in: <function _before_fork ...>" and lost (4 of 6 runs of the
    test above beside 8 busy processes). The hook now notes a stop as it imports, and forking's
    hold takes it as one that came in the wait."""
    assert "InTheHook" in STOP_DURING_THE_HOOKS_IMPORT
    done = fresh_code(STOP_DURING_THE_HOOKS_IMPORT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted", done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
