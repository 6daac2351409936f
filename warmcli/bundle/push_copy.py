"""The copy `warmcli.bundle.remote.push` uploads: one state of a bundle, copied into an
anonymous temporary file (`scratch`, in `TMPDIR`) and hashed as it is copied (`copied`:
its sha256 and MD5 in one pass). A copy the system refuses (no temporary folder, a full
disk) is a one-line `RemoteError` naming the folder and the room it needs (a file size limit,
`ulimit -f`, below the bundle's size: that limit, which no room in TMPDIR lifts). `held` says
whether what a store states of its object (the sha256 a push stated, an ETag that is the
MD5 S3 gives a one-part upload, its length: all it states) is this copy: then nothing is
sent, as `aws s3 sync` and rsync send nothing. It owns no state beyond the file it is
handed and never prints.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from warmcli.bundle.received import CHUNK
from warmcli.errors import RemoteError


@contextlib.contextmanager
def scratch(bundle: Path) -> Iterator[BinaryIO]:
    """An anonymous temporary file (the system's temporary folder; gone when closed) for
    the copy of `bundle` that is pushed; `RemoteError` where none can be made."""
    import tempfile  # a push's: never a serving process's

    try:
        made = tempfile.TemporaryFile(prefix="warm-push-")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise no_copy(bundle, "could not be made", exc) from None
    with made:
        yield made


def copied(bundle: Path, fh: BinaryIO, copy: BinaryIO) -> tuple[str, bytes]:
    """`fh` copied into `copy`, and its sha256 (hex) and MD5 (raw, what an object store
    checks a PUT by), all in one pass, a chunk at a time; `RemoteError` where the copy
    cannot be written (a full disk)."""
    sha256, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    try:
        while chunk := fh.read(CHUNK):
            sha256.update(chunk)
            md5.update(chunk)
            copy.write(chunk)
        copy.flush()
    except OSError as exc:
        raise no_copy(bundle, "failed", exc) from None
    return sha256.hexdigest(), md5.digest()


def no_copy(bundle: Path, what: str, exc: OSError) -> RemoteError:
    """The temporary copy of a push refused: said with its folder, which TMPDIR chooses."""
    import tempfile

    why = exc.strerror or type(exc).__name__
    try:
        folder = tempfile.gettempdir()
    except OSError:  # none usable: none was named
        folder = "the temporary folder"
    if exc.errno == errno.EFBIG:  # a limit on a file's size, not on room
        need = (  # (or TMPDIR's file system's largest file: FAT's 4 GiB)
            "a file size limit (ulimit -f), or the largest file its file system takes, is "
            "below the bundle's size: raise that limit, or set TMPDIR to another file system"
        )
    else:
        need = "it needs the bundle's size free there: set TMPDIR to a folder with room"
    return RemoteError(
        f"{bundle}: not pushed: its temporary copy in {folder} {what} ({why}; {need})"
    )


def held(
    stated: str | None, etag: str | None, length: object, digest: str, md5: bytes, size: int
) -> bool:
    """Whether a store's object is the copy of `size` bytes, `digest` (sha256, hex) and `md5`
    (raw): each of what the store states must match, and one at least must be stated: the
    sha256 (a push's own metadata), an ETag that is an MD5 (S3's of one part, computed by the
    store from the bytes it holds: an object whose metadata matches but bytes do not is
    sent again; another store's ETag says nothing here), and the length."""
    if length is not None and str(length).strip() != str(size):
        return False
    tag = str(etag or "").strip().removeprefix("W/").strip('"').lower()
    is_md5 = len(tag) == 32 and all(c in "0123456789abcdef" for c in tag)
    if is_md5 and tag != md5.hex():
        return False
    if stated:
        return stated.strip().lower() == digest
    return is_md5
