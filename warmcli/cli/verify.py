"""`warm verify`: a bundle's integrity, then (with --workload) a replay that must compile nothing.

Integrity: SQLite's own check, the manifest, every blob against its sha256, every
kernel's blob present, every tune readable, and the signatures (by which key, valid
or not; under WARM_TRUSTED_KEYS every row must be signed by a trusted key). With
`--workload` the workload is replayed over the bundle: it must compile 0 kernels
and measure 0 tunes; each kernel and tune it missed is named with the reason (text
and `--json`). Exit 0 when both hold, 1 naming what is corrupt or missing, 2 on bad
input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from warmcli.backends.opening import open_devices
from warmcli.bundle.signing import trusted_keys
from warmcli.cli.app import app
from warmcli.cli.common import (
    ArchOpt,
    BundleArg,
    CompilerOpt,
    DeviceOpt,
    EntryOpt,
    JsonOpt,
    NvccOpt,
    QuietOpt,
    emit_json,
    guarded,
    out,
    readable_bundle,
)
from warmcli.cli.render.ops import integrity_json, integrity_renderable
from warmcli.cli.render.run import run_renderable, stats_json
from warmcli.ops.verify import check_bundle
from warmcli.warming.passes import PassReport, RunReport, verify_pass
from warmcli.warming.workload import load_workload


def replay(
    path: Path,
    workload: Path,
    entry: str,
    device: str,
    arch: list[str],
    nvcc: str | None,
    trusted: list[bytes] | None,
    compiler: str | None = None,
) -> tuple[PassReport, list[str]]:
    loaded = load_workload(workload, entry)
    devices = open_devices(device, arch, hint=loaded.device_hint, nvcc=nvcc, compiler=compiler)
    try:
        return verify_pass(loaded, devices, path, trusted_keys=trusted)
    finally:
        for d in devices:
            d.close()


@app.command()
def verify(
    bundle: str | None = BundleArg,
    workload: Path | None = typer.Option(
        None, "--workload", "-w", help="Also replay this workload: it must compile nothing."
    ),
    device: str = DeviceOpt,
    arch: list[str] = ArchOpt,
    entry: str = EntryOpt,
    nvcc: str | None = NvccOpt,
    compiler: str | None = CompilerOpt,
    explain_misses: bool = typer.Option(
        False,
        "--explain-misses",
        help="One line per miss: which part of its key differs (always shown now; kept for "
        "scripts).",
    ),
    as_json: bool = JsonOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Check the bundle's integrity; with --workload, replay it over the bundle too."""
    path = readable_bundle(bundle)
    trusted = guarded(trusted_keys)
    integrity = guarded(lambda: check_bundle(path, trusted))
    replayed: tuple[PassReport, list[str]] | None = None
    if workload is not None and integrity.ok:
        replayed = guarded(
            lambda: replay(path, workload, entry, device, arch, nvcc, trusted, compiler)
        )
    missing = replayed[1] if replayed else []
    doc: dict[str, Any] = {
        "bundle": str(path),
        "integrity": integrity_json(integrity),
        "verified": integrity.ok and not missing,
        "missing": missing,
    }
    if as_json:
        if replayed:
            report = replayed[0]
            doc.update(mode=report.mode, seconds=report.seconds, **stats_json(report.total))
            doc["explanations"] = [m.as_dict() for m in report.misses]
        emit_json(doc)
    else:
        out.print(integrity_renderable(integrity))
        if replayed:
            report = replayed[0]
            shown = RunReport(path, list(report.per_device), [report], missing=missing)
            out.print(run_renderable(shown, tables=not quiet), soft_wrap=True)  # names each miss
    if not doc["verified"]:
        raise typer.Exit(1)
