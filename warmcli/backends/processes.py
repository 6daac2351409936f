"""The child processes warm starts (a compiler, a compiler's `--version`): the one way to start,
track, stop and reap them. `run` starts a command in its own process group (so stopping it stops its
children too: a compiler driver's cc1, as, ld, a wrapper's `sleep` holding its pipe), tied on Linux
to the thread that started it (a parent-death signal: a killed warm leaves none running; not in an
atexit callback on Python 3.12, which refuses it there), waits for it with a timeout, and on a
timeout or an exception in the caller (Ctrl-C) kills the whole group and reaps it (a stop sent as it
forks held till the child is known, `held_interrupts`). Every live group is known (the module's
state), so `stop_compilers` kills them all at once, from a signal handler too, and has
`run_compiler` refuse new ones until `resume_compilers`; `exit_status_lost` says where a child's
exit status cannot be read (this process ignores SIGCHLD; `Finished.status_lost`, of each child);
`on_compiler` lets a supervisor journal the groups it must clean up after a hard crash. An `Owner` a
thread holds (`owned_by`) gathers the groups it starts, for another thread to stop just those
(`Owner.kill`: the compiler probe on an interrupt); `at_once` runs two calls that start children
together, the other's thread holding the caller's `Owner`. A compiler's `TMPDIR` is the scratch
folder it runs in (`run`'s `tmp`), and a probe's one of its own (`probe`), so a killed one's
temporary files (gcc's `ccXXXXXX.s`, nvcc's) go with that folder; any other child's is the temporary
folder Python found usable, where the caller's names none or names it relative to this process's
working folder: nvcc writes its intermediate files there and, unlike gcc, does not fall back; a
compiler never gets `LD_RUN_PATH` (ld writes it into the binary: no key holds it). What a child
prints is read as it comes, to the end, only its first 32 KiB and last 8 KiB kept (`kept_output`; a
probe's whole up to 4 MiB, `probe`, in the C locale): memory flat, its pipe never full. It never
decides what runs, parses output, or prints. It imports Python's thread pool before any fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple, TypeVar

from warmcli import config
from warmcli.backends.kept_output import HEAD_BYTES, PROBE_BYTES, Kept
from warmcli.forking import renew_on_fork
from warmcli.interrupted import held_interrupts
from warmcli.scratch import scratch_folder

if TYPE_CHECKING:
    import subprocess

# Python's thread pool's at-fork hooks (a lock taken before a fork, released after) are
# registered before warm's first fork, never while one is under way: a compile thread's
# pool imported then would have the release run without the take, on the lock it holds.
# (First imported at interpreter shutdown, the import fails: no pool starts then.)
with contextlib.suppress(RuntimeError):
    import concurrent.futures.thread  # noqa: F401

_PR_SET_PDEATHSIG = 1
_T, _U = TypeVar("_T"), TypeVar("_U")

DRAIN_SECONDS = 1.0  # after a timeout's kill: the output read, at most this long
_READ_BYTES = 1 << 16  # read from a child's pipe at a time


class Finished(NamedTuple):
    """What one child left: its exit status, its output, whether it ran out of time, whether
    its output was cut (its middle left out: `kept_output`) and whether its exit status was
    lost (`exit_status_lost`: `returncode` then reads 0 whether it failed or not)."""

    returncode: int
    out: str
    err: str
    timed_out: bool
    cut: bool = False
    status_lost: bool = False


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


def exit_status_lost() -> bool:
    """Whether this process ignores SIGCHLD (a daemon's idiom, or inherited: an ignored signal
    stays ignored across exec), so the kernel reaps its children and Python reads every
    child's exit status as 0: a failed compile then looks like one that built nothing."""
    import signal

    return signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN


@contextlib.contextmanager
def exit_statuses_read() -> Iterator[bool]:
    """Inside, SIGCHLD at its default where this process ignores it and this is its main thread
    (the one that may set it): the children forked inside (`warm run`'s worker) have their
    exit statuses read (a crash told from an exit); ignored again after, never left changed.
    Yields whether it was ignored: a child forked inside ignores it again before user code."""
    import signal

    ignored = exit_status_lost() and threading.current_thread() is threading.main_thread()
    if ignored:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        yield ignored
    finally:
        if ignored:
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)


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


def at_once(first: Callable[[], _T], second: Callable[[], _U]) -> tuple[_T, _U]:
    """`first()` in a thread of its own while this thread runs `second()`: two probes
    overlapped (a first run's `as --version` and `ld --version`: ~10-20 ms). The groups the
    thread starts are this thread's `Owner`'s (and every compiler's: `stop_compilers`; a Ctrl-C
    here, however it lands, kills them and waits the thread out, 10 s at most: its scratch
    folder goes); what either raised is raised once `first` ended (first's first)."""
    owner = getattr(_Live.owner, "current", None) or Owner()  # (none: the thread's own)
    got: list[_T] = []
    failed: list[BaseException] = []
    gate = threading.Lock()  # the thread's while `first` runs; an interrupt's, once it is free

    def run_first() -> None:
        if gate.acquire(blocking=False):  # (else interrupted as it started: `first` never runs)
            try:
                with owned_by(owner):
                    got.append(first())
            except BaseException as exc:  # for this thread, after the join
                failed.append(exc)
            finally:
                gate.release()

    thread = threading.Thread(target=run_first, name="warm-probe-2", daemon=True)
    try:
        thread.start()
        other = second()
        thread.join()
    except BaseException as exc:
        if isinstance(exc, RuntimeError) and thread.ident is None:  # no thread to be had (its
            return first(), second()  # stack refused: `ulimit -s`): one by one
        if interrupted := not isinstance(exc, Exception):  # Ctrl-C (an error: the owner is
            owner.kill()  # the caller's still, and `first` is waited to its end, as said)
        # thread ended (`first`'s folder gone), or never runs `first`; or, 10 s after a Ctrl-C,
        gate.acquire(timeout=10.0 if interrupted else -1)  # never will (3.11: an import lock)
        raise
    if failed:
        raise failed[0]
    return got[0], other


def probe(command: Sequence[str], timeout: float) -> Finished:
    """`run` a probe whose answer is parsed (`cc -E -v`, `cc -print-search-dirs`), in the C
    locale (`c_locale`): its output kept whole, never cut where a line it parses would be;
    `OSError`, as where it cannot start, where it printed more than `PROBE_BYTES` (never a
    partial answer remembered). Its `TMPDIR` is a scratch folder of its own (nvcc's `--dryrun`
    makes `tmpxft_*` files: killed by an interrupt, it left them there)."""
    with scratch_folder("warm-probe-") as tmp:
        done = run(command, timeout, head=PROBE_BYTES, c_locale=True, tmp=tmp)
    if done.cut:
        raise OSError(f"{command[0]} printed more than {PROBE_BYTES >> 20} MiB")
    return done


def run(
    command: Sequence[str],
    timeout: float | None,
    cwd: str | None = None,
    tmp: str | None = None,
    head: int = HEAD_BYTES,
    c_locale: bool = False,
    folder: str = "",
    environ: dict[str, str] | None = None,
) -> Finished:
    """Run `command` in its own process group (see the module doc) and wait for it, in `cwd`
    with `TMPDIR` the folder `tmp` where given (a compiler's scratch folder); raises `OSError`
    where it cannot start; with `c_locale`, in the C locale (an answer warm parses or keys
    builds by: `as --version` under `LANG=tr_TR.UTF-8` says `GNU çevirici`); a compile unit's
    `folder` is where relative entries of `CPATH` are, and `environ` the environment its key
    read (this process's where None). Its stdout and stderr come back bounded (`Kept`, its first
    `head` bytes and last 8 KiB: `cut` where that left something out). On a timeout, or an
    exception here (Ctrl-C), its whole group is killed and reaped; the timeout is returned
    (`timed_out`, with what it printed until then), the exception raised."""
    import locale
    import subprocess  # imported on first use: a serving process starts no child

    def start(tie: Callable[[], None] | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(command),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=tie,  # only prctl: no Python state is touched
            env=_environment(tmp, c_locale, folder, environ),
        )

    owner: Owner | None = getattr(_Live.owner, "current", None)
    out, err = Kept(head), Kept(head)  # what it prints, bounded: read to the end, never held whole
    pipes, proc = _Pipes(), None  # (the selector made first: a child is never left for it)
    try:
        with held_interrupts():  # a stop (main thread) as it forks: answered once it is tracked
            try:
                proc = start(_tie_to_parent())
            except RuntimeError as exc:  # Python 3.12 refuses a preexec_fn in an atexit callback
                if "shutdown" not in str(exc):  # (before it forks): started untied, as at exit
                    raise
                proc = start(None)
            pipes.watch(proc, out, err)
            if _track(proc.pid, True, owner):
                kill_group(proc.pid)
        deadline = None if timeout is None else time.monotonic() + timeout  # (from its start)
        timed_out = not pipes.drain(deadline) or _waited(proc, deadline) is None
        if timed_out:
            kill_group(proc.pid)
            # what it wrote; a process that left its group may still hold the pipes
            pipes.drain(time.monotonic() + DRAIN_SECONDS)
    except BaseException:
        kill_group(proc.pid) if proc is not None else None  # (None: no child was started)
        raise
    finally:
        pipes.close()
        if proc is not None:
            proc.wait()
            _track(proc.pid, False, owner)
    encoding = locale.getpreferredencoding(False)  # as text mode decodes (UTF-8 mode too)
    text = out.text(encoding), err.text(encoding)
    lost = exit_status_lost() and proc.returncode == 0  # (a status read is a status)
    return Finished(proc.returncode, *text, timed_out, out.cut or err.cut, lost)


class _Pipes:
    """A child's stdout and stderr (once `watch`ed), read as they come into their `Kept`s."""

    def __init__(self) -> None:
        import selectors

        self.selector, self.readable = selectors.DefaultSelector(), selectors.EVENT_READ

    def watch(self, proc: subprocess.Popen[bytes], out: Kept, err: Kept) -> None:
        for pipe, kept in ((proc.stdout, out), (proc.stderr, err)):
            if pipe is not None:
                self.selector.register(pipe, self.readable, kept)

    def drain(self, deadline: float | None) -> bool:
        """Read both pipes until each is closed (True) or the monotonic clock passes
        `deadline` (False; None: no deadline)."""
        while self.selector.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            for key, _ in self.selector.select(left):
                data = os.read(key.fd, _READ_BYTES)
                if data:
                    key.data.add(data)
                else:
                    self.selector.unregister(key.fileobj)
                    key.fileobj.close()
        return True

    def close(self) -> None:
        """Close the pipes still open (a child that left its group may hold them)."""
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()


def _waited(proc: subprocess.Popen[bytes], deadline: float | None) -> int | None:
    """The exit status of a child whose pipes are closed; None if it outlives `deadline`
    (the monotonic clock's; None: none)."""
    import subprocess

    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return proc.wait(left)
    except subprocess.TimeoutExpired:
        return None


def _environment(
    tmp: str | None, c_locale: bool = False, folder: str = "", environ: dict[str, str] | None = None
) -> dict[str, str] | None:
    """A child's environment: this process's (None), but with `TMPDIR` the folder `tmp`
    where given, else the folder Python's `tempfile` fell back to where the caller's names
    no usable one (nvcc, unlike gcc, does not fall back: it fails every compile with `Could
    not open output file`). A compile (`tmp`) never gets `LD_RUN_PATH`: GNU ld writes it into
    a shared object as its `RUNPATH` where no `-rpath` is given, which no key holds and which
    moves where the binary's `dlopen` and the libraries it needs are found (a kernel's own
    `-Wl,-rpath` is an option: keyed). `c_locale`: `LC_ALL=C`, no `LANGUAGE` (gettext's);
    `folder`: where `CPATH`'s relative entries are, `environ` the one to start from (a compile
    unit's: `config`'s, where and as its key read them)."""
    import tempfile  # imported on first use, as subprocess

    if tmp is not None:
        made = config.compiler_environment(tmp, environ, True, c_locale, folder)
        if made is not None:
            made.pop("LD_RUN_PATH", None)
        return made
    return config.compiler_environment(tempfile.gettempdir(), environ, False, c_locale, folder)
