"""`warm check`: preflight on the production machine: can it serve every entry of a bundle?"""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from warmcli.bundle import Bundle
from warmcli.cli import app
from warmcli.cli.common import (
    ArchOpt,
    BundleArg,
    DeviceOpt,
    JsonOpt,
    NvccOpt,
    default_bundle,
    emit_json,
    guarded,
    out,
)
from warmcli.explain import REASONS
from warmcli.preflight import CheckReport, check_servable, machine_devices


@app.command()
def check(
    bundle: Path | None = BundleArg,
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    nvcc: str | None = NvccOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Without running a workload: do this machine's toolchain, architecture and devices
    match what BUNDLE holds? Exit 0 when every entry is servable here, 1 when not."""
    path = bundle or default_bundle()

    def action() -> CheckReport:
        with Bundle.open(path) as opened:
            devices = machine_devices(device, arch, nvcc)
            try:
                return check_servable(opened, devices)
            finally:
                for d in devices:
                    d.close()

    report = guarded(action)
    if as_json:
        emit_json(
            {
                "bundle": str(path),
                "servable": report.servable,
                "kernels": report.kernels,
                "tunes": report.tunes,
                "devices": [vars(o) for o in report.offers],
                "unservable": [m.as_dict() for m in report.unservable],
            }
        )
    else:
        _print(report)
    if not report.servable:
        raise typer.Exit(1)


def _print(report: CheckReport) -> None:
    for o in report.offers:
        compiler = o.toolchain or f"no compiler ({o.problem})"
        out.print(
            f"here: {o.id}  {o.fingerprint}  {compiler}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    held = f"bundle {report.bundle}: {report.kernels} kernel(s), {report.tunes} tune(s)"
    if report.servable:
        out.print(
            f"{held}: every entry is servable here", style="green", markup=False, soft_wrap=True
        )
        return
    out.print(
        f"{held}: {len(report.unservable)} not servable here",
        style="red",
        markup=False,
        soft_wrap=True,
    )
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("kind", "entry", "reason", "why"):
        table.add_column(col)
    for m in report.unservable:
        reason = REASONS.get(m.reason, m.reason)
        table.add_row(*(Text(v) for v in (m.kind, m.label, reason, m.detail)))
    out.print(table)
