"""The journal `warm run`'s worker keeps for its supervisor (`warmcli.warming.isolation`): the pass
it is in, the tune candidates it is measuring, every compiler process group it starts, what it
stored and the exit code it returned, read back once the worker has ended.

The journal is three files in memory both processes share (`os.memfd_create`; unlinked temporary
files where there is none, off Linux), not in `TMPDIR`, so a full temporary folder, which a run
that compiles nothing needs no room in, does not end the run. Its log, opened to append, holds one
JSON line for each pass, compiler group, store and exit, appended by the worker and by any process
the workload forks (their compilers too), never cut. Its measurements file holds the candidates the
worker measures now, one line each, rewritten whole by the worker alone as each begins and ends
(one thread: a line written, then the file emptied), so the journal stays a few lines long however
many candidates are measured (before, every candidate left two lines, about 200 bytes, so a
tuning-heavy run filled a small `TMPDIR` or passed a file size limit). A crash names the
measurement under way in the thread it was in, or, in a thread measuring nothing that crashed
in a launch (a launcher's own, a pool's), the last begun: while the worker measures and no other
`faulthandler` is enabled (`PYTHONFAULTHANDLER`, the workload's own, pytest's), the worker's
`faulthandler` writes which thread, and its frames, into a third file (off between
measurements, so the workload, pytest, finds none on; where another is on, the last begun of
those under way is named); a process the workload forked journals no measurement and turns
warm's `faulthandler` off: its crash is its own.

State: the worker's journal, the process that owns it, its measurements under way, its
`faulthandler`'s file while on and a lock for its threads, one of each per process. It never
prints.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import io
import itertools
import json
import os
import re
import threading
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from warmcli.records import Record, factory


class Files(NamedTuple):
    """A journal's files: `log`, appended to by the worker and the processes it forks,
    `measuring`, the worker's measurements under way, rewritten whole by it alone, and
    `faults`, where `faulthandler` says which of the worker's threads crashed it."""

    log: int
    measuring: int
    faults: int


# The frame `faulthandler` shows of a thread in `Runtime.launch`: it crashed launching a kernel.
_LAUNCHING = re.compile(
    rb"[/\\]warmcli[/\\]runtime[/\\]runtime\.py" rb'", line \d+ in launch$', re.MULTILINE
)


class _State:
    journal: Files | None = None  # the worker's journal
    owner: int = 0  # the worker's pid: only it journals measurements
    lock = threading.RLock()  # the worker's threads measuring, and `begun`
    begun: dict[int, bytes] = {}  # noqa: RUF012  (its measurements under way: their lines)
    size = 0  # the length of what `begun` held last, as written
    count = itertools.count()
    faults: weakref.ref[io.FileIO] | None = None  # the file warm's `faulthandler` holds, while on
    forks = False  # whether `_forked` runs in the processes this one forks


def _memory_file(name: str) -> int:
    """A new, empty file in memory, read and write, closed in any program this one runs."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name, os.MFD_CLOEXEC)
    import tempfile  # a platform without memfd_create: an unlinked file in `TMPDIR`

    with tempfile.TemporaryFile() as unlinked:
        return os.dup(unlinked.fileno())


@contextlib.contextmanager
def open_journal() -> Iterator[Files]:
    """A new, empty journal in memory; its log opened to append (each line lands at its
    end, whichever process writes it). Both files are closed as the block ends."""
    made: list[int] = []
    try:
        for name in ("journal", "measuring", "faults"):
            made.append(_memory_file(f"warm-worker-{name}"))
        log = made[0]
        fcntl.fcntl(log, fcntl.F_SETFL, fcntl.fcntl(log, fcntl.F_GETFL) | os.O_APPEND)
        yield Files(*made)
    finally:
        for fd in made:
            os.close(fd)


def arm(journal: Files) -> None:
    """In the worker: journal into `journal` from now on (its `faulthandler` is turned on as
    a measurement begins: `measuring`)."""
    _State.journal, _State.owner = journal, os.getpid()
    _State.begun, _State.size, _State.faults = {}, 0, None
    if not _State.forks:
        _State.forks = True
        os.register_at_fork(after_in_child=_forked)


def _ours() -> bool:
    """Whether the `faulthandler` on is warm's: it holds warm's file, nothing else does (the
    workload's `faulthandler.enable` or `disable` lets go of it)."""
    return _State.faults is not None and _State.faults() is not None


def _faults_on() -> None:
    """As the first of the measurements under way begins: warm's `faulthandler` on, into the
    journal, where none is (`PYTHONFAULTHANDLER`, the workload's own, pytest's: theirs stands)."""
    if (journal := _State.journal) is not None and not faulthandler.is_enabled():
        file = io.FileIO(journal.faults, "w", closefd=False)
        faulthandler.enable(file=file, all_threads=True)
        _State.faults = weakref.ref(file)


def _faults_off() -> None:
    """As the last of the measurements under way ends: warm's `faulthandler` off, where it is
    still warm's (the workload may have enabled its own meanwhile)."""
    if _ours():
        faulthandler.disable()
    _State.faults = None


def _forked() -> None:
    """In a process the worker forks: its crash is not the worker's (warm's `faulthandler`
    off; a `faulthandler` of the workload's own stays on)."""
    if os.getpid() != _State.owner:
        _faults_off()


def write(kind: str, **fields: Any) -> None:
    """Append one line to the log (from the worker or a process the workload forked)."""
    if (journal := _State.journal) is not None:
        os.write(journal.log, (json.dumps({"kind": kind, **fields}, default=str) + "\n").encode())


def note_pass(label: str) -> None:
    """The worker starts a pass (a crash outside tuning is reported with it)."""
    write("pass", label=label)


def note_stored(kernels: int, tunes: int) -> None:
    """The worker committed this many kernels and tunes to the bundle (they are kept)."""
    write("stored", kernels=kernels, tunes=tunes)


@contextlib.contextmanager
def measuring(tune_key: str, operation: str, shape_key: str, candidate: str) -> Iterator[None]:
    """The worker measures this candidate now: a crash inside excludes it. (A process the
    workload forked journals none: its crash is not the worker's.)"""
    if _State.journal is None or os.getpid() != _State.owner:
        yield
        return
    fields = {"key": tune_key, "operation": operation, "shape": shape_key}
    record = {**fields, "candidate": candidate, "thread": threading.get_ident()}
    with _State.lock:
        number = next(_State.count)
        if not _State.begun:
            _faults_on()
        _State.begun[number] = (json.dumps(record) + "\n").encode()
        _rewrite()
    try:
        yield
    finally:
        with _State.lock:
            _State.begun.pop(number, None)
            _rewrite()
            if not _State.begun:
                _faults_off()


def _rewrite() -> None:
    """The measurements under way written over the last in one write, padded with blank
    lines to the last's length, then cut to their own: a crash between leaves no line of
    the last that is not under way. (One thread measuring: a line written into an empty
    file, then the file emptied.)"""
    if (journal := _State.journal) is not None:
        data = b"".join(_State.begun.values())
        if data:
            os.pwrite(journal.measuring, data.ljust(_State.size, b"\n"), 0)
        if len(data) < _State.size:
            os.ftruncate(journal.measuring, len(data))
        _State.size = len(data)


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


def _read(fd: int) -> list[dict[str, Any]]:
    """The lines of `fd` that read as JSON objects (a line a crash cut short is skipped)."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    entries = []
    for raw in data.splitlines():
        with contextlib.suppress(ValueError):
            if isinstance(entry := json.loads(raw), dict):
                entries.append(entry)
    return entries


def read_journal(files: Files) -> Journal:
    """The journal as read back: its log from its start, and the measurement under way in
    the thread that crashed the worker, where `faulthandler` named it; if none, and that
    thread crashed in `Runtime.launch` (a launcher's own thread), the last begun of those under
    way, else none; where it named no thread, the last begun of those under way."""
    journal = Journal()
    for entry in _read(files.log):
        kind = entry.get("kind")
        if kind == "pass":
            journal.during = entry["label"]
        elif kind == "stored":
            kernels, tunes = journal.stored
            journal.stored = (kernels + entry["kernels"], tunes + entry["tunes"])
        elif kind == "exit":
            journal.finished, journal.unanswered = True, bool(entry.get("unanswered"))
            journal.code = entry["code"] if isinstance(entry.get("code"), int) else 1
            journal.let_go = bool(entry.get("let_go"))
        elif kind == "compiler":
            (journal.groups.add if entry["started"] else journal.groups.discard)(entry["pgid"])
    fields = ("key", "operation", "shape", "candidate")
    under_way = [
        e for e in _read(files.measuring) if all(isinstance(e.get(f), str) for f in fields)
    ]
    crashed, launching = _crashed_thread(files.faults)
    if crashed is not None:  # its own measurement, else (a launcher's thread) any, if launching
        under_way = [e for e in under_way if e.get("thread") == crashed] or (
            under_way if launching else []
        )
    journal.candidate = under_way[-1] if under_way else None
    return journal


def _crashed_thread(fd: int) -> tuple[int | None, bool]:
    """The thread `faulthandler` said the worker crashed in (`Current thread 0x...`), or None,
    and whether it was launching a kernel then (`Runtime.launch` among its frames)."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    found = list(re.finditer(rb"^Current thread (0x[0-9a-fA-F]+).*$", data, re.MULTILINE))
    if not found:
        return None, False
    frames = data[found[-1].end() :].split(b"\n\n", 1)[0]  # its frames: up to a blank line
    return int(found[-1][1], 16), _LAUNCHING.search(frames) is not None
