"""The files a host kernel's options give cc or its linker as input, as one digest for its key.

A host C kernel's options may name a file that cc builds into the kernel's binary: an
object or archive to link (`/opt/lib/helper.o`, `-Wl,/opt/lib/helper.o`, `-Xlinker ...`),
another source, a linker script (`-T`, `-Wl,--version-script=...`), a plugin
(`-fplugin=...`). The key's options hold its path only, so an edited file was served the
old build: `linked_digest` covers the content of each file the options name by its absolute
path (a relative one is not found: cc runs in a scratch folder), whole options, each piece
of `-Wl,`/`-Wa,`/`-Wp,` and the value after an option's `=`. Include folders, headers read
first (`warmcli.headers` keys those by content) and defines are not looked at, so the keys
of kernels naming no such file are as before. State: one per-process memo of each file's
digest by its stat stamp (path, size, inode, mtime and ctime), of files unchanged in the
last seconds. It never runs a compiler, never writes and never raises for a missing or
unreadable file.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Sequence

# Options whose value is no linked file: include folders and headers read first (keyed by
# content in `warmcli.headers`), defines. The next option is their value where given alone.
_NOT_FILES = (
    "-I", "--include-path", "--include-directory", "-isystem", "-iquote", "-idirafter",
    "-include", "--pre-include", "--include", "-imacros", "--imacros", "-D", "-U",
)  # fmt: skip
_PIECES = ("-Wl,", "-Wa,", "-Wp,")  # options passed on to the linker, assembler, preprocessor
_MAX_MEMO = 1024
_SETTLED_NS = 2_000_000_000  # a file changed this recently may change again in its second
_memo: dict[tuple[str, int, int, int, int], str] = {}


def _candidates(options: Sequence[str]) -> Iterator[str]:
    """Each text of `options` that may name a file cc or its linker reads."""
    skip_next = False
    for option in options:
        if skip_next:
            skip_next = False
            continue
        if option.startswith(_NOT_FILES):
            skip_next = option in _NOT_FILES
            continue
        pieces = option[4:].split(",") if option.startswith(_PIECES) else [option]
        for piece in pieces:
            yield piece
            if "=" in piece:
                yield piece.split("=", 1)[1]
            if piece.startswith("-T") and len(piece) > 2:
                yield piece[2:]


def _file_digest(path: str) -> str | None:
    """The sha256 of the regular file at `path`, or None where there is none to read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not os.path.isfile(path):
        return None
    stamp = (path, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    if (known := _memo.get(stamp)) is not None:
        return known
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    found = digest.hexdigest()
    if len(_memo) < _MAX_MEMO and time.time_ns() - st.st_mtime_ns > _SETTLED_NS:
        _memo[stamp] = found
    return found


def linked_digest(options: Sequence[str]) -> str:
    """The sha256 over each file `options` name by its absolute path and its content's
    sha256, in the order named; "" where they name none."""
    lines = []
    for text in _candidates(options):
        if os.path.isabs(text) and (found := _file_digest(text)) is not None:
            lines.append(f"{text}\0{found}")
    if not lines:
        return ""
    return hashlib.sha256("\n".join(lines).encode(errors="surrogatepass")).hexdigest()


def with_linked(headers: str, options: Sequence[str]) -> str:
    """A kernel's headers digest (`warmcli.headers`) with the files its `options` link:
    `headers` itself where they name none (its key as before)."""
    linked = linked_digest(options) if any("/" in option for option in options) else ""
    if not linked:
        return headers
    return hashlib.sha256(f"{headers}\0linked\0{linked}".encode()).hexdigest()
