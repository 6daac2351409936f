"""`warm stats` and `warm devices`: what a bundle holds, and what this machine offers."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from warmcli.cli import app
from warmcli.cli.common import (
    BundleArg,
    JsonOpt,
    emit_json,
    fail,
    guarded,
    out,
    read_bundle,
    readable_bundle,
)
from warmcli.printable import printable
from warmcli.render import add_row, stats_renderable
from warmcli.summary import large_summary, summary_renderable


@app.command()
def stats(
    bundle: str | None = BundleArg,
    operation: str | None = typer.Option(None, "--explain", help="Only this tunable operation."),
    as_json: bool = JsonOpt,
) -> None:
    """What a bundle holds: kernels per device and arch, every tune with all candidates.

    BUNDLE may be an https:// or s3:// URL (fetched into WARM_HOME once)."""
    path = readable_bundle(bundle)
    if operation is None and not as_json:
        summary = guarded(lambda: large_summary(path))
        if summary is not None:  # too large to list: counts by SQL, a few tunes shown
            out.print(summary_renderable(str(path), summary))
            return
    doc = {"bundle": str(path), **read_bundle(path)}
    if operation is not None:
        held = ", ".join(sorted({printable(t["operation"]) for t in doc["tunes"]})) or "none"
        doc["tunes"] = [t for t in doc["tunes"] if t["operation"] == operation]
        if not doc["tunes"]:
            fail(f"{path}: no tunes for operation {operation!r} (it holds: {held})")
    if as_json:
        emit_json(doc)
    else:
        out.print(stats_renderable(str(path), doc, every_candidate=operation is not None))


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
    table = Table(title="Devices", title_justify="left")
    for col in ("id", "name", "arch", "memory", "driver"):
        table.add_column(col)
    for d in found:
        memory = f"{int(d['memory']) / 2**30:.1f} GiB" if d.get("memory") else "-"
        arch = d.get("arch") or d.get("compute_capability", "")
        add_row(table, d["id"], d["name"], arch, memory, d.get("driver", ""))
    out.print(table)
