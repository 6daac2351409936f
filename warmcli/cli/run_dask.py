"""`warm run --dask`: the run fanned out over a Dask cluster, one shard per worker, merged
into the bundle, then verified here. `warmcli.cli.run` imports it only for `--dask`, so a
local run pays for none of its imports (the fan-out, the merge, `warm verify`'s replay).
It prints what a local run prints (and each shard's line, and on stderr why a shard's part
of an existing bundle was not sent); the work is in `warmcli.warming.seeds` (each shard's
part of the bundle, so a re-run does only what is new), `warmcli.warming.fanout` and
`warmcli.ops.merge`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from warmcli.bundle.file import check_header
from warmcli.bundle.replacing import is_empty_file
from warmcli.bundle.signing import judged_before_migration
from warmcli.bundle.store import Bundle
from warmcli.cli.bundle_paths import pinned
from warmcli.cli.common import emit_json, err, guarded, interrupted, out
from warmcli.cli.progress import ShardProgress
from warmcli.cli.render.ops import merge_json, merge_renderable
from warmcli.cli.render.run import run_json, run_renderable
from warmcli.cli.streams import workload_output_on_stderr
from warmcli.cli.verify import replay
from warmcli.errors import BundleError, MergeInterrupted
from warmcli.ops.merge import MergeReport, merge_bundles
from warmcli.warming.fanout import FanOutReport, fan_out
from warmcli.warming.passes import PassReport, RunReport
from warmcli.warming.seeds import shard_seeds
from warmcli.warming.shard_reports import shard_passes


def dask_run(
    scheduler: str,
    argv: list[str],
    path: Path,
    verify_args: tuple[Any, ...] | None,
    signing_key: Any,
    show: tuple[bool, bool, bool],
    gpu: bool,
    trusted: list[bytes] | None = None,
    passed: dict[str, str | None] | None = None,
) -> int:
    """`--dask`: the shards on the cluster, each sent its part of `path` (so it does only
    what is new, as a local re-run), merged into `path`, then verified here; the passes
    shown are the shards' summed, then the verify pass, as a local run's. Under `trusted`
    keys, `signing_key` signs only what they had signed and what the run added; without
    one, a bundle they do not accept is refused before any shard runs. `passed`: the
    caller's values of the variables `--dask-env` names, set in each shard's environment.
    An interrupt once the merge put the bundle in place, however late (`MergeInterrupted`,
    as the report prints), says what this run stored (kept), as a local run says it."""
    done: list[MergeReport] = []  # the merge into `path`, once the file is in place
    with _kept_on_interrupt(path, done):
        as_json, quiet, verbose = show
        if trusted is not None and signing_key is None and path.exists():  # refused before the
            guarded(lambda: judged_before_migration(Bundle, path, trusted, False))  # shards, as
            guarded(lambda: Bundle.open(path, trusted_keys=trusted).close())  # a local run's write
        before: int | None = None  # the bundle's format before the run (None: a new one)
        with contextlib.suppress(OSError, BundleError):
            before = None if is_empty_file(path) else check_header(path)[0]
        progress = ShardProgress(out) if not (as_json or quiet) else None
        with tempfile.TemporaryDirectory(prefix="warm-fanout-") as folder:
            shards = [*argv, "--no-verify"]
            fanned = FanOutReport(scheduler)  # what finished is kept, whatever stops the rest
            seeds = (
                None if before is None else lambda n: shard_seeds(path, n, Path(folder), trusted)
            )

            def merged_in() -> MergeReport:
                sources = ([path] if path.exists() else []) + fanned.paths  # with what OUT held
                held = path.exists()  # as a run stores into it: what it held kept, signed
                return merge_bundles(  # (under trusted keys, a key signs what they signed of it)
                    sources,
                    path,
                    overwrite=True,
                    signing_key=signing_key,
                    trusted_keys=trusted if held else None,
                    as_run=held,
                    merged=done,
                )

            try:
                with progress or contextlib.nullcontext():
                    guarded(
                        lambda: fan_out(
                            scheduler,
                            shards,
                            Path(folder),
                            gpu=gpu,
                            on_shard=progress,
                            cwd=os.getcwd(),
                            report=fanned,
                            seeds=seeds,
                            passed=passed,
                        )
                    )
            except (KeyboardInterrupt, typer.Exit):  # a shard failed (said), or Ctrl-C: what
                if fanned.paths:  # finished is merged (kept: `_kept_on_interrupt` says it)
                    guarded(merged_in)
                raise
            merged = guarded(merged_in)
        held = merged.contributed.get(str(path), (0, 0))  # what the bundle held before: not new
        report = RunReport(
            path,
            sorted({d for r in fanned.shards for d in r.report.get("devices", [])}),
            shard_passes([r.report for r in fanned.shards]),
            stored_kernels=merged.kernels - held[0],
            stored_tunes=merged.tunes - held[1],
            format_before=before,
        )
        new = report.stored_kernels + report.stored_tunes
        if signing_key is not None:
            report.signature = merged.signature
        elif new and held != (0, 0) and _signed(path):  # as a local run says it
            report.signature = (
                f"the {new} new entries are unsigned: sign the bundle again (warm sign)"
            )
        if verify_args is not None:
            hooked, loader, *rest = verify_args  # `hooked`: under --pycuda, warm's PyCUDA

            def replayed() -> tuple[PassReport, list[str]]:
                with workload_output_on_stderr(as_json):  # stdout keeps the one JSON object
                    # the caller's bundle, though the workload moves as it is imported
                    return hooked(lambda: replay(*pinned(path, loader), *rest))

            verified, report.missing = guarded(replayed)  # (Ctrl-C: `_kept_on_interrupt`)
            report.passes.append(verified)
        if as_json:
            doc = run_json(report)
            doc["shards"] = [
                {
                    "shard": r.shard,
                    "worker": r.worker,
                    "seconds": r.seconds,
                    "stored": r.report.get("stored"),
                    "seed_bytes": r.seed,
                }
                for r in fanned.shards
            ]
            doc["merge"] = merge_json(merged)
            doc["seed_notes"] = fanned.notes
            emit_json(doc)
        else:
            for note in fanned.notes:
                err.print(f"warm: note: {note}", soft_wrap=True, markup=False, highlight=False)
            if not quiet:
                out.print(merge_renderable(merged))
            out.print(run_renderable(report, verbose=verbose, tables=not quiet), soft_wrap=True)
        return 1 if report.verified is False else 0


@contextlib.contextmanager
def _kept_on_interrupt(path: Path, done: list[MergeReport]) -> Iterator[None]:
    """An interrupt once a merge put the bundle in place (the last of `done`), however late
    (`MergeInterrupted`: the merge's own), says what this run stored (kept) and exits, as a
    local run says it; one before, as it came."""
    try:
        yield
    except KeyboardInterrupt as exc:
        kept = exc.report if isinstance(exc, MergeInterrupted) else done[-1] if done else None
        if not isinstance(kept, MergeReport):
            raise
        held = kept.contributed.get(str(path), (0, 0))  # not this run's: what it held
        interrupted(kept.kernels - held[0], kept.tunes - held[1])


def _signed(path: Path) -> bool:
    """Whether the bundle at `path` holds a signature (one it held before the run, carried)."""
    with contextlib.suppress(BundleError, OSError), Bundle.open(path) as bundle:
        return bool(bundle.signatures())
    return False
