"""`warm stats` and `warm devices`: what a bundle holds, and what this machine offers
(its devices, whether pycuda is there, and the compilers warm would use)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import typer

from warmcli.bundle.store import Bundle
from warmcli.cli.app import app
from warmcli.cli.common import (
    BundleArg,
    CompilerOpt,
    JsonOpt,
    NvccOpt,
    compiler_line,
    emit_json,
    fail,
    guarded,
    holds_nothing,
    out,
    readable_bundle,
    stats_stream,
    stream_json,
)
from warmcli.cli.render import line
from warmcli.cli.render.stats import stats_renderable, summary_renderable
from warmcli.ops.stats import summarise
from warmcli.printable import printable

HELD_SHOWN = 20  # operations named when the one asked for is not held


@app.command()
def stats(
    bundle: str | None = BundleArg,
    operation: str | None = typer.Option(None, "--explain", help="Only this tunable operation."),
    as_json: bool = JsonOpt,
) -> None:
    """What a bundle holds: kernels per device and arch, every tune with all candidates.

    BUNDLE may be an https:// or s3:// URL (fetched into WARM_HOME once)."""
    path = readable_bundle(bundle)
    with guarded(lambda: Bundle.open(path)) as opened:
        guarded(lambda: _stats(path, opened, operation, as_json))
    holds_nothing()  # the bundle is closed, all is printed: no teardown needed


def _stats(path: Path, bundle: Bundle, operation: str | None, as_json: bool) -> None:
    """Every entry streams (`--json`), or a large bundle is summarised: never all in memory."""
    if operation is not None and not bundle.has_operation(operation):
        names = bundle.operations(HELD_SHOWN + 1)
        held = ", ".join(printable(n) for n in names[:HELD_SHOWN])
        held += ", ..." if len(names) > HELD_SHOWN else ""
        fail(f"{path}: no tunes for operation {operation!r} (it holds: {held or 'none'})")
    if as_json:
        stream_json({"bundle": str(path), **stats_stream(bundle, operation, as_text=True)})
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


PYCUDA_MISSING = "pycuda is not installed: no CUDA device can be listed or used (extra: cuda)"


@app.command()
def devices(
    nvcc: str | None = NvccOpt, compiler: str | None = CompilerOpt, as_json: bool = JsonOpt
) -> None:
    """The devices warm can use here (the host, and every CUDA device PyCUDA sees), and the
    compiler each backend builds with: its path, its version and why it was chosen."""
    from warmcli.backends.machine import inventory  # numpy and toolchains: `devices` only
    from warmcli.cli.render.ops import devices_json, devices_table

    machine = guarded(lambda: inventory(nvcc=nvcc, compiler=compiler))
    compilers = guarded(lambda: machine.compilers)  # a compiler named wrong: one line, exit 2
    if as_json:
        emit_json(devices_json(machine))
        return
    out.print(devices_table(machine.devices))
    if not machine.pycuda:
        out.print(line(PYCUDA_MISSING, style="yellow"))
    for info in compilers:
        out.print(compiler_line(info), markup=False, highlight=False, soft_wrap=True)
