"""The journal `warm run`'s worker keeps for its supervisor (`warmcli.warming.isolation`): the pass
it is in, the tune candidate it is measuring, every compiler process group it starts, what it
stored and the exit code it returned, one JSON line each, read back once the worker has ended.

The journal is a file in memory both processes share (`os.memfd_create`, a temporary file where
there is none), opened to append: never in `TMPDIR`, so a full temporary folder, which a run that
compiles nothing needs no room in, does not end the run. It stays a few lines long however many
candidates are measured: a candidate's "begin" line is cut off the journal again once it is
measured, where nothing was written after it (the worker's only thread writing: the usual case),
and answered by an "end" line only where something was (before, every candidate left two lines,
about 200 bytes, so a tuning-heavy run filled a small `TMPDIR` or passed a file size limit, and
its supervisor, its exit code never journaled, blamed the workload for ending its process).

State: the worker's journal descriptor, the process that owns it and a lock for its threads, one
of each per process (a process the workload forks appends only, never cuts). It never prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from typing import IO, Any

from warmcli.records import Record, factory


class _State:
    journal: int | None = None  # the worker's journal file descriptor
    owner: int = 0  # the worker's pid: only it cuts a measured candidate's line off
    lock = threading.RLock()  # the worker's threads (a stop handler's write re-enters)


def open_journal() -> IO[bytes]:
    """A new, empty journal in memory, opened to append (each line lands at its end,
    whichever process writes it), read and write."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("warm-worker-journal", os.MFD_CLOEXEC)
    else:  # pragma: no cover - Linux has memfd_create
        import tempfile

        with tempfile.TemporaryFile() as unlinked:
            fd = os.dup(unlinked.fileno())
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    return open(fd, "w+b", buffering=0)


def arm(journal: int) -> None:
    """In the worker: journal into `journal` from now on."""
    _State.journal, _State.owner = journal, os.getpid()


def write(kind: str, **fields: Any) -> tuple[int, int] | None:
    """Append one line; where the worker wrote it, its start and end in the journal."""
    fd = _State.journal
    if fd is None:
        return None
    line = (json.dumps({"kind": kind, **fields}, default=str) + "\n").encode()
    if os.getpid() != _State.owner:  # a process the workload forked: its lock may be held
        os.write(fd, line)
        return None
    with _State.lock:
        start = os.fstat(fd).st_size
        written = os.write(fd, line)
        return start, (start + written if written == len(line) else -1)


def note_pass(label: str) -> None:
    """The worker starts a pass (a crash outside tuning is reported with it)."""
    write("pass", label=label)


def note_stored(kernels: int, tunes: int) -> None:
    """The worker committed this many kernels and tunes to the bundle (they are kept)."""
    write("stored", kernels=kernels, tunes=tunes)


@contextlib.contextmanager
def measuring(tune_key: str, operation: str, shape_key: str, candidate: str) -> Iterator[None]:
    """The worker measures this candidate now: a crash inside excludes it."""
    begun = write("begin", key=tune_key, operation=operation, shape=shape_key, candidate=candidate)
    try:
        yield
    finally:
        _end(begun)


def _end(begun: tuple[int, int] | None) -> None:
    """A measurement ended: its "begin" line cut off where it is still the journal's last
    (the journal then reads as it did before it), else an "end" line appended."""
    fd = _State.journal
    if begun is not None and fd is not None:
        with _State.lock:
            if os.fstat(fd).st_size == begun[1]:
                os.ftruncate(fd, begun[0])
                return
    write("end")


class Journal(Record, frozen=False):
    """The journal as read back: what the worker was doing last, and how it ended."""

    during: str | None = None
    candidate: dict[str, Any] | None = None
    groups: set[int] = factory(set)
    stored: tuple[int, int] = (0, 0)
    finished: bool = False  # warm's worker returned its exit code (not the workload's `os._exit`)
    code: int = 0  # the exit code it returned (what it exits with)
    unanswered: bool = False  # it stopped for an interrupt its work did not answer
    let_go: bool = False  # it ran the workload's exit functions and lets go (`_let_go`)


def read_journal(fd: int) -> Journal:
    """The journal `fd` as read from its start (a line a crash cut short is skipped)."""
    os.lseek(fd, 0, os.SEEK_SET)
    with open(os.dup(fd), "rb") as fh:
        data = fh.read()
    journal = Journal()
    for raw in data.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:  # a line cut short by the crash
            continue
        if not isinstance(entry, dict):
            continue
        kind = entry.get("kind")
        if kind == "pass":
            journal.during, journal.candidate = entry["label"], None
        elif kind == "begin":
            journal.candidate = entry
        elif kind == "end":
            journal.candidate = None
        elif kind == "stored":
            kernels, tunes = journal.stored
            journal.stored = (kernels + entry["kernels"], tunes + entry["tunes"])
        elif kind == "exit":
            journal.finished, journal.unanswered = True, bool(entry.get("unanswered"))
            journal.code = entry["code"] if isinstance(entry.get("code"), int) else 1
            journal.let_go = bool(entry.get("let_go"))
        elif kind == "compiler":
            (journal.groups.add if entry["started"] else journal.groups.discard)(entry["pgid"])
    return journal
