"""`warm stats` and `warm devices`: what a bundle holds, and what this machine offers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from warmcli.bundle import Bundle
from warmcli.cli import app
from warmcli.cli.common import (
    BundleArg,
    JsonOpt,
    default_bundle,
    emit_json,
    fail,
    guarded,
    out,
    stats_stream,
    stream_json,
)
from warmcli.render import stats_renderable
from warmcli.summary import summarise, summary_renderable

HELD_SHOWN = 20  # operations named when the one asked for is not held


@app.command()
def stats(
    bundle: Path | None = BundleArg,
    operation: str | None = typer.Option(None, "--explain", help="Only this tunable operation."),
    as_json: bool = JsonOpt,
) -> None:
    """What a bundle holds: kernels per device and arch, every tune with all candidates."""
    path = bundle or default_bundle()
    with guarded(lambda: Bundle.open(path)) as opened:
        guarded(lambda: _stats(path, opened, operation, as_json))


def _stats(path: Path, bundle: Bundle, operation: str | None, as_json: bool) -> None:
    """Every entry streams (`--json`), or a large bundle is summarised: never all in memory."""
    if operation is not None and not bundle.has_operation(operation):
        names = bundle.operations(HELD_SHOWN + 1)
        held = ", ".join(names[:HELD_SHOWN]) + (", ..." if len(names) > HELD_SHOWN else "")
        fail(f"{path}: no tunes for operation {operation!r} (it holds: {held or 'none'})")
    if as_json:
        stream_json({"bundle": str(path), **stats_stream(bundle, operation)})
        return
    summary = summarise(bundle, operation=operation)
    if summary is not None:  # too large to list: counts by SQL, a few tunes shown
        out.print(summary_renderable(str(path), summary))
        return
    doc = {
        key: list(v) if isinstance(v, Iterator) else v
        for key, v in stats_stream(bundle, operation).items()
    }
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
        table.add_row(d["id"], str(d["name"]), str(arch), memory, str(d.get("driver", "")))
    out.print(table)
