"""What every `warm` command shares: the consoles, one-line errors, JSON output, the default bundle.

Exit codes: 0 ok; 1 verify found something missing; 2 bad input or environment
(a missing or broken workload, a corrupt or foreign bundle, no compiler, a kernel
that fails to compile). Every such error is one line on stderr (a compiler's log
follows it, indented), never a traceback. This module parses and prints nothing
of its own; the commands use it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from warmcli.autotune import TuneFailure
from warmcli.bundle import Bundle, BundleError
from warmcli.device import DeviceError
from warmcli.home import warm_home
from warmcli.kernel_cache import KernelCompileError
from warmcli.printable import printable_lines
from warmcli.render import stats_document
from warmcli.toolchain import ToolchainError
from warmcli.workload import WorkloadError

UNWRAPPED = 1 << 16  # columns off a terminal without COLUMNS: a row is one line, however long


class _TrimmedStdout:
    """The `out` console's file: `sys.stdout` (looked up at each write), every line written
    without its trailing spaces, so that piped output and CI logs hold no padding."""

    def __init__(self) -> None:
        self._partial = ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            sys.stdout.write("".join(f"{line.rstrip(' ')}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._partial:
            sys.stdout.write(self._partial)
            self._partial = ""
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()


def _stdout_console() -> Console:
    """On a terminal, Rich's own console (it measures the terminal). Off one (a pipe, a CI
    log), nothing wraps: the width is `COLUMNS` when set, else wide enough for any row."""
    if sys.stdout.isatty():  # (the progress bars' Live redirects sys.stdout into this console)
        return Console(markup=False, emoji=False)
    width = None if os.environ.get("COLUMNS") else UNWRAPPED
    return Console(file=_TrimmedStdout(), width=width, markup=False, emoji=False)  # type: ignore[arg-type]


# No markup and no emoji codes in anything printed: a bundle's text is shown as it is.
out = _stdout_console()
err = Console(stderr=True, soft_wrap=True, markup=False, emoji=False)

EXPECTED = (
    WorkloadError,
    BundleError,
    ToolchainError,
    DeviceError,
    KernelCompileError,
    TuneFailure,
    OSError,
)

BundleOpt = typer.Option(
    None, "--bundle", "-b", help="Bundle path [default: WARM_BUNDLE, else in WARM_HOME]."
)
BundleArg = typer.Argument(None, help="Bundle [default: WARM_BUNDLE, else in WARM_HOME].")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")
DeviceOpt = typer.Option("auto", "--device", "-d", help="host, cuda, cuda:N or auto.")
ArchOpt = typer.Option(
    [],
    "--arch",
    help="Compile-only for a GPU architecture (sm_90...), no GPU needed; repeat for several.",
)
EntryOpt = typer.Option("workload", "--entry", help="The workload's entry function.")
NvccOpt = typer.Option(None, "--nvcc", help="nvcc to use (else WARM_NVCC, CUDA_HOME, PATH...).")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No tables or progress: the summary only.")
SignKeyOpt = typer.Option(
    None, "--key", "-k", help="Ed25519 private key (PEM): sign the bundle written."
)
VerboseOpt = typer.Option(False, "--verbose", "-v", help="Show each compiler command.")


def default_bundle() -> Path:
    """`WARM_BUNDLE`, else `WARM_HOME/bundle.warm`, else the user cache directory's."""
    if os.environ.get("WARM_BUNDLE"):
        return Path(os.environ["WARM_BUNDLE"])
    return warm_home() / "bundle.warm"


def bundle_to_write(given: Path | None) -> Path:
    """The bundle a command writes: `given` (`--bundle`), else `default_bundle()`. For a
    path the user gave, warm creates at most its last directory: a mistyped path fails
    rather than growing a tree of directories."""
    if given is None:
        return default_bundle()
    if not given.parent.parent.is_dir():
        fail(
            f"{given}: no directory {given.parent.parent} (warm creates only the bundle's own "
            f"directory, {given.parent.name})"
        )
    return given


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr (any further lines, such as a compiler log, indented), then exit."""
    first, *rest = printable_lines(str(message).strip()) or ["error"]
    err.print(f"warm: error: {first}", markup=False, highlight=False)
    for line in rest:
        err.print(f"    {line}", markup=False, highlight=False)
    raise typer.Exit(code)


def _bad_arch(exc: Exception) -> bool:
    """An `--arch` that is no CUDA architecture (the CUDA layer is imported only if used)."""
    nvcc = sys.modules.get("warmcli.cuda.nvcc")
    return nvcc is not None and isinstance(exc, nvcc.ArchError)


def guarded(action: Callable[[], Any]) -> Any:
    """Run `action`; an expected failure becomes one line and exit 2."""
    try:
        return action()
    except Exception as exc:
        if isinstance(exc, EXPECTED) or _bad_arch(exc):
            fail(str(exc))
        raise


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


def read_bundle(path: Path) -> dict[str, Any]:
    """Everything a bundle holds, as the `warm stats --json` document."""

    def action() -> dict[str, Any]:
        with Bundle.open(path) as b:
            return stats_document(b.manifest(), b.fingerprints(), b.kernels(), b.tunes(), b.usage())

    return guarded(action)
