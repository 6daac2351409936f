"""How a child warm starts is tied, on Linux, to the thread that started it: it gets SIGKILL
when that thread dies (`PR_SET_PDEATHSIG`), so a killed warm leaves no compiler running.

The signal can only be armed in the child, between its start and the command. A `preexec_fn`
does it, but makes Python fork the whole process where it would otherwise `vfork`: ~1 ms, plus
~0.08 ms for every MB the process holds (measured: ~35 ms a child from a 300 MB process, ~70 ms
from 800 MB; a workload holding a model's gigabytes pays a second or more a compiler). So where
it can, `tied` has util-linux's `setpriv --pdeathsig KILL --` arm it and exec the command in the
same process (same pid, same process group): Python starts `setpriv` by `vfork`, at the same
cost from any process. It does so only where `setpriv` runs the command exactly as Python would
have: the command's name found in the child's `PATH` (absolute entries; argv[0] handed on as
given, so a compiler prints and finds itself as before) or given as a path, the file found an
executable ELF or `#!` script whose interpreter is an ELF (Python refuses any other, which
`execvp` would hand to /bin/sh), and no `LD_` variable in its environment (it would load into
`setpriv` too). Anywhere else (a relative `PATH` entry, no usable `setpriv`), and where
`setpriv` itself says it failed to start the command (`setpriv_failed`: the caller starts it
again, forked), the tie is the `preexec_fn`, as it was before, which also kills a child whose
parent died before the signal was armed (`setpriv` cannot: a warm killed in that millisecond
leaves that one child to end on its own).

State: the `setpriv` found (asked once a process: one ~2 ms run; a forked child keeps its
parent's answer) and libc's `prctl`. It never starts a command of its own but that one question
to `setpriv`, and never prints.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from warmcli import config

_PR_SET_PDEATHSIG = 1
_HEAD_BYTES = 256  # of a program file: its magic number, or its `#!` line (as the kernel reads)
_ELF = b"\x7fELF"
_FAILED_TO_START = (126, 127)  # setpriv's exit statuses where it could not exec the command


class Tied(NamedTuple):
    """How to start a command tied to this thread: the argv to start, its `preexec_fn` (None:
    none, so Python may `vfork`), and the `setpriv` standing in front of it ("" where none)."""

    argv: list[str]
    preexec: Callable[[], None] | None
    setpriv: str = ""


class _Found:
    prctl: Callable[..., int] | None = None
    setpriv: str | bool | None = False  # False: not asked yet; None: none usable


def _prctl() -> Callable[..., int]:
    if _Found.prctl is None:
        _Found.prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _Found.prctl


def parent_death_signal(signum: int) -> None:
    """Have this process get `signum` when the thread that started it dies (Linux only)."""
    if sys.platform.startswith("linux"):
        _prctl()(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def tied(command: Sequence[str], environ: Mapping[str, str] | None, cwd: str | None) -> Tied:
    """How to start `command`, tied (see the module doc), in the environment `environ` (this
    process's where None) and the folder `cwd` (this process's where None)."""
    if not sys.platform.startswith("linux"):
        return Tied(list(command), None)
    setpriv = _setpriv()
    if setpriv:
        env = dict(config.environment()) if environ is None else environ  # (None: the live one)
        if _runs_as_python_would(command[0], env, cwd):
            return Tied([setpriv, "--pdeathsig", "KILL", "--", *command], None, setpriv)
    return forked(command)


def forked(command: Sequence[str]) -> Tied:
    """`command` tied by a `preexec_fn` in a forked child (untied off Linux)."""
    if not sys.platform.startswith("linux"):
        return Tied(list(command), None)
    import signal

    prctl, parent, kill = _prctl(), os.getpid(), signal.SIGKILL  # looked up here, in the parent

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return Tied(list(command), preexec)


def setpriv_failed(how: Tied, returncode: int, err: str) -> bool:
    """Whether a command started as `how` never ran: its `setpriv` said it could not start it
    (its message starts with its name; its loader's, with its path)."""
    if not how.setpriv or returncode not in _FAILED_TO_START:
        return False
    return err.startswith(("setpriv:", how.setpriv + ":"))


def _setpriv() -> str | None:
    """The `setpriv` on this process's PATH that takes `--pdeathsig` (asked once), or None."""
    if _Found.setpriv is False:
        import shutil
        import subprocess

        found = shutil.which("setpriv", path=config.path())
        usable = None
        if found is not None and os.path.isabs(found):
            try:
                done = subprocess.run(
                    [found, "--pdeathsig", "KILL", "--", found, "--version"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                )
                usable = found if done.returncode == 0 else None
            except (OSError, subprocess.SubprocessError):
                usable = None
        _Found.setpriv = usable
    return _Found.setpriv  # type: ignore[return-value]


def _runs_as_python_would(program: str, env: Mapping[str, str], cwd: str | None) -> bool:
    """Whether `execvp` (setpriv's) starts `program` as Python's start would: see the doc."""
    if any(name.startswith("LD_") for name in env):
        return False
    if os.sep in program:
        return _plain_executable(os.path.join(cwd or os.getcwd(), program))
    for folder in os.get_exec_path(env):
        if not os.path.isabs(folder):
            return False  # searched from the child's folder: left to Python's own start
        path = os.path.join(folder, program)
        if os.path.lexists(path):
            return _plain_executable(path)  # (what Python and execvp both try first)
    return False  # not found: Python's start says so, as it always did


def _plain_executable(path: str, scripts: bool = True) -> bool:
    """An executable regular file starting as ELF, or (`scripts`) a `#!` line whose
    interpreter is one: what the kernel starts itself, never with `execvp`'s /bin/sh."""
    head = _head(path)
    if head is None:
        return False
    if head.startswith(_ELF):
        return True
    if not scripts or not head.startswith(b"#!"):
        return False
    words = head[2:].split(b"\n", 1)[0].split()
    if not words or b"\n" not in head:
        return False  # no interpreter named, or a line longer than the kernel reads
    interpreter = os.fsdecode(words[0])
    return os.path.isabs(interpreter) and _plain_executable(interpreter, scripts=False)


def _head(path: str) -> bytes | None:
    """The first bytes of `path` where it is a regular file this process may execute (opened
    without blocking, then looked at: a FIFO put there meanwhile is never waited on)."""
    import stat

    try:
        if not os.access(path, os.X_OK):
            return None
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        return os.read(descriptor, _HEAD_BYTES)
    except OSError:
        return None
    finally:
        os.close(descriptor)
