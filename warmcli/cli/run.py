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
    SignKeyOpt,
    VerboseOpt,
    bundle_to_write,
    emit_json,
    guarded,
    out,
)
from warmcli.cli.progress import RunProgress
from warmcli.devices import open_devices
from warmcli.passes import warm_bundle
from warmcli.render import run_json, run_renderable
from warmcli.signing import load_private_key, trusted_keys
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
    allow_discarded_reads: bool = typer.Option(
        False, "--allow-discarded-reads", help="Warn instead of failing on reads under discard."
    ),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the verify pass."),
    as_json: bool = JsonOpt,
    quiet: bool = QuietOpt,
    verbose: bool = VerboseOpt,
    key: Path | None = SignKeyOpt,
) -> None:
    """Run WORKLOAD under CompileOnly, then CompileAndAutotune; store everything; verify.

    Under WARM_TRUSTED_KEYS an existing bundle must be signed by a trusted key, only
    the entries such keys signed are used, and --key signs what was stored.
    """
    path = bundle_to_write(bundle)
    trusted = guarded(trusted_keys)
    signing_key = None if key is None else guarded(lambda: load_private_key(key))
    show_progress = not (as_json or quiet) and out.is_terminal
    progress = RunProgress(out) if show_progress else None

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
            observer=progress,
            trusted_keys=trusted,
            signing_key=signing_key,
        )

    with progress or contextlib.nullcontext():
        report = guarded(action)
    if as_json:
        emit_json(run_json(report))
    else:
        out.print(run_renderable(report, verbose=verbose, tables=not quiet))
    if report.verified is False:
        raise typer.Exit(1)
