"""`warm diff A B`: kernels and tunes only in one bundle, and picks that differ."""

from __future__ import annotations

from pathlib import Path

import typer

from warmcli.cli.app import app
from warmcli.cli.common import JsonOpt, emit_json, guarded, out
from warmcli.cli.render.ops import diff_json, diff_renderable
from warmcli.ops.diff import diff_bundles


@app.command()
def diff(
    a: Path = typer.Argument(..., help="The first bundle."),
    b: Path = typer.Argument(..., help="The second bundle."),
    as_json: bool = JsonOpt,
) -> None:
    """What differs between bundles A and B: kernels, tunes, and picks with their times."""
    result = guarded(lambda: diff_bundles(a, b))
    if as_json:
        emit_json(diff_json(result))
    else:
        out.print(diff_renderable(result))
