"""A keyed reader's first copy of a URL's bundle, taken from the copy kept for readers that
check no signature, or for another set of trusted keys (`warmcli.bundle.remote`).

An earlier warm kept every reader's copy of a URL in one folder, `WARM_HOME/remote/<hash of
the URL>/`; a reader under trusted keys now keeps its own beside it (`<hash>-<keys hash>/`),
so a machine upgraded, or one whose trusted keys a rotation changed, starts with none there:
its first start with the store failing would have no last good copy to serve. `seed` takes
such a folder's copy in (the caller says which, and in what order), under the keyed folder's
lock, only where it is believed as a fetch believes its own (the folder and the file this user's
alone, a regular file opened without waiting (never a FIFO's writer), the one published there:
its size, time and sha256 as remembered beside it, with an ETag, and its size within what a
download may take, `WARM_REMOTE_MAX_SIZE`: a larger one is never read, and the one line that
says so is returned, for a fetch that then fails to say), copied through a temporary
file of the keyed folder that is checked as any download is (a sound bundle, signed by the keys:
`untrusted`) before one atomic rename publishes it; its ETag comes along, so the store is asked
whether it changed rather than downloaded again. Any doubt, or any failure: nothing is taken (a
temporary file left by a killed process is removed by the next fetch). It owns no state and
never prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from warmcli.bundle.received import CHUNK, copy_identity, own_file, read_meta
from warmcli.bundle.soundness import not_a_bundle
from warmcli.errors import SignatureError, WarmError
from warmcli.home import TMP_SUFFIX, private, write_private


def untrusted(path: Path, keys: Sequence[bytes] | None) -> str | None:
    """Why trusted `keys` refuse the bundle at `path` (None where none are named)."""
    from warmcli.bundle.store import Bundle

    try:
        opened = Bundle.open(str(path), trusted_keys=keys) if keys is not None else None
        with opened or contextlib.nullcontext():
            return None
    except SignatureError as exc:
        return str(exc)


def seed(plain: Path, folder: Path, keys: Sequence[bytes], max_bytes: int) -> str | None:
    """Under `folder`'s lock, where it holds no copy: the copy in `plain` taken in where it
    is believed, of at most `max_bytes` (a download's bound) and `keys` trust it (see the
    module doc); else nothing. Returns why a believed copy was not taken for its size (over
    `max_bytes`), else None."""
    try:
        st = os.lstat(plain)
        if not (stat.S_ISDIR(st.st_mode) and private(st)) or not own_file(
            os.lstat(plain / "meta.json")
        ):
            return None
        meta = read_meta(plain / "meta.json")
        # Never blocking: a FIFO there would hold the keyed folder's lock for good.
        source = os.open(plain / "bundle.warm", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    tmp: Path | None = None
    try:
        with os.fdopen(source, "rb") as copy:
            st = os.fstat(copy.fileno())
            published = f"{st.st_size}:{st.st_mtime_ns}" == meta.get("copy")
            if not (own_file(st) and published and meta.get("etag") and meta.get("sha256")):
                return None
            if st.st_size > max_bytes:  # a download this large is refused: never read
                return _too_large(plain, st.st_size, max_bytes)
            made, name = tempfile.mkstemp(dir=folder, prefix="tmp", suffix=TMP_SUFFIX)
            tmp, digest = Path(name), hashlib.sha256()
            with os.fdopen(made, "wb") as out:
                while chunk := copy.read(CHUNK):
                    if out.tell() + len(chunk) > max_bytes:  # grown since: as a download
                        return _too_large(plain, out.tell() + len(chunk), max_bytes)
                    digest.update(chunk)
                    out.write(chunk)
        if digest.hexdigest() != meta["sha256"] or not_a_bundle(tmp) or untrusted(tmp, keys):
            return None
        local = folder / "bundle.warm"
        os.replace(tmp, local)
        tmp = None
        doc = {"etag": meta["etag"], "sha256": meta["sha256"], "copy": copy_identity(local)}
        doc.update((k, meta[k]) for k in ("last_modified", "length") if k in meta)  # no ETag
        write_private(str(folder), str(folder / "meta.json"), json.dumps(doc).encode())
    except (OSError, WarmError):
        return None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return None


def _too_large(plain: Path, size: int, max_bytes: int) -> str:
    return (
        f"the copy kept for readers that check no signature ({plain / 'bundle.warm'}) was not "
        f"taken: {size} bytes, more than the {max_bytes} allowed (WARM_REMOTE_MAX_SIZE)"
    )
