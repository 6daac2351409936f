"""`warm stats` and `warm devices`: what a bundle holds, and what this machine offers
(its devices, whether pycuda is there, and the compilers warm would use)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import typer

from warmcli.cli import app
from warmcli.cli.common import (
    BundleArg,
    JsonOpt,
    default_bundle,
    emit_json,
    fail,
    guarded,
    out,
    read_bundle,
)
from warmcli.printable import printable
from warmcli.render import add_row, line, listing, stats_renderable
from warmcli.summary import large_summary, summary_renderable
from warmcli.toolchain import ToolchainError, probe


@app.command()
def stats(
    bundle: Path | None = BundleArg,
    operation: str | None = typer.Option(None, "--explain", help="Only this tunable operation."),
    as_json: bool = JsonOpt,
) -> None:
    """What a bundle holds: kernels per device and arch, every tune with all candidates."""
    path = bundle or default_bundle()
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
        ours = {c["kernel"] for t in doc["tunes"] for c in t["candidates"]}
        doc["kernels"] = [k for k in doc["kernels"] if k["key"] in ours]  # its candidates'
    if as_json:
        emit_json(doc)
    else:
        out.print(stats_renderable(str(path), doc, every_candidate=operation is not None))


def _toolchains() -> list[dict[str, str]]:
    """The compilers warm would use here (`cc`, `nvcc`), with their paths and versions, or
    why one is missing."""
    from warmcli.host.compiler import host_cc

    found: list[dict[str, str]] = []
    try:
        found.append(probe("cc", host_cc()).as_dict())
    except ToolchainError as exc:
        found.append({"name": "cc", "path": "", "version": "", "error": str(exc)})
    try:
        from warmcli.cuda.nvcc import NvccCompiler

        found.append(NvccCompiler().toolchain.as_dict())
    except (ToolchainError, ImportError) as exc:
        found.append({"name": "nvcc", "path": "", "version": "", "error": str(exc)})
    return found


PYCUDA_MISSING = "pycuda is not installed: no CUDA device can be listed or used (extra: cuda)"


@app.command()
def devices(as_json: bool = JsonOpt) -> None:
    """The devices warm can use here (the host, every CUDA device PyCUDA sees) and the
    compilers it would use."""
    from warmcli.host.device import HostDevice

    found: list[dict[str, Any]] = []
    host = HostDevice()
    found.append({"id": "host", "backend": "host", **host.fingerprint.as_dict()})
    pycuda = importlib.util.find_spec("pycuda") is not None
    if pycuda:
        from warmcli.cuda.device import list_cuda_devices

        found += [{"id": f"cuda:{d['index']}", "backend": "cuda", **d} for d in list_cuda_devices()]
    toolchains = _toolchains()
    if as_json:
        emit_json({"devices": found, "pycuda": pycuda, "toolchains": toolchains})
        return
    table = listing("Devices")
    for col in ("id", "name", "arch", "memory", "driver"):
        table.add_column(col)
    for d in found:
        memory = f"{int(d['memory']) / 2**30:.1f} GiB" if d.get("memory") else "-"
        arch = d.get("arch") or d.get("compute_capability", "")
        add_row(table, d["id"], d["name"], arch, memory, d.get("driver", ""))
    out.print(table)
    if not pycuda:
        out.print(line(PYCUDA_MISSING, style="yellow"))
    compilers = listing("Compilers")
    for col in ("name", "path", "version"):
        compilers.add_column(col)
    for t in toolchains:
        add_row(compilers, t["name"], t["path"] or "-", t["version"] or t.get("error", ""))
    out.print(compilers)
