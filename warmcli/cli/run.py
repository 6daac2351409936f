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
    CompilerOpt,
    DeviceOpt,
    EntryOpt,
    JsonOpt,
    NvccOpt,
    QuietOpt,
    VerboseOpt,
    compiler_line,
    default_bundle,
    emit_json,
    guarded,
    out,
)
from warmcli.cli.progress import RunProgress
from warmcli.device import Device
from warmcli.devices import compiler_info, open_devices
from warmcli.passes import warm_bundle
from warmcli.render import run_json, run_renderable
from warmcli.workload import load_workload


@app.command()
def run(
    workload: Path = typer.Argument(..., help="The workload file, defining workload(runtime)."),
    bundle: Path | None = BundleOpt,
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    entry: str = EntryOpt,
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, help="Compiler processes."),
    compile_timeout: float | None = typer.Option(
        None, "--compile-timeout", min=0.1, help="Seconds before a compiler process is stopped."
    ),
    nvcc: str | None = NvccOpt,
    compiler: str | None = CompilerOpt,
    ptx: str | None = typer.Option(
        None,
        "--ptx",
        help="Keep PTX for this compute_XX \\[default: the highest --arch built's] for newer GPUs.",
    ),
    no_ptx: bool = typer.Option(False, "--no-ptx", help="Keep cubins only, no PTX."),
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

    compilers: list[dict[str, str]] = []

    def action() -> Any:
        loaded = load_workload(workload, entry)

        def opener() -> list[Device]:
            opened = open_devices(
                device,
                arch,
                hint=loaded.device_hint,
                nvcc=nvcc,
                compiler=compiler,
                ptx=None if no_ptx else ptx or "auto",
            )
            if (verbose or as_json) and not compilers:  # opened again for the verify pass
                compilers.extend(compiler_info(d) for d in opened)
            return opened

        return warm_bundle(
            loaded,
            opener,
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
        emit_json({**run_json(report), "compilers": compilers})
    else:
        if verbose:
            for c in compilers:
                out.print(compiler_line(c), markup=False, highlight=False, soft_wrap=True)
        out.print(run_renderable(report, verbose=verbose, tables=not quiet))
    if report.verified is False:
        raise typer.Exit(1)
