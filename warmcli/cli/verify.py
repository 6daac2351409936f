"""`warm verify`: replay a workload over a bundle; it must compile and measure nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from warmcli.bundle import Bundle
from warmcli.cli import app
from warmcli.cli.common import (
    ArchOpt,
    BundleArg,
    DeviceOpt,
    EntryOpt,
    JsonOpt,
    NvccOpt,
    default_bundle,
    emit_json,
    guarded,
    out,
)
from warmcli.devices import open_devices
from warmcli.passes import RunReport, verify_pass
from warmcli.render import run_renderable, stats_json
from warmcli.workload import load_workload


@app.command()
def verify(
    bundle: Path | None = BundleArg,
    workload: Path = typer.Option(..., "--workload", "-w", help="The workload to replay."),
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    entry: str = EntryOpt,
    nvcc: str | None = NvccOpt,
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
                **stats_json(report.total),
            }
        )
    else:
        shown = RunReport(path, list(report.per_device), [report], missing=missing)
        out.print(run_renderable(shown))
    if missing:
        raise typer.Exit(1)
