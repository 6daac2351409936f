"""A push of a bundle merged from its URL where the store moved on since: a fast-forward.

A copy of a URL pulled after a merged push records the version that push was merged from
(`warmcli.bundle.merged_from`: the manifest is signed, a pull cannot rewrite it), so its
push back, run and grown, found the store at another version and was refused as changed
though nobody pushed since. Where the store's version is not the one recorded, `caught_up`
downloads what it holds now (bounded as any download, `warmcli.bundle.received`, then the
integrity check a download passes before it is published, `soundness.not_a_bundle`) and
compares it with the state pushed (`lost`): where that holds every kernel (by key, the same
row but for its times: the same blob, device, label, compile log), every tune (the same
record), every fingerprint (the same identity) and every signature (the same row, or one by
the same key and public key, valid, whose list of signed rows lists every row the store's
did, `_re_signed`: a store signed since is never made unsigned) the store holds, the push
goes on conditional on the version just read (its ETag, else the sha256 read, as
`merged_from.Origin`), so another push landing between that read and the PUT is refused
(`raced`); else it is refused as before, saying how many of each the push would lose. A
store object that is no bundle, or that passes a bound, is the refusal too, saying why; one
the temporary folder has no room for is said so (set TMPDIR), never as the store's: nothing
is sent. This module owns the temporary folder it reads in (removed on return), writes
nothing else (its SQL only reads both files there, their schemas checked first), and never
prints.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from warmcli.bundle.location import shown
from warmcli.bundle.merged_from import Since, moved, version
from warmcli.bundle.paired import joined
from warmcli.bundle.push_copy import no_copy
from warmcli.bundle.received import bounds
from warmcli.bundle.soundness import not_a_bundle
from warmcli.errors import BundleError, RemoteError
from warmcli.printable import cut, printable


def caught_up(store: Any, url: str, bundle: Path, copy: BinaryIO, since: Since) -> Since:
    """The condition of the push of `copy` (the state of `bundle` pushed) to `url`, where
    the store (`store`: `remote_http.Http` or `remote_s3.S3`) holds no longer the version
    `since` records: the version it holds now, where every kernel and tune of that is held
    identically by `copy`; else `RemoteError` (`merged_from.moved`, saying why)."""
    import tempfile  # a push's: never a serving process's

    limits = bounds()
    try:
        folder = tempfile.TemporaryDirectory(prefix="warm-push-")
    except OSError as exc:
        raise no_copy(bundle, "could not be made", exc) from None
    with folder as name:
        try:
            got = store.download(None, Path(name), limits)
        except RemoteError as exc:
            said = str(exc).removeprefix(f"{shown(url)}: ").removeprefix(f"{url}: ")
            gone = said.startswith("no bundle there (HTTP 404")  # (`http_open.failed`'s)
            local = "its local copy cannot be kept in "  # (`received._kept`'s: this disk's)
            if said.startswith(local):  # no remedy of the store's (merge, --force): room
                raise RemoteError(
                    f"{bundle}: not pushed: {shown(url)} holds another version than the one "
                    f"{bundle} was merged from, and its copy to compare cannot be kept in "
                    f"{said.removeprefix(local)} (it needs that bundle's size free there: set "
                    "TMPDIR to a folder with room)"
                ) from None
            why = " and holds nothing now (removed)" if gone else f" and was not read ({said})"
            raise moved(url, bundle, since.origin, why) from None
        if got is None:  # (asked of no version: it never says "unchanged")
            raise since.moved
        held, etag, digest = got
        problem = not_a_bundle(held)
        if problem:
            said = printable(cut(problem.removeprefix(f"{held}: "), 200))
            raise moved(url, bundle, since.origin, f" and holds no bundle warm reads ({said})")
        pushed = Path(name) / "pushed.warm"
        try:
            copy.seek(0)
            with open(pushed, "wb") as fh:
                shutil.copyfileobj(copy, fh)
        except OSError as exc:
            raise no_copy(bundle, "failed", exc) from None
        try:
            counts = lost(held, pushed)
        except BundleError as exc:  # (both were just checked: a disk that fails)
            raise moved(url, bundle, since.origin, f" and was not compared ({exc})") from None
    if any(counts):
        what = " and ".join(
            f"{n:,} {kind}{'' if n == 1 else 's'}"
            for n, kind in zip(counts, LOST, strict=True)
            if n
        )
        why = f" and holds {what} that {bundle} does not (another push landed since)"
        raise moved(url, bundle, since.origin, why)
    return Since(version(since.origin.url, etag, digest), raced(url, bundle))


def raced(url: str, bundle: Path) -> RemoteError:
    """A fast-forward refused: another push landed between the read that compared what the
    store held and the PUT conditional on it."""
    return RemoteError(
        f"{shown(url)} changed while the push of {bundle} compared what it holds (another push "
        f"landed): not pushed, nothing lost: push again, or merge again (warm merge "
        f"{shown(url)} ... -o {bundle}), or push --force to replace it"
    )


LOST = ("kernel", "tune", "fingerprint", "signature")  # what `lost` counts, in its order
# A kernel, fingerprint or signature of the store's (`main`) not held identically by the
# push's (`pushed`): each looked up by its key in the other file's primary key (memory flat,
# n log n). A kernel as `kernel_row.write_kernel_row` tells one build from another: every
# column but its times (a run moves `last_used` on). A fingerprint by its identity and kind:
# a toolchain's names its compiler and version, not where it is installed, and a run on a
# machine with it elsewhere writes its own path there (`manifest.put_fingerprint`).
_KERNEL_COLUMNS = (
    "device, backend, arch, entry, label, symbol, sha256, toolchain, components, compile_log"
)
_NOT_HELD = {
    "kernels": ("key", _KERNEL_COLUMNS),
    "fingerprints": ("identity", "kind"),
    "signatures": ("key_id", "public_key, signature, rows, signed_at"),
}


def lost(store: Path, pushed: Path) -> tuple[int, int, int, int]:
    """How many kernels, tunes, fingerprints and signatures (`LOST`) the bundle at `store`
    holds that the one at `pushed` does not hold identically (a kernel: its key with the
    same row but for its times, so the same blob; a tune: the same record; a fingerprint:
    its identity and kind; a signature: the same row, or `_re_signed`'s), each bundle read
    in one state; tunes' keys streamed in order, as `warm diff` joins, each record read by
    its key (the formats store them apart); the rest compared by SQLite (`_not_held`)."""
    from warmcli.bundle.store import Bundle  # on first use, as `soundness` opens one

    with Bundle.open(store) as a, Bundle.open(pushed) as b, a.snapshot(), b.snapshot():
        tunes = 0
        for x, y in joined(a.keys("tunes"), b.keys("tunes")):
            if x is None:
                continue
            if y is None:
                tunes += 1
                continue
            ta, tb = a.tune(x[0]), b.tune(x[0])
            tunes += not (ta is not None and (ta == tb or repr(ta) == repr(tb)))  # (NaN)
        resigned = _re_signed(a, b)
    kernels, fingerprints, signatures = _not_held(store, pushed, resigned)
    return kernels, tunes, fingerprints, signatures


def _re_signed(store: Any, pushed: Any) -> list[str]:
    """The key ids of the signatures of `store` (an open `Bundle`) that one of `pushed`'s
    holds though not as the same row: signed again by the same key (its key id and public
    key) over a list of rows that lists every row the store's did (`_lists`), and valid
    (`StoredSignature.valid`: one that does not verify displaces none). Both read as
    `Bundle.signatures` reads them (bounded: a malformed row is left out, so not held;
    more than it reads, none held)."""
    from warmcli.bundle.signing import HASH_BYTES

    def skip(_key: str, _why: str) -> None:
        return None

    try:
        theirs = {s.key_id: s for s in store.signatures(on_error=skip)}
        ours = {s.key_id: s for s in pushed.signatures(on_error=skip)}
    except BundleError:  # (more than `SIGNATURES`, or a disk that fails: none re-signed)
        return []
    held = []
    for key, signature in theirs.items():
        again = ours.get(key)
        if again is None or again == signature or again.public_key != signature.public_key:
            continue  # (none by that key; the same row, held as it is; another key)
        if _lists(signature.rows, again.rows, HASH_BYTES) and again.valid():
            held.append(key)
    return held


def _lists(rows: bytes, among: bytes, size: int) -> bool:
    """Whether the sorted list of row hashes `among` (`StoredSignature.rows`: `size` bytes
    each) lists every one `rows` does: both walked once, in order (a list that is not sorted
    lists fewer, never more)."""
    if len(rows) % size or len(among) % size:
        return False
    at, end = 0, len(among)
    for i in range(0, len(rows), size):
        wanted = rows[i : i + size]
        while at < end and among[at : at + size] < wanted:
            at += size
        if at == end or among[at : at + size] != wanted:
            return False
        at += size
    return True


def _not_held(store: Path, pushed: Path, resigned: Sequence[str] = ()) -> tuple[int, int, int]:
    """How many kernels, fingerprints and signatures of `store` `pushed` does not hold, row
    for row (`_NOT_HELD`; a signature whose key id is one of `resigned`, `_re_signed`'s, is
    held); every signature, where `pushed` has no `signatures` table (a bundle made before
    there were any). Both files' schemas are checked as an open checks
    them (no view or trigger of a file's own ever runs); `BundleError` where one cannot be
    read."""
    import contextlib

    from warmcli.bundle.file import (
        OWN_CACHE,
        _connect,
        _read_only_uri,
        _sqlite_errors,
        _validate,
        check_header,
        unbounded,
    )

    with _sqlite_errors(store), contextlib.closing(_connect(_read_only_uri(store), uri=True)) as c:
        _validate(store, c, check_header(store)[0])
        with contextlib.closing(_connect(_read_only_uri(pushed), uri=True)) as p:
            _validate(pushed, p, check_header(pushed)[0])
        unbounded(c)  # (both schemas checked: a count may take millions of steps)
        c.execute("ATTACH DATABASE ? AS pushed", (_read_only_uri(pushed),))
        c.execute(OWN_CACHE.replace("PRAGMA ", "PRAGMA pushed."))
        counts = []
        for table, (key, columns) in _NOT_HELD.items():
            has = "SELECT count(*) FROM {}.sqlite_master WHERE type = 'table' AND name = ?"
            if not c.execute(has.format("main"), (table,)).fetchone()[0]:
                counts.append(0)  # (none held: none lost)
                continue
            if not c.execute(has.format("pushed"), (table,)).fetchone()[0]:
                counts.append(c.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0])
                continue
            same = " AND ".join(f"p.{col} IS s.{col}" for col in columns.split(", "))
            query = (
                f"SELECT count(*) FROM main.{table} s WHERE NOT EXISTS (SELECT 1 FROM "
                f"pushed.{table} p WHERE p.{key} = s.{key} AND {same})"
            )
            again = resigned if table == "signatures" else ()
            if again:
                query += f" AND s.{key} NOT IN ({', '.join('?' * len(again))})"
            counts.append(c.execute(query, tuple(again)).fetchone()[0])
    return int(counts[0]), int(counts[1]), int(counts[2])
