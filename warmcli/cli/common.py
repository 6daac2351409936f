"""What every `warm` command shares: the consoles, one-line errors, JSON output, the default bundle.

Exit codes: 0 ok; 1 verify found something missing; 2 bad input or environment
(a missing or broken workload, a corrupt or foreign bundle, no compiler, a kernel
that fails to compile); 130 interrupted (SIGINT or SIGTERM). Every such error is
one line on stderr (a compiler's log follows it, indented), never a traceback;
under `--json` it is also one JSON object on stdout, `{"error": ..., "exit": N}`.
This module parses and prints nothing of its own; the commands use it.
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
from warmcli.home import default_bundle_path
from warmcli.kernel_cache import KernelCompileError
from warmcli.printable import printable_lines
from warmcli.render import stats_document
from warmcli.toolchain import ToolchainError
from warmcli.workload import WorkloadError

# No markup and no emoji codes in anything printed: a bundle's text is shown as it is.
out = Console(markup=False, emoji=False)
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
    None, "--bundle", "-b", help="Bundle path \\[default: WARM_BUNDLE, else in WARM_HOME]."
)
BundleArg = typer.Argument(None, help="Bundle \\[default: WARM_BUNDLE, else in WARM_HOME].")
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
    return default_bundle_path()


EXIT_INTERRUPTED = 130


class _Emitted:
    """Whether this process already printed its JSON document (one object per command)."""

    json = False


def json_requested() -> bool:
    """The command line asked for `--json` (also known before a usage error is parsed)."""
    return "--json" in sys.argv[1:]


def fail(message: str, code: int = 2, *, label: str = "error: ") -> NoReturn:
    """One line on stderr (any further lines, such as a compiler log, indented), then exit;
    under `--json` also `{"error": ..., "exit": code}` on stdout."""
    first, *rest = printable_lines(str(message).strip()) or ["error"]
    err.print(f"warm: {label}{first}", markup=False, highlight=False)
    for line in rest:
        err.print(f"    {line}", markup=False, highlight=False)
    if json_requested() and not _Emitted.json:
        doc: dict[str, Any] = {"error": first, "exit": code}
        if rest:
            doc["detail"] = "\n".join(rest)
        emit_json(doc)
    raise typer.Exit(code)


def exit_code(action: Callable[[], int]) -> int:
    """Run a command's `action`, turning `typer.Exit` into the exit code it carries."""
    try:
        return action()
    except typer.Exit as exc:
        return exc.exit_code


def interrupted(kernels: int, tunes: int) -> NoReturn:
    """Stopped by SIGINT or SIGTERM: say what this run stored (it is kept), exit 130."""
    fail(
        f"interrupted: {kernels} kernel(s) and {tunes} tune(s) stored are kept",
        EXIT_INTERRUPTED,
        label="",
    )


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
    _Emitted.json = True
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def read_bundle(path: Path) -> dict[str, Any]:
    """Everything a bundle holds, as the `warm stats --json` document."""

    def action() -> dict[str, Any]:
        with Bundle.open(path) as b:
            return stats_document(b.manifest(), b.fingerprints(), b.kernels(), b.tunes(), b.usage())

    return guarded(action)
