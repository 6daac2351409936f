"""How a child warm starts is tied to the thread that started it (Linux: a parent-death signal,
SIGKILL, armed before the child's command runs and checked against a parent that died first),
without Python forking the whole process for it. A `preexec_fn` does it in the child, but
makes Python fork (every page of a 300 MB workload process mapped again: ~30 ms a start, 70 ms
at 800 MB) where it would otherwise vfork (~1 ms at any size); so warm starts its children
through a small helper of its own (`SOURCE`: prctl, the parent check, execve with Python's
PATH search, an exec error's errno handed back on a pipe as Python's own start does), built
once with the system's C compiler (`/usr/bin/cc`, never `PATH`'s or `WARM_CC`: a wrapper named
cc is a user's compiler, not warm's), statically where the C library allows (no loader, no
`LD_PRELOAD` of the child's environment runs in it), beside warm's bytecode (`__pycache__`, as
Python keeps its own there) or, where that cannot be written or others may write it, in warm's
home (`tie/`, made as warm makes its folders), keyed by its source, how it may be linked, the
machine and the C library. Where it cannot be built, found trusted (owned by this user or root,
written by nobody else, in folders up to `/` none but they may change: `_held`) or run, the
`preexec_fn` ties the child as before (Python 3.12 refuses one in an atexit callback: started
untied there); off Linux, with no parent-death signal, the child is started untied. State: the
helper's path, looked for (and made) once per process, and libc's prctl.
It never keeps what a child prints (a start given up is reaped, its output dropped), and never
decides what runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warmcli.forking import renew_on_fork

if TYPE_CHECKING:
    import subprocess

_PR_SET_PDEATHSIG = 1
_BUILD_TIMEOUT = 60.0
_RETRY_FAILED = 86400.0  # a failed build is tried again after this long (a compiler installed)
_LINKED = ("-static", "-O2")  # static first: no loader, no LD_PRELOAD runs in it
_COMPILERS = ("/usr/bin/cc", "/usr/bin/gcc", "/usr/bin/clang", "/bin/cc")

# argv: HELPER PARENT ERRFD N PATH_1..PATH_N ARG0 ARGS...; "R" on ERRFD once tied, then the
# errno of a failed exec (every PATH tried, as Python's own start tries them), or EOF at exec.
SOURCE = r"""#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    if (argc < 6) return 126;
    long parent = strtol(argv[1], 0, 10);
    int fd = (int)strtol(argv[2], 0, 10), n = (int)strtol(argv[3], 0, 10);
    if (n < 1 || n > argc - 5) return 126;
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != (pid_t)parent) _exit(1);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || write(fd, "R", 1) != 1) _exit(126);
    int saved = 0;
    for (int i = 0; i < n; i++) {
        execve(argv[4 + i], argv + 4 + n, environ);
        if (errno != ENOENT && errno != ENOTDIR && saved == 0) saved = errno;
    }
    int e = saved ? saved : errno;
    (void)!write(fd, &e, sizeof e);
    _exit(127);
}
"""


class _Helper:
    lock = threading.Lock()
    looked = False
    path: str | None = None
    prctl: Callable[..., int] | None = None


renew_on_fork(_Helper, "lock")


class _Broken(Exception):
    """The helper did not run as built (its loader refused it): started the other way."""


def popen(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(command, **kwargs)`, the child tied to this thread (see the doc)."""
    import subprocess

    if not sys.platform.startswith("linux"):
        return subprocess.Popen(command, **kwargs)
    helper = helper_path()
    if helper is not None:
        try:
            return _by_helper(helper, command, kwargs)
        except _Broken:
            _Helper.path = None  # (this process: the next starts by the preexec_fn)
    try:
        return subprocess.Popen(command, preexec_fn=_tie_to_parent(), **kwargs)
    except RuntimeError as exc:  # Python 3.12 refuses a preexec_fn in an atexit callback
        if "shutdown" not in str(exc):  # (before it forks): started untied, as at exit
            raise
        return subprocess.Popen(command, **kwargs)


def parent_death_signal(signum: int) -> None:
    """Have this process get `signum` when the thread that started it dies (Linux only)."""
    if sys.platform.startswith("linux"):
        _prctl()(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _prctl() -> Callable[..., int]:
    if _Helper.prctl is None:
        _Helper.prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _Helper.prctl


def _tie_to_parent() -> Callable[[], None]:
    """A `preexec_fn` that kills the child when the thread that started it dies."""
    import signal

    prctl, parent, kill = _prctl(), os.getpid(), signal.SIGKILL  # looked up here, in the parent

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def _by_helper(helper: str, command: list[str], kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
    import subprocess

    name = command[0] if command else ""
    if os.path.dirname(name):
        paths = [name]
    else:  # as Python's start searches: the child's PATH, every entry tried in turn
        paths = [os.path.join(folder, name) for folder in os.get_exec_path(kwargs.get("env"))]
    read, write = _pipe()
    try:
        argv = [helper, str(os.getpid()), str(write), str(len(paths)), *paths, *command]
        try:
            proc = subprocess.Popen(argv, pass_fds=(write,), **kwargs)
        finally:
            os.close(write)
    except BaseException as exc:  # (nothing started: the read end closed too)
        os.close(read)
        if isinstance(exc, OSError) and exc.filename == helper:
            raise _Broken from None
        raise  # (the cwd's chdir: the command's own error)
    try:
        said = _read_all(read)
    except BaseException:  # Ctrl-C while it starts: stopped, never left running
        _stop(proc)
        raise
    if said == b"R":
        proc.args = command  # (as Python's start keeps them: the helper's are its own)
        return proc
    proc.communicate()  # (what its loader said; reaped)
    if len(said) == 5 and said[:1] == b"R":
        errno = int.from_bytes(said[1:], sys.byteorder)
        raise OSError(errno, os.strerror(errno), name)  # as Python's start raises it
    raise _Broken


def _pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose write end is above the standard descriptors: `Popen` puts
    the child's stdout and stderr on 1 and 2, over an end it was given there (this process
    started with them closed), as Python moves its own error pipe's."""
    import fcntl

    read, write = os.pipe2(os.O_CLOEXEC)
    if write > 2:
        return read, write
    try:
        return read, fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        os.close(read)
        raise
    finally:
        os.close(write)


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        chunks = []
        while chunk := pipe.read(64):
            chunks.append(chunk)
    return b"".join(chunks)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.communicate()


def helper_path() -> str | None:
    """The helper's path, found trusted or made now (once a process); None: none to be had."""
    if _Helper.looked:
        return _Helper.path
    with _Helper.lock:
        if not _Helper.looked:
            try:
                _Helper.path = _find_or_make()
            except OSError:
                _Helper.path = None
            _Helper.looked = True
    return _Helper.path


def _name() -> str:
    libc = " ".join(_libc())
    key = "\0".join((SOURCE, *_LINKED, sys.platform, os.uname().machine, libc))
    return "warm-tie-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _libc() -> tuple[str, str]:
    try:
        return ("confstr", os.confstr("CS_GNU_LIBC_VERSION") or "")
    except (ValueError, OSError):
        import platform

        return platform.libc_ver()


def _folders() -> list[str]:
    from warmcli import home
    from warmcli.errors import ConfigError

    folders = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")]
    with contextlib.suppress(ConfigError, OSError):  # (no home: the first folder only)
        folders.append(os.path.abspath(home.in_home("tie")))  # (run from a compile's cwd)
    return folders


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.getuid()) and not st.st_mode & 0o022


def _held(folder: str) -> bool:
    """Whether nobody but this user and root can put another file in the helper's place in
    `folder` (it is run by its path, checked once a process): every folder from it up to `/`,
    as named and as resolved, is theirs, and writable by others only where sticky (a shared
    /tmp, whose entries only their owners rename). A group-writable home's helper is not run:
    a member of the group could rename its folder and put a program of theirs there."""
    uid = os.getuid()
    for path in {os.path.abspath(folder), os.path.realpath(folder)}:
        while True:
            st = os.stat(path)
            if st.st_uid not in (0, uid) or (st.st_mode & 0o022 and not st.st_mode & 0o1000):
                return False
            if (parent := os.path.dirname(path)) == path:
                break
            path = parent
    return True


def _find_or_make() -> str | None:
    name, compiler = _name(), next((c for c in _COMPILERS if os.access(c, os.X_OK)), None)
    for folder in _folders():
        path = os.path.join(folder, name)
        try:
            if _trusted(os.stat(folder)) and _trusted(os.stat(path)) and _held(folder):
                return path
        except OSError:
            pass
    if compiler is None:
        return None
    for folder in _folders():
        made = _make(compiler, folder, name)
        if made is not None:
            return made or None
    return None


def _make(compiler: str, folder: str, name: str) -> str | None:
    """Build the helper in `folder`: its path, "" where the build failed (remembered a day),
    None where the folder cannot be written."""
    import subprocess

    from warmcli import home

    try:
        home.make_folder(os.path.dirname(folder))  # (warm's home: never writable by all)
        with contextlib.suppress(FileExistsError):  # (made meanwhile: checked below)
            os.mkdir(folder, 0o755)
        if not (_trusted(os.stat(folder)) and _held(folder) and os.access(folder, os.W_OK)):
            return None
    except OSError:
        return None
    path, failed = os.path.join(folder, name), os.path.join(folder, name + ".failed")
    try:
        if 0 <= time.time() - os.stat(failed).st_mtime < _RETRY_FAILED:  # (one dated ahead,
            return ""  # written while the clock was ahead: stale, as the library cache's)
    except OSError:
        pass
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}")
    try:
        with open(temporary + ".c", "w", encoding="ascii") as source:
            source.write(SOURCE)
        environ = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "TMPDIR": folder}
        for linked in _LINKED:
            command = [compiler, "-O2", linked, "-o", temporary, temporary + ".c"]
            done = subprocess.run(
                command,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=environ,
                timeout=_BUILD_TIMEOUT,
                start_new_session=True,
                preexec_fn=_tie_to_parent(),
            )
            if done.returncode == 0:
                break
        else:
            with open(failed, "w"):
                pass
            return ""
        os.chmod(temporary, 0o755)
        os.replace(temporary, path)
        return path
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return ""
    finally:
        for leftover in (temporary, temporary + ".c"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
