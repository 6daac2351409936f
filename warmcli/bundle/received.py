"""A download of a URL's bundle into a temporary file: bounded, checked, never left behind.

`bounds()` reads how much a download may take: at most `WARM_REMOTE_MAX_SIZE` bytes
(default `MAX_BYTES`, 4 GiB) and `WARM_REMOTE_DEADLINE` seconds in all (default
`DEADLINE`, 300; each read also waits at most the store's own timeout). `receive`
copies a stream into a unique temporary file in the URL's cache folder, stopping with
`RemoteError` at either bound (the stream is read a chunk as it arrives, so a store
that drips stops at the deadline, not once per full chunk); `checked` holds the file to
the size and sha256 the store announced (`size_of` reads a length: one of thousands of
digits is one too long, never a traceback, and is said short, `short`). A write the
local disk refuses is said so (the copy cannot be kept), never taken for the store's
failure. On every failure the
temporary file is removed before the error leaves; a download read in a thread that may be
given up on (an `s3://` one, at the deadline) writes through a `Gate`: once shut, by
whoever gave up, its temporary file is removed and it makes or writes no other.
`remove_temporaries` removes those a killed fetch left (its caller holds the folder's
lock, so none is another fetch's). `believed` (by `own_file`), `copy_identity` and
`read_meta` say what of a published copy, and of what is remembered beside it, a fetch may
believe. It owns no state beyond a `Gate`'s and never prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from warmcli import config
from warmcli.errors import RemoteError
from warmcli.home import TMP_SUFFIX, private
from warmcli.printable import printable

MAX_BYTES = 4 << 30  # the most a download may take, unless WARM_REMOTE_MAX_SIZE says
DEADLINE = 300.0  # seconds a download may take in all, unless WARM_REMOTE_DEADLINE says
CHUNK = 1 << 20
MAX_META_BYTES = 1 << 16  # what is remembered beside a copy: a few short texts
TOO_MANY = 10**30  # bytes: a length announced beyond any file's


@dataclass(frozen=True)
class Bounds:
    """How much one download may take: bytes, and seconds in all."""

    max_bytes: int = MAX_BYTES
    seconds: float = DEADLINE

    def too_long(self, url: str, announced: Any) -> None:
        """`RemoteError` where the store announces more than `max_bytes` (before a byte
        is kept); a length that is no number is `checked`'s to refuse."""
        number = size_of(announced)
        if number is not None and number > self.max_bytes:
            said = short(str(announced))
            raise RemoteError(f"{url}: download refused: {said} bytes announced, {self.over}")

    @property
    def over(self) -> str:
        return f"more than the {self.max_bytes} allowed (WARM_REMOTE_MAX_SIZE)"


def size_of(announced: Any) -> int | None:
    """The length a store announced (a header's text, or S3's number), or None where it is
    none or no number. One longer than any file is `TOO_MANY` (Python makes no int of more
    than 4,300 digits of text: a store's `Content-Length: 999...` was a traceback). The spaces
    and tabs HTTP allows around a field's value are no part of it (`311296 ` is 311296)."""
    text = str(announced).strip(" \t")
    if announced is None or not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 30 else TOO_MANY


def short(text: str) -> str:
    """A store's number as said in one short line: at most 24 characters."""
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def bounds() -> Bounds:
    """The bounds the environment sets; a value that is none is a one-line `RemoteError`."""
    size, seconds = config.remote_max_size(), config.remote_deadline()
    try:
        max_bytes = MAX_BYTES if size is None else config.parse_size(size)
    except ValueError as exc:
        raise RemoteError(f"WARM_REMOTE_MAX_SIZE: {exc}") from None
    try:
        deadline = DEADLINE if seconds is None else config.parse_seconds(seconds)
    except ValueError as exc:
        raise RemoteError(f"WARM_REMOTE_DEADLINE: {exc}") from None
    return Bounds(max_bytes, deadline)


class Gate:
    """What a download read in a thread may still write: `shut` by whoever gave up on it
    (under its lock: the temporary file it made removed, none made or written after)."""

    def __init__(self, url: str) -> None:
        self.url, self._shut, self._made = url, False, ""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        """Held while the file is made or written; `RemoteError` once shut."""
        with self._lock:
            if self._shut:
                raise RemoteError(f"{self.url}: download given up (WARM_REMOTE_DEADLINE)")
            yield

    def made(self, name: str) -> None:  # (within `open`)
        self._made = name

    def shut(self) -> None:
        with self._lock:
            self._shut = True
            if self._made:
                with contextlib.suppress(OSError):
                    os.unlink(self._made)


def receive(
    url: str, stream: BinaryIO | Any, folder: Path, limits: Bounds, gate: Gate | None = None
) -> tuple[Path, str, int]:
    """Copy `stream` into a unique temporary file in `folder`, within `limits` (each write
    through `gate`, if given); its path, sha256 and size."""
    import tempfile  # imported on first use: only a download writes one

    read = getattr(stream, "read1", None) or stream.read  # read1: what has arrived
    stop = time.monotonic() + limits.seconds
    gate = gate or Gate(url)
    with _kept(url, folder), gate.open():
        fd, name = tempfile.mkstemp(dir=folder, suffix=TMP_SUFFIX)
        gate.made(name)
    digest, length = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as fh:
            while chunk := read(CHUNK):
                length += len(chunk)
                if length > limits.max_bytes:
                    raise RemoteError(f"{url}: download stopped: {limits.over}")
                if time.monotonic() > stop:
                    raise RemoteError(
                        f"{url}: download stopped: {length} bytes in {limits.seconds:g} s, "
                        "not done (WARM_REMOTE_DEADLINE)"
                    )
                digest.update(chunk)
                with _kept(url, folder), gate.open():
                    fh.write(chunk)
            with _kept(url, folder), gate.open():
                fh.flush()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name), digest.hexdigest(), length


@contextlib.contextmanager
def _kept(url: str, folder: Path) -> Iterator[None]:
    """A write of the download that the local disk refuses (full, a file size limit, a
    folder not writable): a `RemoteError` that says so, never "store unreachable"."""
    try:
        yield
    except OSError as exc:
        raise RemoteError(f"{url}: its local copy cannot be kept in {folder}: {exc}") from None


def checked(
    url: str, tmp: Path, digest: str, length: int, size: Any, stated: str | None, etag: str
) -> tuple[Path, str, str]:
    """The download, if it is as long and hashes as the store said; else `RemoteError`
    (the temporary file removed)."""
    problem = None
    announced = str(size)  # a header's text (any text), or S3's number
    if size is not None and size_of(size) is None:
        problem = f"{length} bytes received, {announced[:20]!r} announced"
    elif size is not None and size_of(size) != length:
        problem = f"{length} bytes received, {short(announced)} announced"
    elif stated is not None and stated != digest:
        problem = f"sha256 {digest[:16]} differs from the stated {printable(stated[:16])}"
    if problem:
        tmp.unlink(missing_ok=True)
        raise RemoteError(f"{url}: download refused: {problem}")
    return tmp, etag, digest


def remove_temporaries(folder: Path) -> None:
    """Under `folder`'s lock: remove the temporary files a killed fetch left in it."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("tmp") and entry.name.endswith(TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def own_file(st: os.stat_result) -> bool:
    """Whether `st` is of a file this user alone wrote: a regular file, not a link (hard or
    symbolic, where it is `lstat`'s), nor another's."""
    return stat.S_ISREG(st.st_mode) and private(st) and st.st_nlink == 1


def believed(path: Path) -> bool:
    """Whether the file at `path` is a copy this user alone wrote (a regular file, not a
    link, hard or symbolic, nor another's); one that is not is removed."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if own_file(st):
        return True
    with contextlib.suppress(OSError):
        path.unlink()
    return False


def copy_identity(path: Path) -> str:
    """What says the copy at `path` is the file warm published: its size and modification
    time (a copy replaced, cut short or written to since has others; a WARM_HOME copied
    whole with its times, into an image, keeps them); "" when there is none."""
    try:
        st = os.lstat(path)
    except OSError:
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}"


def read_meta(path: Path) -> dict[str, str]:
    """What is remembered beside a copy (its ETag, sha256, identity), text values only;
    nothing from a record that is no JSON object, over `MAX_META_BYTES` or nested too deep
    to parse (never a traceback, memory bounded), nor from one that is no regular file (a
    FIFO is opened without waiting for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return {}
            data = fh.read(MAX_META_BYTES + 1)
        doc = json.loads(data) if len(data) <= MAX_META_BYTES else None
    except (OSError, ValueError, RecursionError):
        return {}
    return {k: v for k, v in doc.items() if isinstance(v, str)} if isinstance(doc, dict) else {}
