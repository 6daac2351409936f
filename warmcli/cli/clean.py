"""`warm clean [PATH]`: drop entries foreign to this machine; evict by age, then to a size."""

from __future__ import annotations

from typing import NoReturn

import typer

from warmcli.backends.machine import inventory
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import default_bundle
from warmcli.cli.common import (
    EXIT_INTERRUPTED,
    BundleArg,
    CompilerOpt,
    JsonOpt,
    NvccOpt,
    emit_json,
    fail,
    guarded,
    out,
    unused_nvcc,
)
from warmcli.cli.render.ops import clean_json, clean_renderable
from warmcli.config import parse_size
from warmcli.errors import CleanInterrupted
from warmcli.ops.clean import CleanReport, Machine, clean_bundle
from warmcli.ops.clean_age import parse_age


@app.command()
def clean(
    bundle: str | None = BundleArg,
    keep_foreign: bool = typer.Option(
        False, "--keep-foreign", help="Keep entries of other toolchains and devices."
    ),
    max_size: str | None = typer.Option(
        None,
        "--max-size",
        help="Evict least recently used kernels until binaries fit (10M, 1G: powers of 1024).",
    ),
    older_than: str | None = typer.Option(
        None, "--older-than", help="Remove kernels and tunes not used for this long (30d, 12h)."
    ),
    tune: list[str] = typer.Option(
        [],
        "--tune",
        metavar="OPERATION",
        help="Remove every tune of this tunable, only them: warm run measures it again.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; change nothing."),
    nvcc: str | None = NvccOpt,
    compiler: str | None = CompilerOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Remove kernels and tunes this machine cannot use, then by --older-than and --max-size."""
    unused_nvcc(nvcc, compiler)
    path = default_bundle(bundle)
    try:
        limit = None if max_size is None else parse_size(max_size)
    except ValueError as exc:
        fail(f"--max-size: {exc}")
    try:
        age = None if older_than is None else parse_age(older_than)
    except ValueError as exc:
        fail(f"--older-than: {exc}")

    removed: list[int] = []  # kernels and tunes, once their removal is committed

    def action() -> CleanReport:
        machine = Machine.of(inventory(nvcc=nvcc, compiler=compiler))
        return clean_bundle(
            path,
            machine,
            keep_foreign=keep_foreign,
            max_size=limit,
            dry_run=dry_run,
            removed=removed,
            older_than=age,
            tunes=tune,
        )

    try:
        report = guarded(action)
        if as_json:
            emit_json(clean_json(report))
        else:
            out.print(clean_renderable(report))
    except CleanInterrupted as exc:  # once committed, or once a vacuum alone began: kept
        _interrupted(exc.kernels, exc.tunes)
    except KeyboardInterrupt:  # so, however late (as the report is shown)
        if not removed:
            raise
        _interrupted(*removed)


def _interrupted(kernels: int, tunes: int) -> NoReturn:
    """Ctrl-C once the removal was committed (what it removed, kept), or once a vacuum alone
    began (nothing removed: the bundle whole), exit 130."""
    said = "removed nothing: the bundle is whole, every entry kept ("  # a vacuum's: one
    if kernels or tunes:  # transaction, done or not, every entry as it was
        said = f"removed {kernels} kernel(s) and {tunes} tune(s) (kept; "
    fail(f"interrupted: {said}the file may not have shrunk)", EXIT_INTERRUPTED, label="")
