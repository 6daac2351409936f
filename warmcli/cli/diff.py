"""`warm diff A B`: kernels and tunes only in one bundle, and picks that differ (exit 1 when
either bundle holds a corrupt entry, as `warm verify` would)."""

from __future__ import annotations

import typer

from warmcli.cli.app import app
from warmcli.cli.bundle_paths import readable_bundle, shown_name
from warmcli.cli.common import JsonOpt, emit_json, guarded, out
from warmcli.cli.render.ops import diff_json, diff_renderable
from warmcli.ops.diff import diff_bundles


@app.command()
def diff(
    a: str = typer.Argument(..., help="The first bundle (a path or URL)."),
    b: str = typer.Argument(..., help="The second bundle (a path or URL)."),
    as_json: bool = JsonOpt,
) -> None:
    """What differs between bundles A and B: kernels, tunes, and picks with their times.

    Exits 1 when either holds an entry it cannot serve (a corrupt one, named).
    """
    paths = readable_bundle(a), readable_bundle(b)
    result = guarded(lambda: diff_bundles(*paths))
    result.a, result.b = shown_name(a, paths[0]), shown_name(b, paths[1])
    if as_json:
        emit_json(diff_json(result))
    else:
        out.print(diff_renderable(result))
    if result.corrupt:
        raise typer.Exit(1)
