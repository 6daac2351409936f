"""Review of review44b's stop hold (`warmcli.forking`): a fork made by a signal handler that a
main thread's fork's wait ran (a SIGCHLD or SIGUSR1 handler starting a worker) released, as it
returned, the locks the outer fork had taken and ended its hold: the outer fork went on with a
bundle's lock not held (another thread could be in SQLite as it forked) and a stop sent in the
rest of its wait was only printed ("Exception ignored"). A loop's wakeup fd set back after a
fork's wait warned on a full buffer where trio and uvloop had said not to. Real processes,
forks and signals; the locks waited for are held ones as a bundle's (as in test_forking)."""

from __future__ import annotations

import pytest
from fork_holds import HOLDER
from fresh_python import fresh_code as _run

# Lock A free (the outer fork takes it at once), B held by a thread for 1 s: the outer fork
# waits for B; at 0.1 s a SIGUSR1's handler forks (that fork waits for nothing: its child may not
# use SQLite), at 0.7 s a SIGTERM comes in what is left of the outer fork's wait.
NESTED = (
    """
import os, signal, sys, threading, time
owned = []
def check():  # registered before warm's: runs after warm's own `before`
    if "A" in globals():
        owned.append(A._lock._is_owned())
os.register_at_fork(before=check)
"""
    + HOLDER
    + """
A, B = locked(), locked()
hold(B, 1)
def usr1(signum, frame):
    if os.fork() == 0:
        os.write(1, b"unsafe\\n" if forking.sqlite_unsafe() else b"safe\\n")
        os._exit(0)
    os.wait()
signal.signal(signal.SIGUSR1, usr1)
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
threading.Timer(0.7, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    if os.fork() == 0:
        os._exit(0)
    time.sleep(2)
finally:
    print(owned, flush=True)
"""
)


def test_a_fork_in_a_handler_run_in_a_forks_wait_leaves_that_forks_locks_and_hold() -> None:
    done = _run(NESTED)
    assert done.stdout == "unsafe\n[True, True]\n", done.stdout + done.stderr  # was [True, False]
    assert done.returncode == 3, done.stderr  # was 0: the SIGTERM only printed in the wait
    assert "ignored" not in done.stderr, done.stderr


# A loop's wakeup fd whose buffer is full (its loop busy), then a SIGUSR1 after a fork: asyncio's
# (set with Python's default, warn_on_full_buffer=True) has Python print that the signal's byte
# was dropped; trio's and uvloop's (warn_on_full_buffer=False) print nothing. The fork waits
# for a held lock (`argv[2]` "held") or not.
FULL = (
    """
import asyncio, os, signal, socket, sys, threading, time
"""
    + HOLDER
    + """
owner = locked()
signal.signal(signal.SIGUSR1, lambda signum, frame: None)
def fill(sock):
    sock.setblocking(False)
    try:
        while True:
            sock.send(b"x" * 4096)
    except BlockingIOError:
        pass
def fork_then_signal(sock):
    fill(sock)
    if sys.argv[2] == "held":
        hold(owner, 0.2)
    if os.fork() == 0:
        os._exit(0)
    os.wait()
    signal.raise_signal(signal.SIGUSR1)
if sys.argv[1] == "asyncio":
    async def main():
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, lambda: None)  # (its wakeup fd set)
        fork_then_signal(loop._csock)
    asyncio.run(main())
else:
    read, write = socket.socketpair()
    write.setblocking(False)
    signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    fork_then_signal(write)
"""
)


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_loops_wakeup_fd_warns_on_a_full_buffer_after_a_forks_wait_as_before(loop: str) -> None:
    plain, waited = (_run(FULL, loop, held) for held in ("free", "held"))
    assert plain.returncode == waited.returncode == 0, plain.stderr + waited.stderr
    warned = "Exception ignored when trying to write to the signal wakeup fd"
    assert (warned in plain.stderr) is (loop == "asyncio"), plain.stderr
    assert (warned in waited.stderr) is (loop == "asyncio"), waited.stderr  # trio's: was warned
