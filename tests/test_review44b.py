"""Review of review44a's stop hold (`warmcli.forking._hold_stops`: a stop signal sent while a
main thread's fork waits for another thread's bundle read is noted, and sent again as the fork
returns): a stop sent again by a thread that had not run when the main code ended was lost (the
process ended 0); a child another thread forked during the main thread's wait kept the hold's
noting handlers for ever (its SIGTERM swallowed); asyncio's signal callback, woken by the wakeup
fd the noted stop and the stop sent again both wrote, was called twice (and, set aside in the
hold, that fd must still be written for another signal). Real processes, real
forks and signals; the lock waited for is a held one as a bundle's (as in test_forking)."""

from __future__ import annotations

import signal

import pytest
from fork_holds import HOLDER
from fresh_python import fresh_code as _run

# A lock a fork waits for, held by a thread for a second (a bundle's, as another thread reads it).
HELD = (
    "import os, signal, sys, threading, time\n"
    "import warmcli.bundle.waiting  # (as a bundle's reader imports it)\n"
    + HOLDER
    + "owner = locked()\nhold(owner, 1)\n"
)

# The main code ends right after the fork: the stop, noted in its wait, is not to be lost.
ENDS_AFTER_THE_FORK = (
    HELD
    + """
if sys.argv[1] == "term":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
stop = signal.SIGTERM if sys.argv[1] == "term" else signal.SIGINT
threading.Timer(0.2, os.kill, (os.getpid(), stop)).start()
if os.fork() == 0:
    os._exit(0)
"""
)


@pytest.mark.parametrize("stop", ["term", "int"])
def test_a_stop_noted_in_a_forks_wait_is_answered_though_the_main_code_ends_at_once(
    stop: str,
) -> None:
    done = _run(ENDS_AFTER_THE_FORK, stop)
    if stop == "term":
        assert done.returncode == 3, done.stderr  # was 0: the server's sys.exit(3) lost
    else:
        assert done.returncode == -signal.SIGINT, done.stderr  # was 0, as Python ends it
        assert done.stderr.endswith("KeyboardInterrupt\n"), done.stderr
    assert "ignored" not in done.stderr, done.stderr


# Another thread (the holder itself, its RLock taken again) forks while the main thread's fork
# waits for it, its stops held: the child, whose main thread it is, must answer a SIGTERM.
THREAD_FORKS_IN_THE_WAIT = """
import os, signal, sys, threading, time
from warmcli import forking

def stop(signum, frame):
    os._exit(3)

signal.signal(signal.SIGTERM, stop)

class Owner:
    pass

owner = Owner()
owner._lock = forking.new_rlock(owner, held=True)
held, child = threading.Event(), []

def hold():
    with owner._lock:
        held.set()
        while signal.getsignal(signal.SIGTERM) is stop:  # till the main thread's fork holds
            time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2)
            os._exit(0)  # the stop swallowed
        child.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

threading.Thread(target=hold).start()
held.wait()
if os.fork() == 0:
    os._exit(0)
time.sleep(0.5)
print("child", child)
"""


def test_a_child_another_thread_forks_in_the_main_threads_wait_answers_its_stops() -> None:
    done = _run(THREAD_FORKS_IN_THE_WAIT)
    assert done.stdout == "child [3]\n", done.stdout + done.stderr  # was [0]: SIGTERM noted


# asyncio's loop answers a signal by its wakeup fd, which Python's C handler writes each time
# the signal is delivered: noted in the wait, and sent again.
ASYNCIO = (
    HELD
    + """
import asyncio

async def main():
    calls, loop = [], asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, calls.append, "TERM")
    loop.add_signal_handler(signal.SIGUSR1, calls.append, "USR1")  # (no stop: not held)
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    if os.fork() == 0:
        os._exit(0)
    await asyncio.sleep(0.5)
    print(calls)

asyncio.run(main())
"""
)


def test_an_asyncio_loops_stop_noted_in_a_forks_wait_is_answered_once() -> None:
    done = _run(ASYNCIO)
    assert done.stdout == "['USR1', 'TERM']\n", done.stdout + done.stderr  # TERM was twice


# A second SIGTERM, sent as the fork returns (before the one noted in its wait is sent again):
# the handler answers both, as it would without warm.
TWO_STOPS = (
    HELD
    + """
calls = []
signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
if os.fork() == 0:
    os._exit(0)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.5)
print(len(calls))
"""
)


def test_a_stop_sent_after_the_fork_does_not_take_the_place_of_the_one_noted_in_its_wait() -> None:
    done = _run(TWO_STOPS)
    assert done.stdout == "2\n", done.stdout + done.stderr


# A pre-fork server forks its workers one after another: the stop noted in the first fork's wait,
# sent again as the second fork began, was answered in that fork's function (only printed).
PRE_FORK_LOOP = (
    HELD
    + """
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
others = [Owner() for _ in range(3000)]  # bundles: most of a fork's time is in its functions
for other in others:
    other._lock = forking.new_rlock(other, held=True)
pids = []
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
time.sleep(1)
print("went on")
"""
)


def test_a_stop_noted_in_a_pre_fork_loops_first_fork_stops_the_server() -> None:
    done = _run(PRE_FORK_LOOP)
    assert (done.returncode, done.stdout) == (3, ""), done.stdout + done.stderr  # was 0
    assert "ignored" not in done.stderr, done.stderr
