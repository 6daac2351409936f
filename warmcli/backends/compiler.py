"""The compiler protocol every backend's compiler implements.

A compiler turns a *group* of `CompileUnit`s (kernels that may share one
translation unit: same language, architecture and options) into one binary in
one compiler process, and says under which symbol each kernel can be found in it
(the batch has its digests computed once, in the compiling thread: `CompiledGroup.digested`).
It raises `CompileFailure` with the compiler's log when the group fails; finding
which kernel broke it is the batch scheduler's job (`warmcli.backends.batch`), not the
compiler's. `run_compiler` runs one compiler process for any backend, stopping
its whole process group on a timeout or when the caller is interrupted; on Linux
the compiler is also tied to the thread that started it (a parent-death signal),
so a killed warm leaves no compiler running. Every live compiler group is known
(the module's one piece of state), so `stop_compilers` stops them all at once, from
a signal handler too, and refuses new ones until `resume_compilers`; `on_compiler`
lets a supervisor journal the groups it must clean up after a hard crash.
Compilers own no cache and never load what they build.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol, runtime_checkable

from warmcli.backends.toolchain import Toolchain
from warmcli.errors import CompileFailure
from warmcli.kernel import Kernel
from warmcli.printable import Pattern
from warmcli.records import Record


class CompileUnit(Record):
    """One kernel to compile, with its key for the target it is compiled for."""

    key: str
    kernel: Kernel
    arch: str

    @property
    def name(self) -> str:
        """The kernel told apart from any other: its label, options and key (as `warm stats`
        shows them), so two kernels with the same defines read differently."""
        return " ".join([self.kernel.label, *self.kernel.options, f"(key {self.key[:8]})"])

    @property
    def symbol(self) -> str:
        """The unique name the kernel's entry gets inside a shared translation unit."""
        return f"warm_{self.key[:16]}_{self.kernel.entry}"


class CompiledGroup(Record):
    """One compiler run's output: a binary holding every unit of the group (and, for CUDA,
    the group's PTX for a virtual architecture when the compiler keeps it)."""

    binary: bytes
    symbols: dict[str, str]
    log: str
    seconds: float
    command: tuple[str, ...] = ()
    ptx: bytes = b""  # PTX of the same group for `ptx_arch` (`compute_90`), when kept
    ptx_arch: str = ""

    @functools.cached_property
    def sha256(self) -> str:
        """The binary's digest, computed once per group (every kernel's record carries it)."""
        return hashlib.sha256(self.binary).hexdigest()

    @functools.cached_property
    def ptx_sha256(self) -> str:
        """The PTX's digest, computed once per group."""
        return hashlib.sha256(self.ptx).hexdigest()

    def digested(self) -> CompiledGroup:
        """This group with its digests computed now: in the thread that compiled it, beside
        the other groups' compiles, not after the whole batch in the thread that stores it."""
        _ = self.sha256, self.ptx_sha256
        return self


# A compiler process that runs longer than this is stopped (`--compile-timeout`).
DEFAULT_COMPILE_TIMEOUT = 600.0
_PR_SET_PDEATHSIG = 1


class _Live:
    """Every compiler process group running now, and whether new ones are refused."""

    lock = threading.Lock()
    groups: ClassVar[set[int]] = set()
    refusing = False
    # Told (pgid, True) when a compiler group starts and (pgid, False) when it is gone.
    observer: Callable[[int, bool], None] | None = None
    prctl: Callable[..., int] | None = None


def on_compiler(observer: Callable[[int, bool], None] | None) -> None:
    """Have `observer(pgid, started)` told of every compiler process group (a journal)."""
    _Live.observer = observer


def stop_compilers() -> int:
    """Kill every live compiler process group and refuse new ones; safe in a signal handler
    (it takes no lock a handler could be interrupting). Returns how many were killed."""
    _Live.refusing = True
    killed = 0
    for pgid in list(_Live.groups):
        import signal  # imported by `run_compiler`, which every live group came from

        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed += 1
    return killed


def resume_compilers() -> None:
    """Start compilers again after `stop_compilers`."""
    _Live.refusing = False


def _prctl() -> Callable[..., int]:
    if _Live.prctl is None:
        _Live.prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _Live.prctl


def parent_death_signal(signum: int) -> None:
    """Have this process get `signum` when the thread that started it dies (Linux only)."""
    if sys.platform.startswith("linux"):
        _prctl()(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _tie_to_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that kills the compiler when the thread that started it dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import signal

    prctl, parent, kill = _prctl(), os.getpid(), signal.SIGKILL  # looked up here, in the parent

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def _track(pgid: int, started: bool) -> None:
    with _Live.lock:
        if started:
            _Live.groups.add(pgid)
        else:
            _Live.groups.discard(pgid)
    if _Live.observer is not None:
        _Live.observer(pgid, started)


def run_compiler(
    command: Sequence[str], units: Sequence[CompileUnit], timeout: float | None, cwd: str
) -> tuple[str, float]:
    """Run one compiler process; raise `CompileFailure` with its log on error or timeout.

    The compiler runs in its own process group, and a timeout, an exception in the
    caller (Ctrl-C) or `stop_compilers` kills the whole group: a compiler driver's
    children (cc1, as, ld, or a wrapper's) never outlive it.
    """
    if _Live.refusing:
        raise CompileFailure(f"{command[0]} not started: warm is stopping", tuple(units))
    import signal  # imported on first use, as `subprocess`: a serving process never compiles
    import subprocess

    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",  # a compiler's log need not be UTF-8 (a localised compiler)
            start_new_session=True,
            preexec_fn=_tie_to_parent(),  # only prctl: no Python state is touched
        )
    except OSError as exc:
        raise CompileFailure(f"cannot run {command[0]}: {exc}", tuple(units)) from None
    _track(proc.pid, True)
    try:
        if _Live.refusing:  # stopped between the check above and the start
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise CompileFailure(
            f"{command[0]} did not finish within {timeout:g} s and was stopped\n{err}{out}",
            tuple(units),
            True,
        ) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        _track(proc.pid, False)
    log = (err + out).strip()
    if proc.returncode != 0:
        if _Live.refusing:
            raise CompileFailure(f"{command[0]} stopped: warm is stopping", tuple(units))
        raise CompileFailure(log or f"{command[0]} exited with {proc.returncode}", tuple(units))
    return log, time.perf_counter() - started


@runtime_checkable
class Compiler(Protocol):
    """Builds binaries for one language; one `compile_group` call is one compiler process
    (or, for an in-process compiler such as NVRTC, one program in the calling thread)."""

    language: str

    @property
    def toolchain(self) -> Toolchain: ...

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup: ...


_DEFINE = Pattern(r"^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_INCLUDE = Pattern(r"^\s*#\s*include\s*[<\"].*$", re.MULTILINE)
# Names a kernel's source declares at file scope: functions (its helpers), static variables.
_FUNCTION = Pattern(
    r'^(?:extern\s+"C"\s+)?(?:[A-Za-z_]\w*[\s*]+)+([A-Za-z_]\w*)\s*\(', re.MULTILINE
)
_STATIC_VARIABLE = Pattern(
    r"^static\s+[^;(={]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|;)", re.MULTILINE
)
_KEYWORDS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "do", "else"})


def file_scope_names(source: str) -> list[str]:
    """Functions and static variables a source declares at file scope (column 0)."""
    names = _FUNCTION.findall(source) + _STATIC_VARIABLE.findall(source)
    return [n for n in dict.fromkeys(names) if n not in _KEYWORDS and not n.startswith("__")]


def split_includes(source: str) -> tuple[list[str], str]:
    """Pull `#include` lines out of a source, so they can be hoisted to the top of a TU."""
    includes = [m.group(0).strip() for m in _INCLUDE.finditer(source)]
    return includes, _INCLUDE.sub("", source)


def isolated_section(unit: CompileUnit, body: str, *, entry_macro: bool = True) -> str:
    """A kernel's source wrapped so its defines and entry name cannot leak into the next one.

    Its defines are set before and undefined after, as are the macros its own source
    defines; its entry is renamed to the unit's unique symbol and every other name it
    declares at file scope (helpers, static tables) gets the unit's prefix, so two
    kernels with a helper of the same name share a translation unit.
    """
    k = unit.kernel
    lines = [f"/* ---- warm kernel {k.label} key {unit.key[:16]} ---- */"]
    names = [name for name, _ in k.defines]
    lines += [f"#define {name} {value}" for name, value in k.defines]
    if entry_macro:
        lines.append(f"#define {k.entry} {unit.symbol}")
        names.append(k.entry)
    prefix = unit.symbol[: -len(k.entry)]
    for helper in file_scope_names(body):
        if helper != k.entry and helper not in names:
            lines.append(f"#define {helper} {prefix}{helper}")
            names.append(helper)
    lines.append(f'#line 1 "{k.name}.{"cu" if k.language == "cuda" else "c"}"')
    lines.append(body)
    names += _DEFINE.findall(body)
    lines += [f"#undef {name}" for name in dict.fromkeys(names)]
    return "\n".join(lines) + "\n"
