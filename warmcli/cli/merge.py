"""`warm merge A B ... -o OUT`: the union of several bundles' kernels and tunes; shards that
are not one whole run said (one line on stderr, exit 1; OUT is written). An interrupt once
OUT was moved into place (`MergeInterrupted`), or as the report is handed back or shown,
says what was merged into OUT (kept), exit 130: never a bare "interrupted" of a merge that
is there (`warmcli.cli.committed`). An input given by URL is what it holds now (never its last
good copy: a store that fails merges nothing) and is named by it in every line,
never by its local copy in WARM_HOME; OUT records which version of each URL it merged (a
push to that URL is conditional on it: `warmcli.bundle.merged_from`). A soft limit on open
files below what the inputs need (the merge holds each open) is raised to that, for the rest of
the process, where the hard one allows, else refused in one line (`_room_for`). The merging is
`warmcli.ops.merge`'s; this module parses and prints, and owns no state (that limit is the
process's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import typer

from warmcli.bundle.location import is_url, shown
from warmcli.bundle.merged_from import fetched
from warmcli.bundle.signing import trusted_keys
from warmcli.cli.app import app
from warmcli.cli.bundle_paths import (
    MERGE_BESIDE_BYTES,
    new_file_path,
    readable_bundle,
    shown_name,
)
from warmcli.cli.committed import kept_on_interrupt
from warmcli.cli.common import (
    EXIT_INTERRUPTED,
    JsonOpt,
    SignKeyOpt,
    emit_json,
    err,
    fail,
    guarded,
    out,
)
from warmcli.cli.render.ops import merge_json, merge_renderable
from warmcli.cli.sign import private_key_of, refuse_untrusted
from warmcli.errors import WarmError
from warmcli.ops.merge import MergeReport, merge_bundles
from warmcli.printable import printable


@app.command()
def merge(
    bundles: list[str] = typer.Argument(
        ..., help="The bundles to merge (paths, or https:// and s3:// URLs)."
    ),
    output: str = typer.Option(..., "--output", "-o", help="The merged bundle to write."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
    key: Path | None = SignKeyOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Merge bundles (several architectures, several machines) into OUT.

    A tune measured in two bundles keeps the newer measurement, and says so. The
    inputs' signatures do not carry over: --key signs OUT (under WARM_TRUSTED_KEYS, only
    inputs wholly signed by a trusted key). Shards that do not make one whole run (a
    shard missing, counts that differ) are said in one line, and exit 1: OUT is written.
    """
    if is_url(output):  # typer's Path would make `https://h/b` a folder `https:/h/`
        fail(
            f"{shown(output)} is a URL: merge writes a local bundle (-o PATH); "
            "warm push publishes it"
        )
    signing_key = None if key is None else private_key_of(key)
    trusted = guarded(trusted_keys)
    if key is not None:
        refuse_untrusted(key, signing_key, trusted)
    target = new_file_path(output, beside=MERGE_BESIDE_BYTES)
    # What each URL holds now, as `pull` takes: a last good copy merged, then pushed, would
    # put an older bundle back over what others pushed meanwhile (exit 0, one warning).
    now = f"nothing merged into {output}: a merge takes only what a URL holds now"
    paths = [readable_bundle(b, now=now) for b in bundles]
    # The version of each URL merged, read as its copy was fetched: a push to it takes its place
    # only while the store holds that one (`merged_from`), never over a push made since.
    origins = [fetched(b, p) for b, p in zip(bundles, paths, strict=True) if is_url(b)]
    _room_for(len(set(paths)))
    names = {str(p): shown_name(b, p) for p, b in zip(paths, bundles, strict=True)}

    def show(report: MergeReport, _: MergeReport) -> None:
        _named_as_given(report, names)
        if as_json:
            emit_json(merge_json(report))
        else:
            out.print(merge_renderable(report))

    # Once OUT is in place, an interrupt however late says what was merged into it (kept).
    report = kept_on_interrupt(
        target,
        lambda merged: guarded(
            lambda: _urls_said(
                names,
                lambda: merge_bundles(
                    paths,
                    target,
                    overwrite=force,
                    signing_key=signing_key,
                    trusted_keys=trusted,
                    merged=merged,
                    origins=[o for o in origins if o is not None],
                ),
            )
        ),
        show,
        lambda merged: _interrupted(merged, output),
    )
    if report.shards.get("problem"):  # written, but not what a fleet's merge should be
        err.print(
            printable(f"warm: {shown_name(output, target)}: {report.shards['problem']}"),
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)


# The files a merge holds open beside its inputs: the output, its journal and lock, stdio.
_BESIDE_INPUTS = 8


def _room_for(inputs: int) -> None:
    """Room to hold `inputs` bundles open at once, as a merge does: a soft limit on open
    files below that (a shell's 1,024 for a fleet's 2,000 shards, `ulimit -Sn`) raised as
    far as needed where the hard limit allows (left so: the process ends with the merge);
    else one line before any input is opened (a URL's copy is fetched first; it said
    `s63.warm: cannot read bundle: Too many open files` midway)."""
    try:
        import resource
    except ImportError:  # (no such limits to raise)
        return
    needed = inputs + _BESIDE_INPUTS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        fail(
            f"merging {inputs} bundles holds each open at once, {needed} files, and this "
            f"process may open {hard} at most (ulimit -Hn): raise that, or merge in parts (some "
            "into OUT, then OUT with the rest)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _interrupted(report: MergeReport, output: str) -> NoReturn:
    """An interrupt once OUT was in place: what was merged into it (kept), exit 130."""
    merged = f"{report.kernels} kernel(s) and {report.tunes} tune(s)"
    where = shown_name(output, report.out)
    fail(f"interrupted: merged {merged} into {where} (kept)", EXIT_INTERRUPTED, label="")


def _named_as_given(report: MergeReport, names: dict[str, str]) -> None:
    """Name each input as it was given: a URL, never its local copy in WARM_HOME."""
    report.sources = [names.get(s, s) for s in report.sources]
    report.contributed = {names.get(s, s): n for s, n in report.contributed.items()}
    report.choices = [
        replace(c, kept=names.get(c.kept, c.kept), dropped=names.get(c.dropped, c.dropped))
        for c in report.choices
    ]
    # a kernel's binary kept of one input and dropped of another
    report.mended = [_as_given(line, names) for line in report.mended]


def _as_given(text: str, names: dict[str, str]) -> str:
    """`text` naming each URL's local copy in WARM_HOME by its URL (as `shown` shows it)."""
    for path, name in names.items():
        text = text.replace(path, name) if path != name else text
    return text


def _urls_said(names: dict[str, str], work: Callable[[], MergeReport]) -> MergeReport:
    """`work()`, an error it raises naming an input by its URL, not by its local copy (a
    URL's input refused under WARM_TRUSTED_KEYS, say)."""
    try:
        return work()
    except WarmError as exc:
        said = _as_given(str(exc), names)
        if said != str(exc):
            exc.args = (said,)
        raise
