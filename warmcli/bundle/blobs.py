"""A blob read a chunk at a time, so no size in a bundle sets warm's memory.

`MAX_LOADED_BYTES` caps a binary warm loads (hands to a device: a host library, a CUDA
image, which `cuModuleLoadData` needs whole in memory): `Bundle.blob` refuses a larger
one without reading it (one under it is held whole, twice while SQLite hands it over:
memory bounded by the cap, not by the bundle). A blob is otherwise only hashed
(`digest`), copied between bundles (`streamed`, what `warm merge` writes), or its first
bytes read with its length (`head`: what tells a blob's kind, its sha256 unchecked;
`sound` checks it), `CHUNK_BYTES` at a time through SQLite's incremental blob handles
(`Connection.blobopen`). A copy
is hashed as it is written and checked before its transaction commits: a blob failing
its sha256 or size (one another process rewrote after its size was read, longer or
shorter) is refused as `Bundle.blob` refuses it. It owns no state beyond one
copy's, never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import hashlib
from collections.abc import Iterator

from warmcli.bundle.file import _sqlite_errors
from warmcli.bundle.rows import MAX_BLOB_BYTES, RowReader
from warmcli.errors import BundleError

# The largest binary warm loads: far above any it builds (a host library of a few
# kernels is tens of KB, a CUDA image a few MB), so only a bundle made to cost memory
# meets it. The cap bounds what serving holds, as `MAX_BLOB_BYTES` bounds what is stored.
MAX_LOADED_BYTES = 64 << 20
CHUNK_BYTES = 1 << 20
_SIZES = "SELECT size, length(data), typeof(data), rowid FROM blobs WHERE sha256 = ?"


def over_cap(path: object, short: str, length: int, limit: int) -> BundleError:
    """The refusal of a blob too large to load (`limit`: `MAX_LOADED_BYTES`)."""
    return BundleError(
        f"{path}: blob {short} is {length} bytes, over the limit of {limit} bytes warm loads"
    )


def chunks(reader: RowReader, rowid: int) -> Iterator[bytes]:
    """The data of the blob in row `rowid`, `CHUNK_BYTES` at a time."""
    with reader._lock, _sqlite_errors(reader.path):
        with reader._conn.blobopen("blobs", "data", rowid, readonly=True) as blob:
            while chunk := blob.read(CHUNK_BYTES):
                yield chunk


def head(reader: RowReader, sha256: str, n: int) -> tuple[bytes, int] | None:
    """The first `n` bytes of the blob of `sha256` (a shorter one whole), the rest never
    read, and its length; None where it is missing. Its sha256 is not checked: a caller
    tells nothing of them before the whole blob is read as `Bundle.blob` reads it
    (`warmcli.ops.exported`)."""
    row = reader._one(_SIZES, (sha256,))
    if row is None or row[2] != "blob":
        return None
    with reader._lock, _sqlite_errors(reader.path):
        with reader._conn.blobopen("blobs", "data", row[3], readonly=True) as blob:
            return blob.read(n), int(row[1])


def sound(reader: RowReader, sha256: str) -> bool:
    """Whether the blob of `sha256` is there, its entry's size its length (within
    `MAX_BLOB_BYTES`) and its data hashes to it: `Bundle.blob`'s checks, read a chunk at a
    time, so a blob over `MAX_LOADED_BYTES` is judged too (what `head` read is then its)."""
    row = reader._one(_SIZES, (sha256,))
    if row is None or row[2] != "blob" or row[1] > MAX_BLOB_BYTES or row[0] != row[1]:
        return False
    return digest(reader, row[3]) == sha256


def digest(reader: RowReader, rowid: int) -> str:
    """The sha256 of the blob in row `rowid`, hashed a chunk at a time."""
    hashed = hashlib.sha256()
    for chunk in chunks(reader, rowid):
        hashed.update(chunk)
    return hashed.hexdigest()


class Streamed:
    """A blob of an open bundle that `Bundle.put` copies a chunk at a time (what `len`
    gives is its size), checked against its sha256 as it is copied."""

    def __init__(self, source: RowReader, sha256: str, size: int, rowid: int) -> None:
        self.source, self.sha256, self.size, self._rowid = source, sha256, size, rowid
        self._stored: set[int] = set()  # ids of the connections it was copied into

    def __len__(self) -> int:
        return self.size

    def store(self, conn: sqlite3.Connection) -> None:
        """Write it as the blob of its sha256 in `conn`'s open transaction (once)."""
        if id(conn) in self._stored:
            return
        cursor = conn.execute(
            "INSERT OR REPLACE INTO blobs VALUES (?, ?, zeroblob(?))",
            (self.sha256, self.size, self.size),
        )
        hashed, at = hashlib.sha256(), 0
        with conn.blobopen("blobs", "data", cursor.lastrowid) as out:
            for chunk in chunks(self.source, self._rowid):
                at += len(chunk)
                if at > self.size:  # grown since its size was read: refused below
                    break
                hashed.update(chunk)
                out.write(chunk)
        if at != self.size or hashed.hexdigest() != self.sha256:  # the transaction rolls back
            short = self.sha256[:16]
            raise BundleError(f"{self.source.path}: blob {short} does not match its sha256")
        self._stored.add(id(conn))


def streamed(reader: RowReader, sha256: str) -> Streamed:
    """The blob of `sha256` in `reader`'s bundle, to copy a chunk at a time; `BundleError`
    if it is missing, over `MAX_BLOB_BYTES` or its entry's size is not its length (its
    sha256 is checked as it is copied)."""
    short = str(sha256)[:16]
    row = reader._one(_SIZES, (sha256,))
    if row is None or row[2] != "blob":
        raise BundleError(f"{reader.path}: blob {short} is missing")
    size, length, _, rowid = row
    if length > MAX_BLOB_BYTES:
        raise BundleError(f"{reader.path}: blob {short} is {length} bytes, over the limit")
    if size != length:
        raise BundleError(f"{reader.path}: blob {short} is {length} bytes, its entry says {size}")
    return Streamed(reader, str(sha256), int(length), int(rowid))
