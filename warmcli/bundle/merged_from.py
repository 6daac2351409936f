"""Which version of a URL a merged bundle was made from: the manifest's `merged_from` row.

A fleet's `warm merge URL new.warm -o next.warm && warm push next.warm URL` would put its
merge over a push another job made between the merge's download and this push: that job's
kernels and tunes gone from the store. So `warm merge` records, for each input it read from
a URL, the URL (as a kept copy is known by, `location.kept_as`: no credentials, no signing
query) and the version of it merged: the store's ETag, else the sha256 of what it sent
(`fetched`, read from what `warmcli.bundle.remote` remembered beside the copy it published,
only where that record is of this very copy), and what its inputs record (`joined`). `warm
push` of such a bundle to that URL is then conditional on that version (`recorded`:
optimistic concurrency, as a conditional write on the version read), refused when the store
moved on (`Since.moved`: merge again), unless the bundle holds all that the store holds now
(`warmcli.bundle.fast_forward`: a copy pulled, run and pushed while nobody pushed since).

The record is a JSON list of `{"url", "etag", "sha256"}` objects in one manifest row, then
as many more as it needs (`merged_from.2`, ...: `laid_out`, each value within `MAX_CHARS`, at
most `MAX_ROWS`: a merge past that is refused, never a record cut short); an older warm reads
them as manifest fields it does not know, shown as text. Read back it is untrusted input:
`parse` is strict and bounded (a value over `MAX_CHARS`, which no reader loads, or not as
written here, a sha256 not in hex or an ETag no HTTP header holds, is no record, never an
error), and every message says its text through `printable`. This module owns no state,
opens no file but the small record beside a copy (it reads a merge's open inputs'
manifests), writes its rows into a writer's transaction, and never prints.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from warmcli.bundle.location import kept_as, shown, url_text
from warmcli.bundle.received import copy_identity, read_meta
from warmcli.bundle.rows import MAX_NAME_CHARS
from warmcli.errors import BundleError, RemoteError
from warmcli.printable import cut, printable
from warmcli.records import Record

if TYPE_CHECKING:
    from warmcli.bundle.store import Bundle

KEY = "merged_from"  # the manifest row (then `KEY.2`, ...: `row_key`)
MAX_CHARS = MAX_NAME_CHARS  # of a row's value: what every reader takes of a manifest's
MAX_ROWS = 16  # of the record (a manifest of over `MANIFEST_ROWS`, 64, is refused)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ETAG = re.compile(r"[\x21-\x7e]{1,512}")  # what an HTTP header holds as it is sent


def is_etag(text: object) -> bool:
    """Whether `text` is an ETag a PUT's `If-Match` may send: visible ASCII, no space."""
    return isinstance(text, str) and _ETAG.fullmatch(text) is not None


class Origin(Record):
    """A URL merged (as `kept_as` gives it), at which version: its ETag, else None; and
    the sha256 of the bundle it held."""

    url: str
    etag: str | None
    sha256: str


def fetched(url: str, copy: Path) -> Origin | None:
    """The version of `url` that its local `copy` (just fetched) holds, from what was
    remembered beside it when it was published; None where that is not of this copy."""
    meta = read_meta(copy.parent / "meta.json")
    digest, etag = meta.get("sha256", ""), meta.get("etag")
    if meta.get("copy") != copy_identity(copy) or not etag:
        return None
    if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        return None
    try:
        known = kept_as(url_text(url))
    except RemoteError:  # (never: it was just fetched)
        return None
    return version(known, etag, digest)


def version(url: str, etag: str, digest: str) -> Origin:
    """`url` at the version a store gave as `etag` (else the sha256, as `received` names a
    version it gave no ETag of) holding a bundle of sha256 `digest`: the ETag recorded only
    where it is one (not that sha256) and a PUT's `If-Match` holds it, else the sha256 alone."""
    return Origin(url, etag if etag != digest and is_etag(etag) else None, digest)


def laid_out(origins: Sequence[Origin]) -> list[tuple[str, str]] | str:
    """The manifest rows that record `origins`, in order: `KEY`, then `KEY.2`, ... (each
    value a JSON list within `MAX_CHARS`, at most `MAX_ROWS`); where they do not fit, why
    (never a record cut short: a push to a URL left out would be unconditional)."""
    too_long = (
        f"the record of the {len(origins):,} URLs it would be merged from (what a push to "
        f"one is conditional on) is over {MAX_ROWS} x {MAX_CHARS:,} characters: merge fewer "
        "at once"
    )
    laid: list[tuple[str, str]] = []
    row: list[dict[str, str | None]] = []
    for o in origins:
        doc = {"url": o.url, "etag": o.etag, "sha256": o.sha256}
        if row and len(json.dumps([*row, doc])) > MAX_CHARS:
            laid.append((row_key(len(laid)), json.dumps(row)))
            row = []
            if len(laid) == MAX_ROWS:  # (and one more to lay out)
                return too_long
        if len(json.dumps([doc])) > MAX_CHARS:
            return too_long
        row.append(doc)
    if row:
        laid.append((row_key(len(laid)), json.dumps(row)))
    return laid


def row_key(index: int) -> str:
    """The manifest key of the record's `index`th row (from 0)."""
    return KEY if index == 0 else f"{KEY}.{index + 1}"


def put(conn: sqlite3.Connection, laid: Sequence[tuple[str, str]]) -> None:
    """Store the rows `laid_out` gave in the manifest, in place of any there."""
    conn.execute("DELETE FROM manifest WHERE key = ? OR key GLOB ?", (KEY, f"{KEY}.*"))
    conn.executemany("INSERT INTO manifest VALUES (?, ?)", laid)


def joined(fresh: Sequence[Origin], inputs: Sequence[Bundle]) -> list[Origin]:
    """What a merge's output records: `fresh` (the URLs it read), then what its `inputs`
    record (a bundle merged from a URL, merged again, still holds that version), each URL
    once (the first: a version read now, else the first input's)."""
    held = list(fresh)
    for bundle in inputs:
        with contextlib.suppress(BundleError):  # a manifest warm cannot read: no record
            held += read(bundle.manifest())
    seen: set[str] = set()
    return [o for o in held if not (o.url in seen or seen.add(o.url))]


def read(manifest: Mapping[str, str]) -> list[Origin]:
    """What a manifest's rows record (`row_key`'s, each parsed on its own), in order."""
    return [o for i in range(MAX_ROWS) for o in parse(manifest.get(row_key(i)))]


def parse(text: object) -> list[Origin]:
    """A manifest `merged_from` value as its records; [] where it is none warm writes."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return []
    try:
        doc = json.loads(text, parse_constant=float)  # (NaN: no string, refused below)
    except (ValueError, RecursionError):
        return []
    if not isinstance(doc, list):
        return []
    origins = []
    for item in doc:
        if not isinstance(item, dict) or set(item) != {"url", "etag", "sha256"}:
            return []
        url, etag, digest = item["url"], item["etag"], item["sha256"]
        if not (isinstance(url, str) and url and isinstance(digest, str)):
            return []
        if not _HEX64.fullmatch(digest) or not (etag is None or is_etag(etag)):
            return []
        origins.append(Origin(url, etag, digest))
    return origins


class Since(Record):
    """A push's condition: the version of its URL the bundle was merged from (`origin`), and
    the error raised where the store holds another (`moved`)."""

    origin: Origin
    moved: RemoteError


def recorded(manifest: Mapping[str, str], url: str, bundle: Path) -> Since | None:
    """The condition of a push of `bundle` (its `manifest`) to `url`: the version of it
    recorded as merged, if any, and the error said where the store moved on."""
    try:
        known = kept_as(url_text(url))
    except RemoteError:  # (the push says what is wrong with it)
        return None
    origin = next((o for o in read(manifest) if o.url == known), None)
    return None if origin is None else Since(origin, moved(url, bundle, origin))


def unchanged(
    since: Since, name: str, etag: str | None, stated: str | None, conditional: bool
) -> None:
    """`since.moved` raised where what a store's HEAD said of its object (`etag`: "" where
    nothing is there, None where it said none; `stated`: the sha256 stated with it) is not
    the version merged; a `RemoteError` where that cannot be told and the PUT is not
    `conditional` on the ETag recorded (the store's `If-Match` then tells)."""
    origin = since.origin
    if etag == "":
        raise since.moved
    if origin.etag is not None and etag is not None:
        if etag != origin.etag:
            raise since.moved
    elif stated is not None and not (origin.etag is not None and conditional):
        if stated != origin.sha256:
            raise since.moved
    elif origin.etag is None or not conditional:
        raise RemoteError(
            f"{name}: not pushed: the store says neither the ETag nor the sha256 of what it "
            "holds: whether it changed since this bundle was merged from it cannot be told "
            "(push --force replaces it all the same)"
        )


def moved(url: str, bundle: Path, origin: Origin, why: str = "") -> RemoteError:
    """A push refused: the store at `url` holds no longer the version `bundle` was merged
    from (another push landed since, or it was removed); `why`, where given, says what
    it holds now (`fast_forward`: what the push would lose, or why that was not read)."""
    was = printable(cut(origin.etag or f"sha256 {origin.sha256[:16]}", 80))
    return RemoteError(
        f"{shown(url)} changed since {bundle} was merged from it (from {was}){why}: not "
        f"pushed, nothing lost: merge again (warm merge {shown(url)} ... -o {bundle}), or "
        "push --force to replace it"
    )
