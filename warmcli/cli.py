"""The `warm` command line: parses arguments, calls the library, prints with Rich.

Exit codes: 0 ok; 1 verify found something missing; 2 bad input or environment
(a missing or broken workload, a corrupt or foreign bundle, no compiler, a kernel
that fails to compile). Every such error is one line on stderr (a compiler's log
follows it, indented), never a traceback. Environment: `WARM_BUNDLE` (bundle
path), `WARM_HOME` (default directory), `WARM_NVCC`, `WARM_CC`. The CLI only
parses and prints: all work is in `warmcli.passes` and the modules below it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from platformdirs import user_cache_dir
from rich.console import Console

from warmcli._version import __version__
from warmcli.autotune import TuneFailure
from warmcli.bundle import Bundle, BundleError
from warmcli.device import DeviceError
from warmcli.devices import open_devices
from warmcli.kernel_cache import KernelCompileError
from warmcli.passes import verify_pass, warm_bundle
from warmcli.render import run_json, run_renderable, stats_document, stats_renderable
from warmcli.toolchain import ToolchainError
from warmcli.workload import WorkloadError, load_workload

ENV_HELP = """Environment: WARM_BUNDLE (bundle path), WARM_HOME (default directory for the
bundle), WARM_NVCC (nvcc to use), WARM_CC (C compiler for the host backend).

Exit codes: 0 ok, 1 verify found something missing, 2 bad input or environment."""

app = typer.Typer(
    name="warm",
    help="Warm compile caches for GPU workloads: every kernel and tune pick in one bundle.\n\n"
    + ENV_HELP,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
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


def default_bundle() -> Path:
    """`WARM_BUNDLE`, else `WARM_HOME/bundle.warm`, else the user cache directory's."""
    if os.environ.get("WARM_BUNDLE"):
        return Path(os.environ["WARM_BUNDLE"])
    home = os.environ.get("WARM_HOME") or user_cache_dir("warm")
    return Path(home) / "bundle.warm"


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr (any further lines, such as a compiler log, indented), then exit."""
    first, *rest = str(message).strip().splitlines() or ["error"]
    err.print(f"warm: error: {first}", markup=False, highlight=False)
    for line in rest:
        err.print(f"    {line}", markup=False, highlight=False)
    raise typer.Exit(code)


def guarded(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except EXPECTED as exc:
        fail(str(exc))


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


def version_callback(value: bool) -> None:
    if value:
        out.print(f"warm {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """warm: make GPU processes start hot."""


BundleOpt = typer.Option(
    None, "--bundle", "-b", help="Bundle path [default: WARM_BUNDLE or cache]."
)
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


@app.command()
def run(
    workload: Path = typer.Argument(..., help="The workload file, defining workload(runtime)."),
    bundle: Path | None = BundleOpt,
    device: str = typer.Option("auto", "--device", "-d", help="host, cuda, cuda:N or auto."),
    arch: list[str] = typer.Option(
        [], "--arch", help="Compile-only for a GPU architecture (sm_90...), no GPU needed."
    ),
    entry: str = typer.Option("workload", "--entry", help="The workload's entry function."),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, help="Compiler processes at once."
    ),
    compile_timeout: float | None = typer.Option(
        None, "--compile-timeout", min=0.1, help="Seconds before a compiler process is stopped."
    ),
    nvcc: str | None = typer.Option(None, "--nvcc", help="nvcc to use (else WARM_NVCC, ...)."),
    allow_discarded_reads: bool = typer.Option(
        False, "--allow-discarded-reads", help="Warn instead of failing on reads under discard."
    ),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the verify pass."),
    as_json: bool = JsonOpt,
) -> None:
    """Run WORKLOAD under CompileOnly, then CompileAndAutotune; store everything; verify."""
    path = bundle or default_bundle()

    def action() -> Any:
        loaded = load_workload(workload, entry)
        return warm_bundle(
            loaded,
            lambda: open_devices(device, arch, hint=loaded.device_hint, nvcc=nvcc),
            path,
            verify=not no_verify,
            jobs=jobs,
            compile_timeout=compile_timeout,
            allow_discarded_reads=allow_discarded_reads,
        )

    report = guarded(action)
    if as_json:
        emit_json(run_json(report))
    else:
        out.print(run_renderable(report))
    if report.verified is False:
        raise typer.Exit(1)


def read_bundle(path: Path) -> dict[str, Any]:
    def action() -> dict[str, Any]:
        with Bundle.open(path) as b:
            return stats_document(b.manifest(), b.fingerprints(), b.kernels(), b.tunes())

    return guarded(action)


@app.command()
def stats(
    bundle: Path | None = typer.Argument(None, help="Bundle [default: WARM_BUNDLE or cache]."),
    operation: str | None = typer.Option(None, "--explain", help="Only this tunable operation."),
    as_json: bool = JsonOpt,
) -> None:
    """What a bundle holds: kernels per device and arch, every tune with all candidates."""
    path = bundle or default_bundle()
    doc = read_bundle(path)
    if operation is not None:
        doc["tunes"] = [t for t in doc["tunes"] if t["operation"] == operation]
        if not doc["tunes"]:
            fail(f"{path}: no tunes for operation {operation!r}")
    if as_json:
        emit_json(doc)
    else:
        out.print(stats_renderable(str(path), doc))


@app.command()
def verify(
    bundle: Path | None = typer.Argument(None, help="Bundle [default: WARM_BUNDLE or cache]."),
    workload: Path = typer.Option(..., "--workload", "-w", help="The workload to replay."),
    device: str = typer.Option("auto", "--device", "-d", help="host, cuda, cuda:N or auto."),
    arch: list[str] = typer.Option([], "--arch", help="Compile-only architectures."),
    entry: str = typer.Option("workload", "--entry", help="The workload's entry function."),
    nvcc: str | None = typer.Option(None, "--nvcc", help="nvcc to use."),
    as_json: bool = JsonOpt,
) -> None:
    """Replay WORKLOAD over the bundle: it must compile 0 kernels and measure 0 tunes."""
    path = bundle or default_bundle()

    def action() -> Any:
        Bundle.open(path).close()
        loaded = load_workload(workload, entry)
        devices = open_devices(device, arch, hint=loaded.device_hint, nvcc=nvcc)
        try:
            return verify_pass(loaded, devices, path)
        finally:
            for d in devices:
                d.close()

    report, missing = guarded(action)
    if as_json:
        emit_json(
            {
                "bundle": str(path),
                "verified": not missing,
                "missing": missing,
                "mode": report.mode,
                "seconds": report.seconds,
                **_stats(report),
            }
        )
    else:
        from warmcli.passes import RunReport

        out.print(
            run_renderable(RunReport(path, list(report.per_device), [report], missing=missing))
        )
    if missing:
        raise typer.Exit(1)


def _stats(report: Any) -> dict[str, Any]:
    from warmcli.render import stats_json

    return stats_json(report.total)


@app.command()
def devices(as_json: bool = JsonOpt) -> None:
    """The devices warm can use here: the host, and every CUDA device PyCUDA sees."""
    from warmcli.host.device import HostDevice

    found: list[dict[str, Any]] = []
    host = HostDevice()
    found.append({"id": "host", "backend": "host", **host.fingerprint.as_dict()})
    try:
        from warmcli.cuda.device import list_cuda_devices

        found += [{"id": f"cuda:{d['index']}", "backend": "cuda", **d} for d in list_cuda_devices()]
    except ImportError:
        pass
    if as_json:
        emit_json(found)
        return
    from rich.table import Table

    table = Table(title="Devices", title_justify="left")
    for col in ("id", "name", "arch", "memory", "driver"):
        table.add_column(col)
    for d in found:
        memory = f"{int(d['memory']) / 2**30:.1f} GiB" if d.get("memory") else "-"
        arch = d.get("arch") or d.get("compute_capability", "")
        table.add_row(d["id"], str(d["name"]), str(arch), memory, str(d.get("driver", "")))
    out.print(table)


def main() -> None:
    app(prog_name="warm")
