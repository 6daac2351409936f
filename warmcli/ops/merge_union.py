"""A merge's union written into its output, streamed: `write_union` reads each input a row at a
time, in the inputs' order, and writes into the output's one open transaction, where what is
already written decides. A kernel key keeps the first input's row, with the latest last use
of any (but one of `stale`'s, the output's own rows trusted keys did not sign,
`not_vouched`: the next input's, as a run rebuilds it; else a later input's row of that key
naming another binary, which a bundle made elsewhere may, is dropped and said in `mended`,
the first `LISTED`, the rest counted; but where the row held is a host build whose binary
does not export its symbol, never served, and the later one's does: that one is taken, said
in `mended` as those are: `warmcli.ops.merge_unserved`); a tune key keeps what the
caller's `choose` picks of the one held and the one read (which input each tune came
from, with its status, pick and measurement time, is a temporary table of the output's
connection, never held in Python;
a tune is read as a serving read reads it, no sample made, and its format-3 document carried
as it is but for its kernel ids, `carried`: a row of 7 KB may hold 500,000 samples; the
first input's ids kept where free, so a run's bundle's own tunes stay signed);
each blob is copied once, a chunk at a time and checked against its sha256
(`warmcli.bundle.blobs`), in a savepoint of its own: a copy that fails (or is missing) is
undone and taken from another input holding a good one, and that is said in `mended` (held
by none, a later input's row of that key naming another binary an input holds is taken, said
so, the first `LISTED`: a first input's damaged row refused the whole merge, where the other
order merged). So no
table of any input sets the memory a merge takes. The inputs' fingerprints are read first:
more together than a bundle may hold (`FINGERPRINT_ROWS`, which every reader refuses) are
refused, nothing written. `carry_over` copies the output's own `created` time and signatures, as
they are, into the merge that rewrites it for `warm run --dask`, and `run_signs` says which rows
its key may sign under trusted keys (`check_vouched`: which inputs `merge --key` may sign), and
`signed_as` signs the output. It owns no state beyond one merge's; nothing here prints.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warmcli.bundle.blobs import streamed
from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.kernel_row import TOUCH, write_kernel_row
from warmcli.bundle.manifest import FINGERPRINT_ROWS, fingerprint_row
from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.schema import SIGNATURES_SCHEMA
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import RowSet, covered, sign
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_row import carried, carried_tunes, interner, tune_values
from warmcli.bundle.unused import free_blobs
from warmcli.errors import BundleError, MergeError
from warmcli.ops.merge_unserved import Names, sha_of, unserved
from warmcli.printable import LISTED
from warmcli.records import KernelRecord, TuneRecord


@dataclass(frozen=True)
class Held:
    """The measurement a tune key holds in the output so far, and the input it came from."""

    status: str
    pick: str | None
    measured_at: float
    operation: str
    shape_key: str
    device: str
    index: int


# `choose(held, tune, index)`: whether `tune` (of input `index`) replaces what is held
Choose = Callable[[Held | None, TuneRecord, int], bool]


@dataclass
class Written:
    """What each input contributed to the output (kernels, tunes), and its fingerprints."""

    kernels: list[int]
    tunes: list[int]
    fingerprints: int


def write_union(
    conn: sqlite3.Connection,
    dest: Bundle,
    bundles: Sequence[Bundle],
    choose: Choose,
    mended: list[str],
    stale: tuple[Collection[str], set[str]] = ((), set()),
) -> Written:
    """Write the union of `bundles` into `dest` in its open transaction `conn` (see the
    module doc); `stale`: the first input's kernels a later one's row replaces, and the set
    each key so replaced, and its new row's blob, is added to (for `run_signs`)."""
    now = time.time()
    fingerprints = _fingerprints(bundles)  # first: a union no reader takes is refused
    written = Written([0] * len(bundles), [0] * len(bundles), 0)
    other = 0  # kernel keys a later input holds built to another binary than the one kept
    later = 0  # kernel keys whose blob no input holds, a later input's build taken
    dead = 0  # kernel keys whose held build exports no symbol, a later input's taken
    names: Names = {}  # each input's blobs' exported names, read once (`_exports`)
    unsigned, renewed = stale
    freed: list[str] = []  # the blobs of the first input's rows renewed
    for index, bundle in enumerate(bundles):
        for record, (_, used) in bundle.each_kernel_used(order=AS_STORED):
            replaced = None  # the input whose row of the key this one replaces, never served
            held = conn.execute(
                "SELECT sha256 FROM kernels WHERE key = ?", (record.key,)
            ).fetchone()
            if held is not None and index and record.key in unsigned and record.key not in renewed:
                renewed.update((record.key, record.sha256))  # the first input's, no trusted
                freed.append(str(held[0]))  # key's: as a run rebuilds it (and its blob)
                held = None
            elif held is not None and held[0] != record.sha256:
                never = unserved(bundles[:index], record, str(held[0]), bundle, names)
                if never is not None:  # the held build is never served, this one is
                    replaced, said = never
                    dead += 1
                    if dead <= LISTED:
                        mended.append(said)
                    freed.append(str(held[0]))
                    held = None
                else:
                    other += 1
                    if other <= LISTED:
                        mended.append(_other_binary(bundles[:index], record, str(held[0]), bundle))
            if held is None:
                have = "SELECT 1 FROM blobs WHERE sha256 = ?"
                if conn.execute(have, (record.sha256,)).fetchone() is None:
                    try:
                        _copy_blob(conn, bundles, index, record.sha256, mended)
                    except BundleError as exc:  # in no input: a later one's build of the key
                        taken = _later_build(bundles, index, record, exc)
                        if taken is None:
                            raise
                        later += 1
                        if later <= LISTED:
                            mended.append(
                                f"{exc}: kernel {record.key[:16]}: took its build of {taken}"
                            )
                        continue  # (written as that input's row, there)
                if write_kernel_row(conn, record, now):  # (one alike is kept, as a run does)
                    written.kernels[index] += 1
                    written.kernels[0] -= record.key in renewed  # (it is this input's now)
                    if replaced is not None:
                        written.kernels[replaced] -= 1
                used_sql = "UPDATE kernels SET last_used = ? WHERE key = ?"
            else:  # the first input's row, the latest last use
                used_sql = TOUCH
            conn.execute(used_sql, (used, record.key))
    if other > LISTED:
        mended.append(
            f"and {other - LISTED:,} more kernel key(s) a later input built to another "
            "binary: the first input's kept"
        )
    if dead > LISTED:
        mended.append(
            f"and {dead - LISTED:,} more kernel key(s) whose binary does not export its "
            "symbol: a later input's build taken"
        )
    if later > LISTED:
        mended.append(
            f"and {later - LISTED:,} more kernel key(s) whose blob no input holds: a later "
            "input's build taken"
        )
    free_blobs(conn, freed)  # (one a kept kernel still names stays)
    conn.execute(
        "CREATE TEMP TABLE merge_held (key TEXT PRIMARY KEY, input INTEGER, status TEXT, "
        "pick TEXT, measured_at REAL)"
    )
    try:
        _write_tunes(conn, dest, bundles, choose, now)
        for index, count in conn.execute("SELECT input, count(*) FROM merge_held GROUP BY 1"):
            written.tunes[index] = count
    finally:  # (gone where a full disk made SQLite roll back: that error stands)
        with contextlib.suppress(sqlite3.Error):
            conn.execute("DROP TABLE IF EXISTS temp.merge_held")
    conn.executemany(
        "INSERT OR REPLACE INTO fingerprints VALUES (?, ?, ?)",
        [(i, kind, data) for i, (kind, data) in fingerprints.items()],
    )
    written.fingerprints = len(fingerprints)
    return written


def carry_over(conn: sqlite3.Connection, out: Bundle) -> int:
    """Into the output's open transaction `conn`, what a run writing into `out` in place
    keeps (`merge_bundles(..., as_run=True)`): its `created` time and its signatures, copied
    as they are (each still covers the rows it listed that come out unchanged); how many
    signatures were carried."""
    created = out.manifest().get("created")
    if created is not None:
        conn.execute("INSERT OR REPLACE INTO manifest VALUES ('created', ?)", (created,))
    signatures = out.signatures()
    if signatures:
        conn.execute(SIGNATURES_SCHEMA.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        conn.executemany(
            "INSERT OR REPLACE INTO signatures VALUES (?, ?, ?, ?, ?)",
            [(s.key_id, s.public_key, s.signature, s.rows, s.signed_at) for s in signatures],
        )
    return len(signatures)


def check_vouched(
    bundles: Sequence[Bundle], paths: Sequence[Path], trusted: Sequence[bytes]
) -> None:
    """`merge --key` under `trusted` keys: each input must be wholly signed by them."""
    for bundle, path in zip(bundles, paths, strict=True):
        problems = signature_report(bundle, trusted).problems
        if problems:
            raise MergeError(
                f"{path}: {'; '.join(problems)}: under WARM_TRUSTED_KEYS, merge --key signs "
                "only inputs that trusted keys signed whole (re-warm or re-sign it)"
            )


def not_vouched(out: Bundle, trusted: Sequence[bytes]) -> set[str]:
    """The keys of the kernels and tunes `out` holds that `trusted` keys did not sign (a
    production write-back's): a run under those keys builds and measures them again, as
    misses (`unsigned`), so `warm run --dask` stores the shards' over them, as a local run."""
    signed = covered(out, trusted, signs=True)
    return {n for t, n, h in out.row_hashes() if t in ("kernels", "tunes") and h not in signed}


def run_signs(
    out: Bundle, trusted: Sequence[bytes], replaced: Collection[str] = ()
) -> Callable[[str, str, bytes], bool]:
    """What `warm run --dask --key` may sign of its merge into `out` under `trusted` keys,
    as a local run signs (`warmcli.warming.sealing`): of the rows `out` held, those they
    signed; every row it did not hold (what the shards built, the run's record) and each
    of its tunes a shard's measurement `replaced` (a pending one, or one they did not sign:
    its own row, never `out`'s where that outranked it), and each kernel a shard rebuilt over
    one they did not sign (`not_vouched`), with its blob: a row alike to `out`'s too, as a
    run signs what it built. Of an older format, a kernel or tune `out` held is told by its
    key, not by its row's hash: the merge writes it in this format, which hashes otherwise
    (signed by them or not, it would pass for new).
    Read from `out` as it was (the merge writes beside it)."""
    signed = covered(out, trusted, signs=True)
    older = out.format_version() != FORMAT_VERSION
    hashes: set[bytes] = set()
    vouched: set[tuple[str, str]] = set()  # an older OUT's entries they signed, by key
    unvouched: set[tuple[str, str]] = set()
    for table, name, h in out.row_hashes():
        hashes.add(h)
        if older and table in ("kernels", "tunes") and name not in replaced:
            (vouched if h in signed else unvouched).add((table, name))
    held = RowSet([b"".join(sorted(hashes))])
    return lambda t, n, h: (
        h in signed
        or (t, n) in vouched
        or (t in ("kernels", "blobs") and n in replaced and not older)  # (a tune: its own row)
        or (h not in held and (t, n) not in unvouched)
    )


def signed_as(
    dest: Bundle, signing_key: Any, sources: Sequence[Bundle], carried: int, keep: Any
) -> str:
    """`dest` signed by `signing_key` (all but what `keep` says, if given), and what is said
    of its signature: by which key, or that the inputs' signatures do not carry over."""
    if signing_key is not None:
        signature = sign(dest, signing_key, keep)
        return f"signed by key {signature.key_id}: {signature.count} row(s)"
    if not carried and any(b.signatures() for b in sources):  # carried: the run says it
        return "unsigned: the inputs' signatures do not carry over (warm sign OUT --key KEY)"
    return ""


def _fingerprints(bundles: Sequence[Bundle]) -> dict[str, tuple[str, str]]:
    """The union of the inputs' fingerprints (identity -> kind, data), the last input's
    where several hold one; `MergeError` where there are more than a bundle may hold
    (`FINGERPRINT_ROWS`: every reader would refuse the output as corrupt)."""
    fingerprints: dict[str, tuple[str, str]] = {}
    for bundle in bundles:
        for identity, kind, data in map(fingerprint_row, bundle.fingerprints()):
            fingerprints[identity] = (kind, data)
            if len(fingerprints) > FINGERPRINT_ROWS:
                raise MergeError(
                    f"cannot merge: the inputs name more than {FINGERPRINT_ROWS} devices and "
                    f"toolchains together (fingerprints), more than a bundle may hold: nothing "
                    "was merged"
                )
    return fingerprints


def _write_tunes(
    conn: sqlite3.Connection, dest: Bundle, bundles: Sequence[Bundle], choose: Choose, now: float
) -> None:
    intern = interner(conn, dest.path)
    for index, bundle in enumerate(bundles):
        for tune, value in carried_tunes(bundle, AS_STORED):  # (read with no sample made)
            row = conn.execute(
                "SELECT input, status, pick, measured_at FROM merge_held WHERE key = ?",
                (tune.key,),
            ).fetchone()
            held = None
            if row is not None:
                at, status, pick, measured_at = row
                t = tune
                held = Held(status, pick, measured_at, t.operation, t.shape_key, t.device, at)
            if choose(held, tune, index):
                packed = carried(bundle, tune, value, intern, index == 0)
                conn.execute(
                    "INSERT OR REPLACE INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    tune_values(tune, intern, now, packed),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO merge_held VALUES (?, ?, ?, ?, ?)",
                    (tune.key, index, tune.status, tune.pick, tune.measured_at),
                )


def _other_binary(before: Sequence[Bundle], record: KernelRecord, kept: str, of: Bundle) -> str:
    """What a merge says of a kernel key a later input (`of`) holds built to another binary
    than the one kept (`kept`, the sha256 of the first input of `before` holding the key)."""
    first = next((b.path for b in before if sha_of(b, record.key) == kept), "an earlier input")
    return (
        f"kernel {record.key[:16]}: kept the binary {kept[:16]} of {first}, dropped "
        f"{record.sha256[:16]} of {of.path}"
    )


def _later_build(
    bundles: Sequence[Bundle], index: int, record: KernelRecord, exc: BundleError
) -> Path | None:
    """The first input after `bundles[index]` holding `record`'s key built to another binary
    that an input holds (never one whose blob is missing too), where `exc` (an input's: its
    blob in none of them) refused `record`'s; None where none does. That input's row is
    then written in its turn, its binary copied (or refused) as any."""
    if not any(str(exc).startswith(f"{b.path}: blob ") for b in bundles):
        return None  # the output's (a full disk)

    def built(bundle: Bundle) -> bool:
        sha = sha_of(bundle, record.key)
        held = "SELECT 1 FROM blobs WHERE sha256 = ?"  # (one row at most, read whole)
        other = sha not in (None, record.sha256)
        return other and any(list(b._iter(held, (sha,))) for b in bundles)

    later = next((b for b in bundles[index + 1 :] if built(b)), None)
    return None if later is None else later.path


def _copy_blob(
    conn: sqlite3.Connection, bundles: Sequence[Bundle], index: int, sha: str, mended: list[str]
) -> None:
    """Copy blob `sha` from `bundles[index]` into `conn`'s transaction, in a savepoint; where
    that copy is missing or fails its sha256, from the first other input holding a good one
    (a sha256 names one content), said in `mended`; with none, the first refusal stands."""
    order = [index, *(i for i in range(len(bundles)) if i != index)]  # its own input first
    refused: BundleError | None = None
    for at in order:
        try:
            binary = streamed(bundles[at], sha)
            conn.execute("SAVEPOINT copy")
            try:
                binary.store(conn)
            except BaseException:
                _undo_copy(conn)
                raise
            conn.execute("RELEASE copy")
        except BundleError as exc:
            if not str(exc).startswith(f"{bundles[at].path}: blob "):
                raise  # the output's (a full disk), not the input's copy
            refused = refused or exc
            continue
        if refused is not None:
            mended.append(f"{refused}: copied from {bundles[at].path}")
        return
    assert refused is not None
    raise refused


def _undo_copy(conn: sqlite3.Connection) -> None:
    """Undo a blob's copy (its savepoint), where there is one to undo: a full disk may have
    made SQLite roll the whole transaction back, whose error then stands, never this one's."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK TO copy")
        conn.execute("RELEASE copy")
