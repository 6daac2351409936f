"""Merging bundles: the union of several bundles' kernels and tunes in one new bundle.

Bundles made on several machines or for several architectures are combined by key. A kernel key is
content-addressed, so a kernel held by two bundles is the same kernel: it is stored once, with the
latest `last_used` of its sources (a merge is not a use). A tune key measured in two bundles keeps
the newer measurement (one dated more than a day after the merge ranks below every other; a measured
pick beats a pending one), and the report says which one won, which was dropped and why (in more:
each one dropped, beside the one kept in the end; the first `LISTED`, the rest counted). Bundles of
a format version this warm does not read, files that are no warm bundle, and bundles whose SQL
indexes disagree with their rows (`warmcli.bundle.consistency`) are refused before anything is read;
older formats it reads merge into the current one. Inputs naming more devices and toolchains
together (fingerprints) than a bundle may hold are refused, nothing written: every reader would
refuse the output. The output's write lock is held from the first read to the publish, so a writer
of the output (a `warm run`, a production write-back, another merge into it) waits and then writes
into the merged file: no write is lost; each input is read in one state (`snapshot`): a writer
committing to one waits for the merge. The result is written beside the output, given the output's
group, mode and ACL (its owner where one may: `keep_attributes`), and moved into place only when
complete (a `-journal` or `-wal` a crashed writer of the old output left, which SQLite would play
into the new file, rolled back into the old one or removed first: `warmcli.bundle.replacing`), so a
failed merge leaves the output as it was and nothing beside it (what a killed merge left is removed
by the next); a SIGINT, SIGTERM or SIGHUP that lands once the output is moved into place is held
until the merge has ended, then raised as `MergeInterrupted`, its report with it: the merge is
complete and kept (it said only "interrupted"); an output that is a symbolic link stays one, the
file it leads to replaced; one that is (or leads to) a FIFO or a device is refused, `--force` or
not. The inputs' signatures do not carry over (but OUT's own, where `warm run --dask` merges its
shards into it: `as_run`): given a key, the output is signed with it (every entry), else the report
says the output is unsigned. Each input's record of the run it holds, and of which shards
(`warmcli.bundle.run_record`), is joined: the output records the result, and the report says
(`shards`) which shards are missing, or that one run's shards were cut in different counts: the
output is written all the same. It records which version of each URL it (`origins`) or an input
merged (`warmcli.bundle.merged_from`). The inputs are streamed into the output's one transaction
(`warmcli.ops.merge_union`: no table of any input, nor any blob's size, sets the memory a merge
takes; one commit, not one per blob); a blob copy that fails (or is missing) is taken from another
input holding a good one, and the report says so. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from warmcli.bundle import merged_from
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.file import SCHEMAS, check_header
from warmcli.bundle.journal import remove_leftovers, unlink_all
from warmcli.bundle.location import not_a_file
from warmcli.bundle.lock import write_lock
from warmcli.bundle.replacing import keep_attributes, looked_at, put_in_place
from warmcli.bundle.run_record import KEY, Joined, RunRecord, join, parse, put
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError, MergeError, MergeInterrupted
from warmcli.interrupted import held_interrupts
from warmcli.ops.merge_union import (
    Held,
    Written,
    carry_over,
    check_vouched,
    not_vouched,
    run_signs,
    signed_as,
    write_union,
)
from warmcli.printable import LISTED
from warmcli.records import TuneRecord


@dataclass(frozen=True)
class TuneChoice:
    """A tune key measured in two bundles: which measurement was kept, which dropped."""

    operation: str
    shape: str
    device: str
    kept: str
    kept_pick: str | None
    kept_measured_at: float
    dropped: str
    dropped_pick: str | None
    dropped_measured_at: float
    why: str  # why the one kept outranks the one dropped (`_why`): "newer", or another reason


@dataclass
class MergeReport:
    out: Path
    sources: list[str]
    kernels: int = 0
    tunes: int = 0
    fingerprints: int = 0
    contributed: dict[str, tuple[int, int]] = field(default_factory=dict)
    choices: list[TuneChoice] = field(default_factory=list)  # the first `LISTED`
    unlisted_choices: int = 0  # the measurements dropped beyond them, counted
    signature: str = ""  # signed by which key, or that the output is unsigned
    mended: list[str] = field(default_factory=list)  # a bad copy, a key's other binary dropped
    shards: dict[str, Any] = field(default_factory=dict)  # whole, problem, missing (`join`)


def check_format_versions(paths: Sequence[Path]) -> None:
    """Refuse a file that is no warm bundle (one line each: empty, foreign), then bundles
    of a format version this warm does not read, naming each one's version; nothing else
    is read. Inputs of different versions it reads merge: OUT is written in the current
    format (an older input is read as it is, never changed)."""
    unreadable: dict[Path, int] = {}
    for path in paths:
        if path.is_dir():
            raise MergeError(f"{path}: is a directory, not a bundle")
        version, _ = check_header(path, MergeError)
        if version not in SCHEMAS:
            unreadable[path] = version
    if unreadable:
        listed = ", ".join(f"{p} (format {v})" for p, v in unreadable.items())
        reads = ", ".join(str(v) for v in sorted(SCHEMAS))
        raise MergeError(
            f"cannot merge: a format version this warm does not read: {listed} "
            f"(it reads formats {reads})"
        )


def merge_bundles(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    signing_key: Any = None,
    trusted_keys: Sequence[bytes] | None = None,
    merged: list[MergeReport] | None = None,
    as_run: bool = False,
    origins: Sequence[merged_from.Origin] = (),
) -> MergeReport:
    """Write the union of `sources` to `out`; see the module doc. Under `trusted_keys`,
    signing OUT needs every input wholly signed by them (else a row no trusted key
    signed, an edited tune or an added kernel, would come out signed). The report is
    appended to `merged` (if given) before a held interrupt is let go: a caller
    interrupted however late reads what was merged (kept) there. `as_run` (`warm run
    --dask`, the first source `out` itself): OUT is written as a run stores into it, its
    tunes kept over the others' re-measurements (but a pending one, or an entry that the
    `trusted_keys` did not sign: the run's), its `created` time and signatures carried over
    (`carry_over`): what it held stays signed, what is added is not; a key signs only what
    they signed of OUT and what the run added (`run_signs`). OUT records `origins`."""
    paths = _distinct([Path(s) for s in sources])
    out = Path(out)
    if len(paths) < 1:
        raise MergeError("merge needs at least one bundle")
    if out.is_dir():
        raise MergeError(f"{out}: is a directory: name the bundle file to write")
    _refuse_special(out)
    check_format_versions(paths)
    _refuse_taken(out, paths, overwrite)  # first without its lock: none left beside a refused OUT
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MergeError(f"{out}: cannot make its directory ({exc.strerror})") from None
    _attributes_to_keep(out)  # first without its lock too: a link loop refused leaves no lock
    report = MergeReport(out, [str(p) for p in paths])
    holding = contextlib.ExitStack()  # interrupts, held from the move into place (`_publish`)
    with holding:
        with write_lock(out):  # OUT's writers wait from the first read to the publish
            remove_leftovers(out)
            _refuse_taken(out, paths, overwrite)  # (made since)
            kept = _attributes_to_keep(out)
            with contextlib.ExitStack() as stack:
                bundles = [stack.enter_context(Bundle.open(p)) for p in paths]
                for opened in bundles:  # one state each (a writer's commit waits), whose
                    stack.enter_context(opened.snapshot())  # indexes say what its rows say
                    require_consistent(opened)
                if signing_key is not None and trusted_keys is not None and not as_run:
                    check_vouched(bundles, paths, trusted_keys)
                real = Path(os.path.realpath(out))  # a link at OUT stays: its file is replaced
                joined = join([_record(b) for b in bundles])
                report.shards = {"whole": not joined.problem, "problem": joined.problem}
                report.shards["missing"] = joined.missing
                signing = (signing_key, as_run, trusted_keys)
                written, report.signature = _publish(
                    bundles, real, kept, signing, report, (joined, origins), holding
                )
        report.kernels, report.tunes = sum(written.kernels), sum(written.tunes)
        report.fingerprints = written.fingerprints
        for index, path in enumerate(paths):
            report.contributed[str(path)] = (written.kernels[index], written.tunes[index])
        if merged is not None:
            merged.append(report)
        try:
            holding.close()  # an interrupt held since OUT was moved into place: delivered
        except KeyboardInterrupt:
            raise MergeInterrupted(report) from None
    return report


def _publish(
    bundles: Sequence[Bundle],
    out: Path,
    kept: os.stat_result | None,
    signing: tuple[Any, bool, Sequence[bytes] | None],
    report: MergeReport,
    rows: tuple[Joined, Sequence[merged_from.Origin]],
    holding: contextlib.ExitStack,
) -> tuple[Written, str]:
    """Write the union of `bundles` beside `out` (`write_union`, its choices and mended
    copies in `report`), give it `kept`'s mode, owner and group, and move it into place,
    signed given `signing`'s key (then `as_run`, OUT's rows kept as a run keeps them, but
    those the trusted keys did not sign, `not_vouched`; what `run_signs` lets it sign); what
    each input contributed and what is said of the signature are returned; on any failure
    nothing is left behind and `out` is as it was; interrupts are held from the move on."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.merge")
    chosen: dict[str, list[tuple[int, _Rank]]] = {}  # a listed key -> its lines, each dropped's
    now = time.time()  # when the merge read (`_rank`)
    signing_key, as_run, trusted = signing
    replaced: set[str] = set()  # `as_run`: what of OUT a shard measured or built, as a run
    stale = not_vouched(bundles[0], trusted) if as_run and trusted is not None else set()

    def choose(held: Held | None, tune: TuneRecord, index: int) -> bool:
        if as_run and held is not None and held.index == 0:  # held by OUT: a run's hit, but
            if tune.key not in stale and (held.status, tune.status) != ("pending", "measured"):
                return False  # a pending one, or one no trusted key signed (whatever its date)
            replaced.add(tune.key)  # measured, as a local run measures it: the run's
            held = None if tune.key in stale else held  # (a miss: never ranked against it)
        return _choose(chosen, now, held, tune, index, report)

    laid = merged_from.laid_out(merged_from.joined(rows[1], bundles))
    if isinstance(laid, str):  # never a record cut short: a push to a URL left out unconditional
        said = f"{out} is unchanged" if kept is not None else f"{out} was not made"
        raise MergeError(f"{out}: not merged: {laid}; {said}")
    try:
        tmp.unlink(missing_ok=True)  # a dead merge's (never a link's file: unlinked, not followed)
        with Bundle.create_new(tmp) as dest:  # made here, or refused: never through a link
            with dest.transaction() as conn:  # one commit for all, not one per binary
                written = write_union(conn, dest, bundles, choose, report.mended, (stale, replaced))
                put(conn, rows[0].record)  # which run OUT holds, and which of its shards
                merged_from.put(conn, laid)  # of each URL
                carried = carry_over(conn, bundles[0]) if as_run else 0
            vouching = as_run and trusted is not None and signing_key is not None
            keep = run_signs(bundles[0], trusted, replaced) if vouching else None
            signature = signed_as(dest, signing_key, bundles, carried, keep)
        if kept is not None:
            _keep_attributes(tmp, out, kept)
        holding.enter_context(held_interrupts())  # moved and said, or neither
        put_in_place(tmp, out)
        return written, signature
    except (BundleError, OSError) as exc:
        said = f"{out} is unchanged" if kept is not None else f"{out} was not made"
        if not isinstance(exc, BundleError):
            why = f"cannot write the merged bundle ({exc.strerror})"
            raise MergeError(f"{out}: {why}; {said}") from None
        if exc.disk_refusal is None:
            raise
        raise MergeError(f"{out}: {exc.disk_refusal}: nothing was merged, {said}") from None
    finally:
        unlink_all(tmp, Path(f"{tmp}.lock"), Path(f"{tmp}-journal"))


def _record(bundle: Bundle) -> RunRecord | None:
    """The run `bundle` records (`warmcli.bundle.run_record`); None where its manifest
    cannot be read (as from an older warm: no shard of any run)."""
    try:
        return parse(bundle.manifest().get(KEY))
    except BundleError:
        return None


def _attributes_to_keep(out: Path) -> os.stat_result | None:
    """OUT's stat, if it exists; refused where one may not write it, or its folder, as `run`."""
    if not os.access(out.parent, os.W_OK | os.X_OK):  # the merged file is made beside OUT
        raise MergeError(f"{out}: its folder {_unwritable(out.parent)}: nothing was merged")
    if (st := looked_at(out, out, MergeError, "nothing was merged")) is None:
        return None
    _refuse_special(out)  # made one since it was first looked at
    if not os.access(out, os.W_OK):
        raise MergeError(f"{out}: not writable by you: nothing was merged")
    return st


def _unwritable(folder: Path) -> str:
    """Why `folder` cannot be written: a read-only mount (no mode nor user mends it), else."""
    with contextlib.suppress(OSError, AttributeError):  # (AttributeError: no statvfs)
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    return "is not writable by you"


def _refuse_taken(out: Path, paths: Sequence[Path], overwrite: bool) -> None:
    """OUT, where it is there, is replaced only when it is an input or `overwrite` says so."""
    if out.exists() and not (overwrite or any(p.samefile(out) for p in paths)):
        raise MergeError(f"{out} exists: name it as an input to merge into it, or pass --force")


def _refuse_special(out: Path) -> None:
    """OUT, where it is a FIFO or a device (or a link to one), is never replaced, even
    under `--force`: a merge writes a bundle file, it never turns /dev/null into one."""
    kind = not_a_file(out)
    if kind is not None:
        raise MergeError(
            f"{out}: {kind}, not a regular file: a merge writes only a bundle file "
            "(nothing was merged)"
        )


def _keep_attributes(tmp: Path, out: Path, kept: os.stat_result) -> None:
    """Give the merged file OUT's group, mode and ACL, and its owner where one may
    (`keep_attributes`), or refuse the merge."""
    why = keep_attributes(tmp, kept, out)
    if why:
        raise MergeError(
            f"{out}: belongs to {kept.st_uid}:{kept.st_gid}, and a merge by you {why}: "
            "nothing was merged (merge as its owner)"
        )


def _distinct(paths: list[Path]) -> list[Path]:
    """The inputs, each file once (a bundle named twice is merged once, in its first place)."""
    seen: list[Path] = []
    for p in paths:
        if not any(p == q or (p.exists() and q.exists() and p.samefile(q)) for q in seen):
            seen.append(p)
    return seen


def _choose(
    chosen: dict[str, list[tuple[int, _Rank]]],
    now: float,
    held: Held | None,
    tune: TuneRecord,
    index: int,
    report: MergeReport,
) -> bool:
    """Whether `tune` (of input `index`) replaces `held`: the newer measurement of a tune key
    is kept; the choice is noted when both differ. A tune held by several inputs is noted
    once per measurement dropped, each naming the one kept in the end (one a later input
    displaced is named as dropped, never as kept; `chosen`: the lines of a listed key, with
    the rank of the one each dropped), and why it outranks the one dropped."""
    if held is None:
        return True
    if (held.measured_at, held.pick) == (tune.measured_at, tune.pick):
        return False
    ranks = _rank(tune, now), _rank(held, now)
    wins = ranks[0] > ranks[1]
    newer, older = (tune, held) if wins else (held, tune)
    newer_index, older_index = (index, held.index) if wins else (held.index, index)
    for at, dropped in chosen.get(tune.key, []) if wins else ():  # lines naming the displaced
        report.choices[at] = replace(
            report.choices[at],
            kept=report.sources[index],
            kept_pick=tune.pick,
            kept_measured_at=tune.measured_at,
            why=_why(ranks[0], dropped),
        )
    if len(report.choices) >= LISTED:
        report.unlisted_choices += 1
        return wins
    kept_rank, dropped_rank = ranks if wins else ranks[::-1]
    chosen.setdefault(tune.key, []).append((len(report.choices), dropped_rank))
    report.choices.append(
        TuneChoice(
            operation=newer.operation,
            shape=newer.shape_key,
            device=newer.device,
            kept=report.sources[newer_index],
            kept_pick=newer.pick,
            kept_measured_at=newer.measured_at,
            dropped=report.sources[older_index],
            dropped_pick=older.pick,
            dropped_measured_at=older.measured_at,
            why=_why(kept_rank, dropped_rank),
        )
    )
    return wins


_SKEW = 86400.0  # how far ahead of this machine's clock another's may be, in seconds
_Rank = tuple[bool, bool, float]  # measured, dated sanely, when (`_rank`)


def _why(kept: _Rank, dropped: _Rank) -> str:
    """Why a measurement of rank `kept` outranks (or, ranked alike, stays before) one of
    rank `dropped`: said in the report (the one kept is not always the newer)."""
    if kept[0] != dropped[0]:
        return "measured; the other pending"
    if kept[1] != dropped[1]:
        return "the other dated over a day ahead of this machine's clock"
    if not kept[1]:
        return "the first input's: both dated over a day ahead of this machine's clock"
    return "newer" if kept[2] > dropped[2] else "the first input's: the other dated alike"


def _rank(tune: TuneRecord | Held, now: float) -> _Rank:
    """A measured pick beats a pending one; then the newer measurement wins. One dated more
    than a day after `now` (a clock set wrong, or a bundle from elsewhere dated so to win
    every merge) ranks below every measurement dated sanely, whatever their dates; of two
    such, the earlier input's stays."""
    at = tune.measured_at
    sane = at <= now + _SKEW
    return (tune.status == "measured", sane, at if sane else 0.0)
