"""`warm run`: the two warming passes, the bundle written, then the verify pass."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from warmcli.cli import app
from warmcli.cli.common import (
    ArchOpt,
    BundleOpt,
    DeviceOpt,
    EntryOpt,
    JsonOpt,
    NvccOpt,
    QuietOpt,
    VerboseOpt,
    default_bundle,
    emit_json,
    fail,
    guarded,
    out,
)
from warmcli.cli.progress import RunProgress
from warmcli.devices import open_devices
from warmcli.passes import warm_bundle
from warmcli.render import run_json, run_renderable
from warmcli.workload import load_module, load_workload


@app.command()
def run(
    workload: Path | None = typer.Argument(
        None, help="The workload file, defining workload(runtime)."
    ),
    module: str | None = typer.Option(
        None,
        "--module",
        "-m",
        help="Run a workload module instead (pkg.module), as python -m would.",
    ),
    bundle: Path | None = BundleOpt,
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    entry: str = EntryOpt,
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, help="Compiler processes."),
    compile_timeout: float | None = typer.Option(
        None, "--compile-timeout", min=0.1, help="Seconds before a compiler process is stopped."
    ),
    nvcc: str | None = NvccOpt,
    allow_discarded_reads: bool = typer.Option(
        False, "--allow-discarded-reads", help="Warn instead of failing on reads under discard."
    ),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the verify pass."),
    as_json: bool = JsonOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Run WORKLOAD under CompileOnly, then CompileAndAutotune; store everything; verify."""
    path = bundle or default_bundle()
    show_progress = not (as_json or quiet) and out.is_terminal
    progress = RunProgress(out) if show_progress else None

    if (workload is None) == (module is None):
        fail("give a workload file or -m MODULE (one of them)")

    def action() -> Any:
        loaded = load_module(module, entry) if module else load_workload(workload or "", entry)
        return warm_bundle(
            loaded,
            lambda: open_devices(device, arch, hint=loaded.device_hint, nvcc=nvcc),
            path,
            verify=not no_verify,
            jobs=jobs,
            compile_timeout=compile_timeout,
            allow_discarded_reads=allow_discarded_reads,
            observer=progress,
        )

    with progress or contextlib.nullcontext():
        report = guarded(action)
    if as_json:
        emit_json(run_json(report))
    else:
        out.print(run_renderable(report, verbose=verbose, tables=not quiet))
    if report.verified is False:
        raise typer.Exit(1)
