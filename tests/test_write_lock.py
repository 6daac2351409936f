"""The bundle's write lock (`warmcli.bundle.lock`) on real files in real processes: a file
system without `flock` (an LD_PRELOAD shim built with the system cc) and a forked child."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_NO_FLOCK = "#include <errno.h>\nint flock(int fd, int op) { errno = ENOSYS; return -1; }\n"


def _no_flock_shim(tmp_path: Path) -> Path:
    cc = shutil.which("cc")
    if cc is None or not sys.platform.startswith("linux"):
        pytest.skip("needs the system cc on Linux to build an LD_PRELOAD shim")
    source = tmp_path / "noflock.c"
    source.write_text(_NO_FLOCK)
    shim = tmp_path / "noflock.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", shim, source], check=True)
    return shim


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_file_system_without_flock_takes_the_lock_and_says_nothing(tmp_path: Path) -> None:
    shim = _no_flock_shim(tmp_path)
    bundle = tmp_path / "b.warm"
    code = f"""
        from pathlib import Path
        from warmcli.bundle.lock import write_lock
        for _ in range(2):  # taken, released, taken again
            with write_lock(Path({str(bundle)!r})):
                with write_lock(Path({str(bundle)!r})):  # the thread that holds it again
                    pass
        print("done")
    """
    first = _python(code, LD_PRELOAD=str(shim))
    assert (first.returncode, first.stdout, first.stderr) == (0, "done\n", "")
    again = _python(code, LD_PRELOAD=str(shim))  # a second writer after the first
    assert (again.returncode, again.stdout, again.stderr) == (0, "done\n", "")


def _other_writer_waits(bundle: Path) -> float:
    """Seconds another process waits for the write lock of `bundle`."""
    took = _python(
        f"""
        import time
        from pathlib import Path
        from warmcli.bundle.lock import write_lock
        t = time.perf_counter()
        with write_lock(Path({str(bundle)!r})):
            print(time.perf_counter() - t)
        """
    )
    assert took.returncode == 0, took.stderr
    return float(took.stdout)


def test_a_child_forked_while_a_thread_holds_the_lock_does_not_keep_it(tmp_path: Path) -> None:
    import threading

    from warmcli.bundle.lock import write_lock

    bundle = tmp_path / "b.warm"
    held, go = threading.Event(), threading.Event()

    def writer() -> None:  # e.g. a serving thread storing what it built
        with write_lock(bundle):
            held.set()
            go.wait()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait()
    pid = os.fork()  # e.g. a data-loader worker forked meanwhile
    if pid == 0:  # pragma: no cover - the child
        import time

        time.sleep(15)
        os._exit(0)
    try:
        go.set()
        thread.join()  # the writer is done: the lock is free
        assert _other_writer_waits(bundle) < 5
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_a_forked_child_never_reenters_the_lock_its_parent_holds(tmp_path: Path) -> None:
    from warmcli.bundle.lock import write_lock

    bundle = tmp_path / "b.warm"
    read, write = os.pipe()
    with write_lock(bundle):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child: the parent's lock is not its own
            code = 1
            try:
                with write_lock(bundle):
                    os.write(write, b"in")
                code = 0
            finally:
                os._exit(code)
        import select

        assert select.select([read], [], [], 1.5)[0] == []  # the child waits for the parent
    assert os.read(read, 2) == b"in"  # and takes it once the parent released it
    assert os.waitpid(pid, 0)[1] == 0
    os.close(read)
    os.close(write)


def test_an_interrupt_while_waiting_leaves_no_descriptor_open(tmp_path: Path) -> None:
    import signal
    import time

    from warmcli.bundle.lock import write_lock

    bundle = tmp_path / "b.warm"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from warmcli.bundle.lock import write_lock\n"
            f"with write_lock(Path({str(bundle)!r})):\n"
            "    print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        before = _descriptors()
        signal.signal(signal.SIGALRM, signal.default_int_handler)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        started = time.perf_counter()
        with pytest.raises(KeyboardInterrupt), write_lock(bundle):
            pass
        assert time.perf_counter() - started < 5
        # None new but another thread's socket or pipe (a count of all saw this test process's
        # shared Dask cluster close when idle meanwhile: stop 49's ci4), none of this bundle's
        new = set(_descriptors().items()) - set(before.items())
        assert all(target.startswith(("socket:", "pipe:")) for _, target in new), new
        assert not [target for target in _descriptors().values() if str(tmp_path) in target]
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        holder.kill()
        holder.wait()


def _descriptors() -> dict[str, str]:
    """This process's descriptors (`/proc/self/fd`) and what each names, where it still does."""
    named = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own, closed since)
            named[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return named
