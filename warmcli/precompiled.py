"""The precompiled headers gcc may read instead of the first header a source includes.

For the first header a translation unit reads (the first `-include name`, else the source's
first `#include name`: gcc takes a precompiled header for no other), gcc looks for
`name.gch`, a precompiled header (a file, or a folder of them), in each folder it searches
before it looks for `name` there, and reads a valid one instead (its macros, not the
header's): `precompiled` names each such file as a line of a headers digest
(`warmcli.headers`), by its folder's place in the search, its name and its content, so a
rebuilt `.gch` is another kernel (a folder of more than `MAX_FILES`: `warmcli.unkeyed`'s
marker). None found: no line, a key as before. A `.gch` is hashed only (`sha256_of`), never
scanned as a header is (a real one is megabytes of binary: scanning it cost a process's first
key ~1.5 s), and only a regular file (a FIFO or `/dev/zero` hung the key). State: one
per-process memo of each file's sha256 by its path and stat stamp, of files unchanged in the
last 2 s (`warmcli.stamped`: else an edit may keep the stamp).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Sequence

from warmcli.stamped import Stamp, opened, settled, stamp
from warmcli.unkeyed import marker

MAX_FILES = 512  # the most files of a `.gch` folder keyed
_MAX_MEMO = 4096
_memo: dict[str, tuple[Stamp, str]] = {}  # path -> its stamp, the sha256 of its bytes


def sha256_of(path: str) -> str | None:
    """The sha256 of the regular file at `path` (memoised by its stat stamp once settled), None
    where there is none to read: a FIFO or a device (`/dev/zero`) is never opened to wait on,
    nor read (gcc in warm's builds reads no `.gch`: warm's header is read first)."""
    try:
        known = _memo.get(path)
        if known is not None and known[0] == stamp(os.stat(path)):
            return known[1]
    except (OSError, ValueError):
        return None
    if (found := opened(path)) is None:  # (what was opened: a regular file only)
        return None
    digest = hashlib.sha256()
    try:
        with found[0] as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    if settled(found[1]):
        if len(_memo) >= _MAX_MEMO:
            _memo.clear()
        _memo[path] = (stamp(found[1]), digest.hexdigest())
    return digest.hexdigest()


def precompiled(
    includes: Sequence[tuple[str, bool, str | None]],
    orders: tuple[Sequence[str], Sequence[str]],
    read: Callable[[str], str | None] = sha256_of,
) -> list[str]:
    """For each of `includes` (its name, whether quoted, the folder searched first for a quoted
    one), searched as `orders` say (quoted, angled: `headers.search_orders`): each `name.gch`
    file in a folder searched up to the one holding `name` (all, where none does), as `\\0pch`,
    the folder's place and the file's name under it, and its sha256 (`read`'s)."""
    found: list[str] = []
    for name, quoted, here in includes:
        if name.startswith("\0"):  # no name (`headers.BY_FOLDER`)
            continue
        searched = ([here] if quoted and here else []) + [*orders[0 if quoted else 1]]
        for at, folder in enumerate([""] if os.path.isabs(name) else searched):
            pch = os.path.join(folder, name + ".gch")
            try:
                is_folder = stat.S_ISDIR(os.stat(pch).st_mode)
            except (OSError, ValueError):  # none (most kernels): one `stat` a folder searched
                is_folder = None
            if is_folder is not None:
                files = sorted(_listed(pch)) if is_folder else [""]
                if len(files) > MAX_FILES:  # the rest not keyed: the kernel never served
                    found, files = [*found, marker(f"more than {MAX_FILES} .gch files")], []
                paths = [os.path.join(pch, f) if f else pch for f in files]
                found += [f"\0pch {at}{p[len(folder) :]}\0{r}" for p in paths if (r := read(p))]
            if os.path.isfile(os.path.join(folder, name)):
                break
    return found


def _listed(folder: str) -> list[str]:
    """The names in `folder`, none where it cannot be listed (gcc, failing to open it, reads
    the header instead): a key never raises for a file it cannot read."""
    try:
        return os.listdir(folder)
    except OSError:
        return []
