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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from warmcli.autotune import TuneFailure
from warmcli.bundle import Bundle, BundleError
from warmcli.device import DeviceError
from warmcli.home import warm_home
from warmcli.kernel_cache import KernelCompileError
from warmcli.render import stats_document
from warmcli.toolchain import ToolchainError
from warmcli.workload import WorkloadError

out = Console()
err = Console(stderr=True, soft_wrap=True)

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
VerboseOpt = typer.Option(False, "--verbose", "-v", help="Show each compiler command.")


def default_bundle() -> Path:
    """`WARM_BUNDLE`, else `WARM_HOME/bundle.warm`, else the user cache directory's."""
    if os.environ.get("WARM_BUNDLE"):
        return Path(os.environ["WARM_BUNDLE"])
    return warm_home() / "bundle.warm"


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr (any further lines, such as a compiler log, indented), then exit."""
    first, *rest = str(message).strip().splitlines() or ["error"]
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


def _indented(value: Any, depth: int) -> str:
    return json.dumps(value, indent=2, default=str).replace("\n", "\n" + "  " * depth)


def stream_json(doc: dict[str, Any]) -> None:
    """`emit_json` of a document whose values may be iterators: each of their items is
    written as it is read, on one line of its own (JSON's C encoder: several times faster
    than an indented one), so a listing of any length costs the memory of one item."""
    write = sys.stdout.write
    write("{")
    for i, (key, value) in enumerate(doc.items()):
        write(f"{',' if i else ''}\n  {json.dumps(key)}: ")
        if not isinstance(value, Iterator):
            write(_indented(value, 1))
            continue
        write("[")
        empty = True
        for item in value:
            write(f"{'' if empty else ','}\n    {json.dumps(item, default=str)}")
            empty = False
        write("]" if empty else "\n  ]")
    write("\n}\n")


def stats_stream(bundle: Bundle, operation: str | None = None) -> dict[str, Any]:
    """The `warm stats --json` document of an open bundle (the tunes of one `operation`, if
    given), its kernels and tunes read as they are consumed."""
    return stats_document(
        bundle.manifest(),
        bundle.fingerprints(),
        bundle.each_kernel_used(),
        bundle.each_tune(operation),
    )
