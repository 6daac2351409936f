"""Launches and tunes made in a process a pass's workload forked (`os.fork`; a `fork` start
method's `multiprocessing.Pool` or `ProcessPoolExecutor` worker, the default on Linux before
Python 3.14): each child's memory is its own, so what it compiles is neither stored nor
verified, and the pass says so (`note`) rather than call a bundle complete that lacks it.

`watching(runtimes, extra)`, around a pass's run of the workload, opens a pipe the children
inherit (where no descriptor is left, `ulimit -n`, the pass runs unwatched); in a child forked
meanwhile (`os.register_at_fork`), each of the pass's runtimes (those it was given, and the host
runtime it made for the workload: `extra`'s) has its `retired` gate (asked first at each launch
and tune: `warmcli.runtime.runtime`) chained with one that writes the child's pid into the pipe
at its first launch or tune there (where its descriptor is still that pipe: a child that closed
it may hold a file of its own under that number), and the launch goes on as it would. As the
pass's run ends the pipe is read (never waited on): the pids of the children that launched (a
run says them once: `note`'s `also`, the later passes that saw some). A `spawn` or `forkserver`
worker inherits no memory and no pipe: it is not seen (README). Its only state is the pass
watched now and its pipe (`_WATCHED`); it never prints."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from warmcli.runtime.runtime import Runtime

Gate = Callable[[str, Any, tuple[Any, ...], Any], None]
# The pass watched now: its process's pid, the pipe's write end and identity (`_identity`), its
# runtimes (read at the fork).
_WATCHED: list[tuple[int, int, tuple[int, int], Callable[[], list[Runtime]]]] = []
_DIGITS = 20  # a pid has fewer (int() refuses 4,300 and more)


@contextlib.contextmanager
def watching(runtimes: Sequence[Runtime], extra: Any = None) -> Iterator[list[int]]:
    """Watch a pass's run: the list yielded holds, once it ends, the pids of the children
    forked meanwhile that launched or tuned on the pass's runtimes (`extra`: its
    `Companions`, whose runtimes are those made during the pass)."""
    launched: list[int] = []
    try:
        read, write = map(_high, os.pipe())  # never 0, 1 or 2: a workload may have closed those
    except OSError:  # no descriptor left (`ulimit -n`): the pass runs unwatched, not refused
        yield launched
        return
    os.set_blocking(read, False)
    os.set_blocking(write, False)  # a child never waits on a full pipe: its line is dropped
    every = lambda: [*runtimes, *(extra.runtimes if extra is not None else ())]  # noqa: E731
    pipe = _identity(read)  # (a workload that closed its end may hold that number now)
    _WATCHED[:] = [(os.getpid(), write, pipe, every)]
    try:
        yield launched
    finally:
        _WATCHED.clear()
        said = b""
        ours = [fd for fd in (write, read) if _same(fd, pipe)]  # (`os.closerange` in it)
        with contextlib.suppress(OSError):  # (nothing to read: BlockingIOError)
            while read in ours and (chunk := os.read(read, 65536)):
                said += chunk
        for fd in ours:
            os.close(fd)
        pids = {int(pid) for pid in said.split() if pid.isdigit() and len(pid) < _DIGITS}
        launched += sorted(pids)  # (what is no pid, a hostile child's, is left out)


def _identity(fd: int) -> tuple[int, int]:
    """What names the file `fd` is open on: its device and inode."""
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _same(fd: int, pipe: tuple[int, int]) -> bool:
    """Whether `fd` is still the pipe `pipe` (`_identity`) this module opened."""
    try:
        return _identity(fd) == pipe
    except OSError:
        return False


def _high(fd: int) -> int:
    """`fd`, or a copy of it numbered 3 or above (the low one closed again)."""
    if fd > 2:
        return fd
    import fcntl

    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def note(label: str, children: list[int], also: Sequence[str] = ()) -> str:
    """The pass's note of the children that launched (`also`: in the later passes named)."""
    if also:  # said once, by the first pass: "during A, B and C"
        label = f"{', '.join([label, *also[:-1]])} and {also[-1]}"
    return (
        f"{len(children)} child process(es) the workload forked (pid {children[0]}"
        f"{', ...' if len(children) > 1 else ''}) launched or tuned during {label}: a child "
        "process is not seen, what it compiles is neither stored nor verified (launch in the "
        "workload's own process, or its threads)"
    )


def _forked() -> None:
    """In a child forked during a watched pass: the pass's runtimes' gates chained."""
    if not _WATCHED or _WATCHED[0][0] == os.getpid():
        return
    _, write, pipe, every = _WATCHED[0]
    told: list[bool] = []
    for runtime in every():
        runtime.retired = _gate(runtime.retired, write, pipe, told)


def _gate(before: Gate | None, write: int, pipe: tuple[int, int], told: list[bool]) -> Gate:
    def gate(what: str, thing: Any, args: tuple[Any, ...], stream: Any) -> None:
        if not told:  # this child's first launch or tune: its pid, once
            told.append(True)
            with contextlib.suppress(OSError):  # the pass ended (its pipe closed), or full
                if _same(write, pipe):  # (not a file the child opened under its number)
                    os.write(write, f"{os.getpid()}\n".encode())
        if before is not None:
            before(what, thing, args, stream)

    return gate


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
