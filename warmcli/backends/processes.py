"""The child processes warm starts (a compiler, a compiler's `--version`): the one way to
start, track, stop and reap them.

`run` starts a command in its own process group (so stopping it stops its children too: a
compiler driver's cc1, as, ld, a wrapper's `sleep` holding its pipe), tied on Linux to the
thread that started it (a parent-death signal: a killed warm leaves none running; armed by
util-linux's `setpriv` where one is installed and the command is a binary of this machine or
a `#!` script of one, so the start is a `vfork` (`tying_prefix`), else by a `preexec_fn`,
which Python 3.12 refuses in an atexit callback: started untied there; a command setpriv
failed (could not execute it, or arm the signal) is started again by the `preexec_fn`, its
`OSError` raised as without setpriv, never setpriv's exit status nor its `/bin/sh`), waits
for it with a timeout, and on a timeout or an exception in the caller (Ctrl-C) kills the
whole group and reaps it. Every live group is known (the module's one piece of state), so
`stop_compilers` kills them all at once, from a signal handler too, and has `run_compiler`
refuse new ones until `resume_compilers`; `on_compiler` lets a supervisor journal the groups
it must clean up after a hard crash. An `Owner` held by a thread (`owned_by`) gathers the
groups that thread starts, so another thread can stop just those (`Owner.kill`: the compiler
probe on an interrupt). A compiler's `TMPDIR` is the scratch folder it runs in (`run`'s
`tmp`), so the temporary files of one that is killed (gcc's `ccXXXXXX.s`, nvcc's
intermediates) go with that folder, never left in the user's; any other child's is the
temporary folder Python found usable, where the caller's names none (missing, no folder) or
names it relative to this process's working folder: nvcc writes its intermediate files there
and, unlike gcc, does not fall back. Nothing here decides what runs, reads what a child
prints, or prints. It imports Python's thread pool before any fork (its at-fork hooks must
be whole for every fork: see the import).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, NamedTuple

from warmcli import config
from warmcli.forking import renew_on_fork

# Python's thread pool's at-fork hooks (a lock taken before a fork, released after) are
# registered before warm's first fork, never while one is under way: a compile thread's
# pool imported then would have the release run without the take, on the lock it holds.
# (First imported at interpreter shutdown, the import fails: no pool starts then.)
with contextlib.suppress(RuntimeError):
    import concurrent.futures.thread  # noqa: F401

_PR_SET_PDEATHSIG = 1


DRAIN_SECONDS = 1.0  # after a timeout's kill: the output read, at most this long
# util-linux's `setpriv`, which arms a parent-death signal and execs the command: found here
# only (never on PATH), and used where it takes `--pdeathsig` (util-linux 2.33 and later).
SETPRIV = ("/usr/bin/setpriv", "/bin/setpriv")


class Finished(NamedTuple):
    """What one child left: its exit status, its output and whether it ran out of time."""

    returncode: int
    out: str
    err: str
    timed_out: bool


class Owner:
    """The process groups started by the threads that hold it (`owned_by`), live now."""

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.killed = False

    def kill(self) -> None:
        """Kill every group started under this owner, and any it starts from now on."""
        with _Live.lock:
            self.killed = True
            groups = list(self.groups)
        for pgid in groups:
            kill_group(pgid)


class _Live:
    """Every process group warm started that runs now, and whether compilers are refused."""

    lock = threading.Lock()
    groups: ClassVar[set[int]] = set()
    refusing = False
    # Told (pgid, True) when a group starts and (pgid, False) when it is gone.
    observer: Callable[[int, bool], None] | None = None
    prctl: Callable[..., int] | None = None
    setpriv: list[str] | None = None  # `tying_prefix`'s helper, once looked for ([]: none)
    elf: bytes | None = None  # `_own_elf`, once read
    owner = threading.local()  # the `Owner` a thread's starts are gathered into, if any


renew_on_fork(_Live, "lock")


def on_compiler(observer: Callable[[int, bool], None] | None) -> None:
    """Have `observer(pgid, started)` told of every process group warm starts (a journal)."""
    _Live.observer = observer


def stop_compilers() -> int:
    """Kill every live process group warm started and refuse new compilers; safe in a signal
    handler (it takes no lock a handler could be interrupting). Returns how many were killed."""
    _Live.refusing = True
    return sum(kill_group(pgid) for pgid in list(_Live.groups))


def resume_compilers() -> None:
    """Start compilers again after `stop_compilers`."""
    _Live.refusing = False


def refusing() -> bool:
    """Whether `stop_compilers` stopped them all (and new compilers are not started)."""
    return _Live.refusing


def kill_group(pgid: int) -> bool:
    """SIGKILL a process group; False where it is gone already (or not ours to kill)."""
    import signal  # imported by `run`, which every live group came from

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@contextlib.contextmanager
def owned_by(owner: Owner) -> Iterator[None]:
    """The process groups this thread starts inside are `owner`'s (`Owner.kill`)."""
    _Live.owner.current = owner
    try:
        yield
    finally:
        _Live.owner.current = None


def _prctl() -> Callable[..., int]:
    if _Live.prctl is None:
        _Live.prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _Live.prctl


def parent_death_signal(signum: int) -> None:
    """Have this process get `signum` when the thread that started it dies (Linux only)."""
    if sys.platform.startswith("linux"):
        _prctl()(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _tie_to_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that kills the child when the thread that started it dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import signal

    prctl, parent, kill = _prctl(), os.getpid(), signal.SIGKILL  # looked up here, in the parent

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def tying_prefix(command: Sequence[str]) -> list[str]:
    """What `run` starts `command` behind to tie it to the starting thread: `setpriv
    --pdeathsig KILL --`, where one that takes it is installed and `command` names an
    executable file by its absolute path that `execve` runs itself (`_runs_itself`); else
    nothing (`run` ties it by a `preexec_fn`). Started so, a child is a `vfork`: a
    `preexec_fn` makes every start a `fork` of this whole process, whose copy-on-write page
    faults (a `warm run` worker holding numpy, a bundle and the kernels) cost milliseconds."""
    if _Live.setpriv is None:
        _Live.setpriv = _setpriv()
    program = command[0] if command else ""
    if not _Live.setpriv or not _runs_itself(program):
        return []
    return [*_Live.setpriv, "--pdeathsig", "KILL", "--"]


def _runs_itself(program: str, depth: int = 0) -> bool:
    """Whether `execve` runs the file `program` (an absolute path) itself: a binary of this
    machine (an ELF file whose class, byte order, machine and program header size are this
    interpreter's, with program headers), or a script whose `#!` names one by its absolute
    path. setpriv runs what `execve` refuses with `ENOEXEC` (a foreign or broken binary) by
    `/bin/sh`, as `execvp` does: such a file is started as before (its `OSError`), never read
    by a shell (one broken past its headers still may be)."""
    if depth > 2 or not os.path.isabs(program) or not os.access(program, os.X_OK):
        return False
    try:
        with open(program, "rb") as fh:
            start = fh.read(256)
    except OSError:  # a folder, no permission to read: as before
        return False
    if start.startswith(b"#!"):
        words = start[2:].split(b"\n", 1)[0].split()
        return bool(words) and _runs_itself(os.fsdecode(words[0]), depth + 1)
    own = _own_elf()
    ph = 54 if own[4:5] == b"\x02" else 42  # e_phentsize, then e_phnum (64-bit, 32-bit)
    known = start[:7] == own[:7] and start[16:20] in _elf_kinds(own)
    return known and start[ph : ph + 2] == own[ph : ph + 2] and start[ph + 2 : ph + 4] != b"\0\0"


def _own_elf() -> bytes:
    """The first 64 bytes of this interpreter's own binary (an ELF header on Linux)."""
    if _Live.elf is None:
        try:
            with open("/proc/self/exe", "rb") as fh:
                _Live.elf = fh.read(64)
        except OSError:
            _Live.elf = b""
    return _Live.elf


def _elf_kinds(own: bytes) -> tuple[bytes, ...]:
    """`e_type` (an executable, a position-independent one) then `e_machine` as an ELF file
    of this machine has them, in its byte order."""
    if len(own) < 20 or not own.startswith(b"\x7fELF"):
        return ()
    order = "little" if own[5] == 1 else "big"
    return tuple(kind.to_bytes(2, order) + own[18:20] for kind in (2, 3))


def _setpriv() -> list[str]:
    """`[path]` of the installed `setpriv` that takes `--pdeathsig` (its option table names
    it: told without starting it), else `[]`."""
    if not sys.platform.startswith("linux"):
        return []
    for path in SETPRIV:
        try:
            with open(path, "rb") as fh:
                if os.access(path, os.X_OK) and b"pdeathsig" in fh.read(1 << 20):
                    return [path]
        except OSError:
            continue
    return []


def _track(pgid: int, started: bool, owner: Owner | None) -> bool:
    """Note a group started (or gone); whether a started one must be killed at once (its
    owner was stopped, or every compiler was, between the caller's start and this)."""
    with _Live.lock:
        (_Live.groups.add if started else _Live.groups.discard)(pgid)
        if owner is not None:
            (owner.groups.add if started else owner.groups.discard)(pgid)
        stopped = owner is not None and owner.killed
    if _Live.observer is not None:
        _Live.observer(pgid, started)
    return started and (stopped or _Live.refusing)


def run(
    command: Sequence[str], timeout: float | None, cwd: str | None = None, tmp: str | None = None
) -> Finished:
    """Run `command` in its own process group (see the module doc) and wait for it, in `cwd`
    with `TMPDIR` the folder `tmp` where given (a compiler's scratch folder); raises
    `OSError` where it cannot start. On a timeout, or an exception here (Ctrl-C), its whole
    group is killed and reaped; the timeout is returned (`timed_out`), the exception raised.
    Where `setpriv` failed (could not execute it: a binary whose loader is missing; could
    not arm the signal), it is started again by a `preexec_fn`, so its `OSError` is raised
    as before, never setpriv's exit status nor its words."""
    finished, helped = _run(command, timeout, cwd, tmp, tied_by_helper=True)
    if helped and _unexecuted(finished):
        finished = _run(command, timeout, cwd, tmp, tied_by_helper=False)[0]
    return finished


def _unexecuted(finished: Finished) -> bool:
    """Whether `setpriv` said it failed, its message prefixed by its name in any locale: it
    could not execute the command (126, 127: util-linux's `errexec`), arm the signal (127),
    or took no `--pdeathsig` after all (1)."""
    code, err = finished.returncode, finished.err
    return not finished.timed_out and code != 0 and err.startswith("setpriv: ")


def _run(
    command: Sequence[str],
    timeout: float | None,
    cwd: str | None,
    tmp: str | None,
    tied_by_helper: bool,
) -> tuple[Finished, bool]:
    """`run`, started behind `tying_prefix`'s helper where `tied_by_helper` and one applies;
    also whether it was."""
    import subprocess  # imported on first use: a serving process starts no child

    helped = False

    def start(tie: Callable[[], None] | None) -> subprocess.Popen[str]:
        nonlocal helped
        helper = tying_prefix(command) if tie is not None and tied_by_helper else []
        helped = bool(helper)  # tied by it, else by `tie`
        return subprocess.Popen(
            [*helper, *command],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",  # a compiler's output need not be UTF-8 (a localised compiler)
            start_new_session=True,
            preexec_fn=None if helper else tie,  # only prctl: no Python state is touched
            env=_environment(tmp),
        )

    try:
        proc = start(_tie_to_parent())
    except RuntimeError as exc:  # Python 3.12 refuses a preexec_fn in an atexit callback
        if "shutdown" not in str(exc):  # (before it forks): started untied, as at exit
            raise
        proc = start(None)
    owner: Owner | None = getattr(_Live.owner, "current", None)
    try:
        if _track(proc.pid, True, owner):
            kill_group(proc.pid)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        try:  # what it wrote; a process that left its group may still hold the pipes
            out, err = proc.communicate(timeout=DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
            out, err = "", ""
        return Finished(proc.returncode, out, err, True), helped
    except BaseException:
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        _track(proc.pid, False, owner)
    return Finished(proc.returncode, out, err, False), helped


def _environment(tmp: str | None) -> dict[str, str] | None:
    """A child's environment: this process's (None), but with `TMPDIR` the folder `tmp`
    where given, else the folder Python's `tempfile` fell back to where the caller's names
    no usable one (nvcc, unlike gcc, does not fall back: it fails every compile with `Could
    not open output file`)."""
    import tempfile  # imported on first use, as subprocess

    if tmp is not None:
        return config.compiler_environment(tmp, scratch=True)
    return config.compiler_environment(tempfile.gettempdir())
