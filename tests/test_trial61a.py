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

FORK_DURING_FIRST_IMPORT = r"""
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
for _ in range(300):  # a hang (the child waiting for ever) is said after 30 s, not waited on
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
"""


def test_a_fork_during_a_threads_first_import_of_warm_waits_for_it() -> None:
    """Before: `child hung` (its `use_bundle` asleep on `warmcli.production`'s import lock)."""
    done = fresh_code(FORK_DURING_FIRST_IMPORT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child 0", done.stdout + done.stderr
