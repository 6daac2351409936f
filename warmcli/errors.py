"""Every error warm raises, under one base: `WarmError`.

A caller (the CLI above all) catches `WarmError` alone to tell a user's mistake, a
bad bundle or a failed compile from a bug in warm. Each subclass keeps the standard
base it always had (`ValueError`, `OSError`, ...) beside `WarmError`, so code that
caught those still does; every warning derives from `WarmWarning` (a `UserWarning`).
The modules that raise them import them from here, and still export them under
their old names (`warmcli.backends.cuda.nvcc.ArchError` is this module's `ArchError`).

The exceptions to the rule are `RunInterrupted`, `KeptInterrupted` (`CleanInterrupted`
and `PullInterrupted` name it), `MergeInterrupted` and `PushInterrupted`: each is a
`KeyboardInterrupt`, not a `WarmError`, so that no `except Exception` (nor `except
WarmError`) swallows a Ctrl-C. Its only state is the first error a pass refuses that arrived
from a child process (`arrived_refused`); it imports nothing of warm above the leaves.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from warmcli.printable import Pattern, cut, printable

if TYPE_CHECKING:
    from warmcli.kernel import Kernel


class WarmError(Exception):
    """The base of every error warm raises on purpose; one that ended a pass of `warm run`
    carries the notes that pass had made (`notes_before`), said before its line."""

    notes_before: tuple[str, ...] = ()

    def __str__(self) -> str:  # (marked, shown as a pool task's failure is wrapped: carried by it)
        if self.__dict__.get("refused_by_pass") is True and "warmcli.pool_tasks" in sys.modules:
            sys.modules["warmcli.pool_tasks"].carry_in_failure(self)
        return super().__str__()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its args and attributes, never through `__init__` (whose parameters a
        subclass names otherwise: `KernelCompileError(kernel, failure)`), so a process pool's
        task that raised it hands it to its parent whole: Python's default, unpickled there by
        calling `__init__(*args)`, broke a `ProcessPoolExecutor` and hung a `Pool` for ever.
        One only a pass refuses (`refused_by_pass`, set by `warmcli.pool_tasks.note_refused`)
        is kept where it arrives, for that pass (`arrived_refused`), where it is a task's failure
        (not returned by one that caught it: `sending_a_failure`, of the module that marked it)."""
        marked = self.__dict__.get("refused_by_pass") is True
        tasks = sys.modules.get("warmcli.pool_tasks") if marked else None  # (it marked it)
        refused = tasks is not None and tasks.sending_a_failure()
        return (_rebuilt, (type(self), self.args, refused), self.__dict__ or None)


# The first error only a pass refuses that a child process's task ended by, unpickled here
# (a task's result crosses processes pickled: what it raised, only where it ended by it).
_ARRIVED: list[BaseException] = []


def _rebuilt(kind: type[BaseException], args: tuple[Any, ...], refused: bool = False) -> Any:
    """An exception of `kind` with `args`, made without its `__init__` (`WarmError.__reduce__`)."""
    exc = kind.__new__(kind, *args)
    if refused and not _ARRIVED:
        _ARRIVED.append(exc)
    return exc


def arrived_refused() -> BaseException | None:
    """The first error only a pass refuses (a GPU-less pre-build's want of a GPU) that a task
    of a child process (a `fork` start method's process pool) ended by since the last call,
    unpickled here as its result, read or not; forgotten once said."""
    return _ARRIVED.pop() if _ARRIVED else None


def message_of(exc: BaseException) -> str:
    """`str(exc)` of an exception a user's code raised, or what Python shows where its
    `__str__` itself raises (an app error that looks its message up): `<exception str()
    failed>`, so warm's report of it never fails in turn."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


class WarmWarning(UserWarning):
    """The base of every warning warm issues."""


# Backends: devices, compilers, toolchains, binaries.


class DeviceError(WarmError, RuntimeError):
    """A device could not be opened, or refused an operation."""


class LaunchError(WarmError, RuntimeError):
    """A kernel launch failed on the device."""


class ToolchainError(WarmError, RuntimeError):
    """A compiler could not be found or did not answer `--version`."""


class ScratchError(WarmError, RuntimeError):
    """The temporary folder refused a compiler's scratch files (full, read-only, a quota)."""


class CompileFailure(WarmError):
    """A group (or a single kernel) failed to compile; `log` is the compiler's output.

    `units` are the group's `warmcli.backends.compiler.CompileUnit`s (typed loosely:
    this module imports nothing above the leaves). A plain class, not a dataclass: a
    serving process imports this module and never pays for generating its methods."""

    def __init__(self, log: str, units: Sequence[Any] = (), timed_out: bool = False) -> None:
        self.log = log
        self.units = units
        self.timed_out = timed_out

    def __repr__(self) -> str:
        fields = f"log={self.log!r}, units={self.units!r}, timed_out={self.timed_out!r}"
        return f"CompileFailure({fields})"

    def __str__(self) -> str:
        names = ", ".join(u.name for u in self.units) or "?"
        what = "timed out" if self.timed_out else "failed"
        return f"compile of {names} {what}:\n{self.log.strip()}"


_ERROR = Pattern(r"(?::\d+(?::\d+)?:|\(\d+\):) (?:fatal )?error\b")
# The file name that marks the lines of warm's signature probe in a compiler's log
# (`warmcli.backends.signature`): what failed there is said by warm's explanation above it.
SIGNATURE_PROBE = "warm-signature"
_CONTEXT = (": In function ", ": In member function ", ": In instantiation of ", ": At top level:")
_CONTEXT += (": in function `",)  # GNU ld's, before an undefined reference
_REMARK = Pattern(r"(?::\d+(?::\d+)?:|\(\d+\):) (?:warning|note|remark)\b")  # no failure


def headline(text: str) -> str:
    """The line of a failure's text (a compiler's log, a candidate's reason) that says what
    failed: the first error line (gcc's and clang's `x.c:1:2: error:`, nvcc's and NVRTC's
    `x.cu(2): error:`, `fatal error:`), else the first line that is not gcc's or ld's
    context (`x.c: In function 'f':`, `In file included from`, `x.o: in function `f':`)
    nor a warning or note (ld's `undefined reference to `g'` after gcc's warning that
    `g` is declared implicitly), so a warning before the error is never the line shown.
    A line of warm's signature probe is none of these while another line is: a failed
    probe's explanation (`kernel f: parameter letters ...`) is shown."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(SIGNATURE_PROBE)] or lines
    errors = (line for line in lines if _ERROR.search(line))
    first = next(errors, None)
    if first is not None:
        return first
    for line in lines:
        context = any(c in line for c in _CONTEXT) or line.startswith(("In file included", "from "))
        if not context and not _REMARK.search(line):
            return line
    return lines[0] if lines else ""


class ConfigError(WarmError, ValueError):
    """A setting (an argument or a `WARM_*` variable) with a value warm does not take."""


class ArchError(WarmError, ValueError):
    """An architecture string warm cannot build a cubin for."""


class CubinError(WarmError, ValueError):
    """Bytes that are not a cubin, or a cubin for another architecture."""


class PtxError(WarmError, ValueError):
    """Bytes that are not PTX, or PTX this device or driver cannot JIT."""


# Execution and the runtime.


class OverrideError(WarmError, RuntimeError):
    """A second, different `ProcessModeOverride` was opened while one is open."""


class KernelCompileError(WarmError, RuntimeError):
    """A kernel failed to compile; carries the compiler's log."""

    def __init__(self, kernel: Kernel, failure: CompileFailure) -> None:
        self.kernel = kernel
        self.log = failure.log
        self.timed_out = failure.timed_out
        what = "timed out compiling" if failure.timed_out else "failed to compile"
        archs = sorted({u.arch for u in failure.units})
        if kernel.language == "cuda" and len(archs) == 1:  # which of a pre-build's archs
            what += f" for {archs[0]}"
        super().__init__(f"kernel {kernel.label} {what}:\n{failure.log.strip()}")


class TuneFailure(WarmError, RuntimeError):
    """Every candidate of a tune failed; the message holds each one's reason."""


class TuneSpecError(WarmError, ValueError):
    """A tunable's `warmup=` or `repeats=` is out of range, or its `restore=` or `check=`
    does not fit the inputs it was called with."""


class DiscardedReadError(WarmError, RuntimeError):
    """A workload read a buffer back under a process mode that discards launches."""


class DiscardedReadWarning(WarmWarning):
    """Like `DiscardedReadError`, when the runtime was told to allow such reads."""


class ShardError(WarmError, ValueError):
    """A shard given or found in the environment that is no `I/N` with 0 <= I < N."""


if TYPE_CHECKING:  # a structural type, for annotations only: no Protocol made at import

    class _Miss(Protocol):
        """What `StrictMissError` reads of a `MissExplanation` (`warmcli.runtime.explain`)."""

        @property
        def kind(self) -> str: ...
        @property
        def key(self) -> str: ...
        @property
        def label(self) -> str: ...
        @property
        def reason(self) -> str: ...
        @property
        def detail(self) -> str: ...


class StrictMissError(WarmError, RuntimeError):
    """Strict mode: a production process was about to compile or tune what the bundle lacks.

    `explanation` is the `MissExplanation` of the miss; its message cuts the label and
    the detail (a bundle's text: a shape of megabytes) as `MissExplanation.line` does."""

    def __init__(self, explanation: _Miss) -> None:
        self.explanation = explanation
        verb = "compile kernel" if explanation.kind == "kernel" else "tune"
        super().__init__(
            printable(
                f"strict mode: would {verb} {cut(explanation.label)} (key {explanation.key[:16]}), "
                f"which the bundle lacks: {explanation.reason}: {cut(explanation.detail, 4096)}"
            )
        )


# Bundles by URL, production.


class RemoteError(WarmError, OSError):
    """A URL that cannot be fetched or pushed (and no last good copy to fall back on)."""


class OutputError(WarmError, OSError):
    """The CLI's stdout refused what a command printed (`> /dev/full`, a quota): its message
    says so (`output not written whole: [Errno 28] ...`)."""


class TrustedKeyWarning(WarmWarning):
    """A trusted public key any user may replace (it, or a folder above it, writable by all)."""


class RemoteBundleWarning(WarmWarning):
    """A bundle named by URL is served from its last good copy: the store could not be
    reached, or sent something that is no bundle."""


# Warming: workloads, passes, fan-out.


class WorkloadError(WarmError):
    """A workload could not be loaded, or raised while it ran."""


class FanOutError(WarmError, OSError):
    """The cluster could not be used, or a shard failed (its one-line error is kept)."""


class RunInterrupted(KeyboardInterrupt):
    """The run was interrupted; what it had stored by then is kept.

    The one exception not derived from `WarmError`: a `KeyboardInterrupt`, so that an
    `except Exception` (or `except WarmError`) never swallows a Ctrl-C."""

    def __init__(self, stored_kernels: int, stored_tunes: int) -> None:
        super().__init__(stored_kernels, stored_tunes)
        self.stored_kernels = stored_kernels
        self.stored_tunes = stored_tunes


class KeptInterrupted(KeyboardInterrupt):
    """A command that drops entries was interrupted once its change was committed: it is
    kept, `kernels` and `tunes` gone. `warm clean`'s removals (the file may not have shrunk
    yet: `CleanInterrupted`), or `warm pull`'s bundle moved into place, the one it replaced
    holding `kernels` and `tunes` the pulled one lacks (`PullInterrupted`). A
    `KeyboardInterrupt`, as `RunInterrupted` is."""

    def __init__(self, kernels: int, tunes: int) -> None:
        super().__init__(kernels, tunes)
        self.kernels = kernels
        self.tunes = tunes


CleanInterrupted = PullInterrupted = KeptInterrupted  # the names clean and pull raise it by


class MergeInterrupted(KeyboardInterrupt):
    """`warm merge` was interrupted once OUT was moved into place: the merge is complete and
    kept (`report`, a `warmcli.ops.merge.MergeReport`). A `KeyboardInterrupt`, as
    `KeptInterrupted` is."""

    def __init__(self, report: object) -> None:
        super().__init__(report)
        self.report = report


class PushInterrupted(KeyboardInterrupt):
    """`warm push` was interrupted once the store had answered its upload: the store holds
    the bundle. A `KeyboardInterrupt`, as `KeptInterrupted` is."""


# The PyCUDA stand-ins.


class ArgumentError(WarmError, TypeError):
    """An argument PyCUDA's conventions do not let warm pass to a kernel."""


class PyCudaError(WarmError, ValueError):
    """A PyCUDA call or argument warm cannot serve; the message names the call."""


# -- the bundle's errors (raised by `warmcli.bundle`, caught by the runtime through its Store) --


DISK_FULL = "the disk is full"  # what a `BundleError` says of a write the disk refused
WRITE_FAILED = "a write to the disk failed (a file size limit, a quota or a failing disk)"
REMOVED = "the bundle was removed while open"  # a `BundleError` of a file no longer there
LOCKED = "locked by another process"  # what `BundleLocked` says of a lock kept past the wait
OUT_OF_MEMORY = "out of memory (a memory limit: ulimit -v, a container's?)"  # nothing of a bundle
# What a `BundleError` says where this process may not write the bundle: SQLite's read-only
# file, folder (for its journal) or mount; a write lock it may not make (a read-only folder
# without the `.lock`), or not open (a read-only mount: `Read-only file system`).
CANNOT_WRITE = "cannot write the bundle"
CANNOT_LOCK = "cannot create the write lock"
CANNOT_TAKE_LOCK = "cannot take the write lock"  # (any reason: a read-only mount's among them)


class BundleError(WarmError):
    """A bundle is missing, corrupt, foreign, or of another format version."""

    @property
    def disk_refusal(self) -> str | None:
        """Where it says the disk refused a write, its words of that (`WRITE_FAILED`, or
        `disk_full`'s, the folder of a full TMPDIR with them), else None."""
        text = str(self)
        if (why := next((w for w in (DISK_FULL, WRITE_FAILED) if w in text), None)) is None:
            return None
        said = text[text.index(why) :]  # `disk_full`'s words end with its folder's hint
        hint = said.startswith(f"{DISK_FULL} where") and "with room)" in said
        return said[: said.index("with room)") + len("with room)")] if hint else why

    @property
    def unwritable(self) -> bool:
        """Whether it says this process may not write the bundle (`CANNOT_WRITE`,
        `CANNOT_LOCK`, a lock on a read-only mount): no write of it can succeed here."""
        text = str(self)
        mount = CANNOT_TAKE_LOCK in text and text.endswith(os.strerror(errno.EROFS))
        return CANNOT_WRITE in text or CANNOT_LOCK in text or mount

    @property
    def problem(self) -> str:
        """The message without the bundle's path it starts with."""
        return str(self).split(": ", 1)[-1]


class SignatureError(BundleError):
    """A key that cannot be read, or a bundle that no trusted key signed."""


class MergeError(BundleError):
    """Bundles that cannot be merged (format versions differ), or an output in the way."""


FORKED_READING = (
    "not read in this process: forked while another thread read the bundle for over 5 s, "
    "whose SQLite locks this process may hold for ever (fork when no thread reads it)"
)


class BundleLocked(BundleError):
    """Another process kept SQLite's lock of a bundle past the wait every reader and writer
    gets (a writer stopped or hung mid-write): a production process serves cold from it."""
