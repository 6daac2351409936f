"""Bundle signatures: which entries a key's owner vouches for (Ed25519, `cryptography`, lazily).

A bundle is native code: its binaries are loaded with a sha256 the bundle itself
supplies, so integrity is not trust. A signature says, by content, which rows its
signer vouches for. Every row of the manifest (but its `updated` time), of
`fingerprints`, `blobs` (sha256 and size), `kernels` and `tunes` (all but their
usage times) has a `row_hash` over its table and typed values; a signature is an
Ed25519 signature of the sorted list of those hashes, stored with the list in the
bundle's `signatures` table. So a VACUUM or a copy stays signed, an edited row or
a swapped blob matches no signed hash, and a row added later is simply not covered.
A signature vouches for a bundle only in the format it was signed in (its manifest's
`format_version` row, which must name the header's format: `format_row`); one made
before a migration is `stale`, named so by `warm verify`, and vouches for nothing
until the bundle is signed again (a migration never re-signs).
Under trusted keys (`WARM_TRUSTED_KEYS`, or `use_bundle(..., trusted_keys=...)`) a
bundle that holds entries but no valid, current signature of a trusted key is refused (but
to a writer that signs, `warm run --key`: none of its entries served), and a kernel or
tune row no such signature covers is never served (`Bundle.kernel`, `Bundle.tune`). The
`cryptography` package (extra `sign`) is imported only when a key is read or a signature
made or checked. A bundle is reached through the `SignedRows`
protocol (`Bundle` is one; this module never imports it). What `warm verify` says of a
bundle's signatures is `warmcli.bundle.signature_report`. It owns no state and never prints.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import struct
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from warmcli import config
from warmcli.bundle.file import read_start
from warmcli.bundle.key_files import crypto as _crypto
from warmcli.bundle.key_files import not_pem, open_to_writers, pem_blocks
from warmcli.bundle.rows import OnError, _key_id, _Malformed, _named, _seconds
from warmcli.bundle.schema import SCHEMAS
from warmcli.bundle.unshown import key_text
from warmcli.config import TRUSTED_KEYS_ENV
from warmcli.errors import BundleError, SignatureError, TrustedKeyWarning  # (re-exported)
from warmcli.printable import cut
from warmcli.records import Record

HASH_BYTES = 32
DOMAIN = b"warm bundle signature v1\n"
KEY_FILE_BYTES = 64 << 10  # a PEM key is a few hundred bytes
SHOWN = 10  # uncovered entries named in a report


# -- what is signed -----------------------------------------------------------------------------


def _value(value: object) -> bytes:
    """One SQLite value, typed and length-prefixed, so no two rows encode alike."""
    if value is None:
        return b"n"
    if isinstance(value, int):
        text = str(value).encode()
        return b"i" + struct.pack(">I", len(text)) + text
    if isinstance(value, float):  # every NaN as one 8-byte value: all are the same value
        return b"f" + struct.pack(">d", math.nan if math.isnan(value) else value)
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    tag = b"s" if isinstance(value, str) else b"b"
    return tag + struct.pack(">Q", len(raw)) + raw


def row_hash(table: str, values: Sequence[object]) -> bytes:
    """The sha256 of one row of `table` as SQLite returns it (its signed columns)."""
    h = hashlib.sha256(DOMAIN)
    h.update(_value(table))
    h.update(struct.pack(">I", len(values)))
    for v in values:
        h.update(_value(v))
    return h.digest()


def format_row(version: int) -> bytes:
    """The hash of the manifest row naming format `version`: a signature vouches for a
    bundle only in the format it was signed in (the header's, which a process reads it by)."""
    return row_hash("manifest", ("format_version", str(version)))


def _message(rows: bytes) -> bytes:
    return DOMAIN + hashlib.sha256(rows).digest()


def key_id(public: bytes) -> str:
    """A public key's short name: the first 16 hex digits of its sha256."""
    return hashlib.sha256(public).hexdigest()[:16]


# -- keys -----------------------------------------------------------------------------------------


def _load_key(path: str | os.PathLike[str], private: bool) -> Any:
    """An Ed25519 key from a PEM file; anything else is a one-line `SignatureError` (one
    naming key text given in its place, not showing it: `key_text`; a path past `cut`'s
    length cut short: a 100,000-character one in `WARM_TRUSTED_KEYS` was shown whole)."""
    serialization, ed25519 = _crypto()
    what = "an unencrypted PEM private key" if private else "a PEM public key"
    named = path
    if key_text(path):
        raise SignatureError(
            f"key text given where a key file's path belongs (not shown): write {what} to a "
            f"file{' (chmod 600)' if private else ''} and name the file"
        )
    path = cut(os.fspath(path))  # (what is read is named by `named`, whole)
    try:
        data = read_start(named, KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise SignatureError(f"{path}: cannot read key: {exc.strerror}") from None
    if data is None:
        raise SignatureError(f"{path}: not {what} (not a regular file)")
    if len(data) > KEY_FILE_BYTES:
        raise SignatureError(f"{path}: not {what} (over {KEY_FILE_BYTES} bytes)")
    if blocks := pem_blocks(data):
        raise SignatureError(f"{path}: {blocks} PEM blocks: a key file holds one key alone")
    if not private and b"PRIVATE KEY-----" in data:  # ci.key named for ci.key.pub
        raise SignatureError(
            f"{path}: a private key where a public key belongs: trust its public key "
            f"({path}.pub), and keep the private key off machines that serve bundles"
        )
    if private and b"PUBLIC KEY-----" in data:
        raise SignatureError(
            f"{path}: a public key where a private key belongs: sign with the private key "
            "it was made from"
        )
    try:
        if private:
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"{path}: not {what} ({not_pem(data, exc)})") from None
    kind = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, kind):
        raise SignatureError(f"{path}: not an Ed25519 key")
    return key


def load_private_key(path: str | os.PathLike[str]) -> Any:
    """An Ed25519 private key from a PEM file (`warm keygen`, `openssl genpkey`)."""
    return _load_key(path, private=True)


def load_public_key(path: str | os.PathLike[str]) -> bytes:
    """The raw 32 bytes of an Ed25519 public key in a PEM file (`.pub` of `warm keygen`)."""
    return _raw_public(_load_key(path, private=False))


def public_raw(private_key: Any) -> bytes:
    """The raw public key of `private_key` (as a signature row stores it)."""
    return _raw_public(private_key.public_key())


def _raw_public(key: Any) -> bytes:
    serialization, _ = _crypto()
    raw: bytes = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw


def is_trusted(private_key: Any, trusted: Sequence[bytes]) -> bool:
    """Whether what `private_key` signs is signed by one of the `trusted` keys."""
    return _raw_public(private_key.public_key()) in trusted


def trusted_keys(
    given: Iterable[str | os.PathLike[str]] | None = None, named_by: str = TRUSTED_KEYS_ENV
) -> list[bytes] | None:
    """The trusted public keys: `given` key files, else `WARM_TRUSTED_KEYS` (files or
    directories of `*.pub` files, separated by the path separator; an empty path, or a `Path`
    of `.` (`Path("")` is one), the working folder, is refused); None when neither. An error
    names what named them (`named_by`: that variable, or `trusted_keys=`: `use_bundle`'s)."""
    if given is None:
        given = config.trusted_keys()
        if given is None:
            return None
    given = list(given)
    for entry in given:  # `Path("")` is `.`, a folder: so is a `Path` made of an unset variable
        if os.fspath(entry) == "" or (not isinstance(entry, str) and os.fspath(entry) == "."):
            said = "an empty path" if os.fspath(entry) == "" else "Path('.') (as Path('') is)"
            raise SignatureError(
                f"{named_by}: {said} names no key file (read as the working folder, it would "
                "trust every *.pub there): name Ed25519 public key files (.pub), a folder of "
                "them by its own name"
            )
    named: dict[Path, list[Path]] = {}
    for entry in map(Path, given):
        text = key_text(entry)
        is_dir = os.path.isdir(entry)  # (False for a name too long: `Path.is_dir` raised)
        named[entry] = [entry] if text or not is_dir else sorted(entry.glob("*.pub"))
    files = [f for entry_files in named.values() for f in entry_files]
    if not files:
        named_none = "no trusted keys: name Ed25519 public key files (.pub)"
        raise SignatureError(f"{named_by}: {named_none}")
    try:  # (named by the variable or by `use_bundle`'s argument: its error says which)
        keys = [load_public_key(f) for f in files]
    except SignatureError as exc:
        raise SignatureError(f"{named_by}: {exc}") from None
    for entry, entry_files in named.items():  # one each: `warnings` says a message once
        open_to = next(filter(None, map(open_to_writers, [entry, *entry_files])), None)
        if open_to:
            place, mode = open_to
            warnings.warn(
                f"{entry}: trusted key others may replace: {place} (mode 0{mode:o}) is "
                f"writable by all, so anyone may choose what is trusted: chmod o-w {place}",
                TrustedKeyWarning,
                stacklevel=2,
            )
    return keys


# -- signing and checking -------------------------------------------------------------------------


class StoredSignature(Record):
    """One row of a bundle's `signatures` table, as read (not yet checked)."""

    key_id: str
    public_key: bytes
    signature: bytes
    rows: bytes  # sorted row hashes, HASH_BYTES each
    signed_at: float

    def valid(self) -> bool:
        """Whether the signature is the public key's over its list of row hashes."""
        _, ed25519 = _crypto()
        if len(self.rows) % HASH_BYTES or len(self.public_key) != 32:
            return False
        try:
            key = ed25519.Ed25519PublicKey.from_public_bytes(self.public_key)
            key.verify(self.signature, _message(self.rows))
        except Exception:  # InvalidSignature, or bytes that are no key
            return False
        return key_id(self.public_key) == self.key_id

    @property
    def count(self) -> int:
        """How many rows the signature covers."""
        return len(self.rows) // HASH_BYTES

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> StoredSignature:
        """A `signatures` row (key_id, public_key, signature, signed_at, rows), type-checked
        (`_Malformed` if a field is not what warm writes), not verified."""
        key, public, signature, signed_at, hashes = row
        for name, value in (("public_key", public), ("signature", signature), ("rows", hashes)):
            if not isinstance(value, bytes):
                raise _Malformed(f"{name}: not a blob within the limit")
        when = _named("signed_at", _seconds, signed_at)
        return cls(_named("key_id", _key_id, key), public, signature, hashes, when)


class SignedRows(Protocol):
    """What signing reads and writes of a bundle (`Bundle` is one; this module never
    imports it): its rows' hashes, its stored signatures, and a way to store one."""

    path: Path

    def row_hashes(self, on_error: OnError | None = None) -> Iterator[tuple[str, str, bytes]]: ...

    def signed_rows(
        self, tables: Sequence[str], shown: int
    ) -> tuple[int, list[tuple[str, str]]]: ...

    def signatures(
        self, keys: Sequence[bytes] | None = None, on_error: OnError | None = None
    ) -> list[StoredSignature]: ...

    def sign(
        self,
        make: Callable[[Iterator[tuple[str, str, bytes]]], StoredSignature],
        stored: list[StoredSignature] | None = None,
    ) -> StoredSignature: ...

    def holds_entries(self) -> bool: ...

    def format_version(self) -> int: ...


class RowSet:
    """Row hashes that signatures cover: their sorted lists, searched in place (a list of
    millions of hashes is never made a set of millions of objects)."""

    def __init__(self, lists: Iterable[bytes] = ()) -> None:
        self._lists = [bytes(rows) for rows in lists]

    def __contains__(self, wanted: object) -> bool:
        for rows in self._lists:
            lo, hi = 0, len(rows) // HASH_BYTES
            while lo < hi:
                mid = (lo + hi) // 2
                here = rows[mid * HASH_BYTES : (mid + 1) * HASH_BYTES]
                if here == wanted:
                    return True
                if isinstance(wanted, bytes) and here < wanted:
                    lo = mid + 1
                else:
                    hi = mid
        return False


def sign(
    bundle: SignedRows,
    private_key: Any,
    keep: Callable[[str, str, bytes], bool] | None = None,
    stored: list[StoredSignature] | None = None,
) -> StoredSignature:
    """Sign every row of the open, writable `bundle` (those `keep(table, name, hash)`
    accepts, if given) in one transaction under its lock; the key's earlier signature
    is replaced. Once committed it is appended to `stored` (an interrupt is held until
    both are done, or neither: `SignedRows.sign`)."""
    public = _raw_public(private_key.public_key())

    def make(rows: Iterator[tuple[str, str, bytes]]) -> StoredSignature:
        hashes = b"".join(sorted({h for t, n, h in rows if keep is None or keep(t, n, h)}))
        message = _message(hashes)
        return StoredSignature(
            key_id(public), public, private_key.sign(message), hashes, time.time()
        )

    return bundle.sign(make, stored)


def stale(signature: StoredSignature, version: int) -> str | None:
    """Why a valid `signature` no longer vouches for its bundle, now of format `version`
    (it was signed in another: migrated since), or None when it still does."""
    rows = RowSet([signature.rows])
    if format_row(version) in rows:
        return None
    signed = next((f"format {v}" for v in sorted(SCHEMAS) if format_row(v) in rows), "no format")
    return (
        f"signature by key {signature.key_id} no longer covers the bundle: signed at "
        f"{signed}, it is format {version} now (migrated since); sign it again (warm sign)"
    )


def judged_before_migration(
    opener: Any, path: Path, trusted: Sequence[bytes], signs: bool
) -> RowSet | None:
    """Under trusted keys, a write open of a bundle of an older format is judged as it is,
    before its migration (`opener.open` opens it read-only): one refused then is never
    migrated, so left byte-identical. Its trusted signatures go stale with the migration,
    so one holding entries they cover is refused too unless the writer signs again
    before it closes (`signs`: `warm run --key`). Returns what they covered, with the new
    format's version row the migration writes; None for a bundle of this format."""
    from warmcli.bundle.file import FORMAT_VERSION, check_header

    try:
        version = check_header(path)[0]
    except (OSError, BundleError):  # none yet, or no bundle: the open itself says so
        return None
    if version == FORMAT_VERSION or version not in SCHEMAS:
        return None
    with opener.open(path) as bundle:  # judged once, here (an open with keys judges too)
        rows = covered(bundle, trusted)  # refused as it is: never migrated, signing or not
        held = bundle.holds_entries()
    if held and not signs:
        raise SignatureError(
            f"{path}: bundle refused for writing: migrating it from format {version} to "
            f"{FORMAT_VERSION} would leave its trusted signature stale; write it with the "
            "signing key (--key) to sign it again"
        )
    return RowSet([*rows._lists, format_row(FORMAT_VERSION)])


def covered(bundle: SignedRows, trusted: Sequence[bytes], signs: bool = False) -> RowSet:
    """The row hashes that valid signatures of `trusted` keys cover; a bundle holding
    entries that no trusted key validly signed in its format is refused with `SignatureError`,
    but to a writer that `signs` (`warm run --key`) one of this format, for which it covers
    its manifest only: as a signed bundle's unsigned rows, no entry is served, and what the
    writer stores it signs (an older format is refused before it migrates, signing or not)."""
    version = bundle.format_version()
    judged = [(s, stale(s, version)) for s in bundle.signatures(trusted) if s.valid()]
    why = [w for _, w in judged if w]
    good = [s for s, w in judged if w is None]
    refused = not good and bundle.holds_entries()
    if refused and signs:  # a first run cancelled before it signed: its re-run signs
        rows = bundle.row_hashes(lambda _key, _why: None)  # the manifest's: read first
        manifest = {h for t, _, h in itertools.takewhile(lambda r: r[0] == "manifest", rows)}
        return RowSet([b"".join(sorted(manifest | {format_row(version)}))])
    if refused and why:
        raise SignatureError(f"{bundle.path}: bundle refused: {why[0]}")
    if refused:
        held = [s.key_id for s in bundle.signatures()]
        why = (
            f"signed only by untrusted or invalid key(s) {', '.join(held)}" if held else "unsigned"
        )
        raise SignatureError(
            f"{bundle.path}: bundle refused: {why}, and the trusted keys ({TRUSTED_KEYS_ENV} "
            "or trusted_keys=) ask for a signature by one of them"
        )
    return RowSet(s.rows for s in good)
