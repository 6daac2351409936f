"""The headers a kernel's include folders shadow where a system header includes them.

A header the compiler finds in its own folders (`<stdlib.h>` in `/usr/include`) is the toolchain
identity's, not keyed; but the names that header includes in turn (`<stddef.h>`, `<features.h>`)
are searched in the kernel's folders first (`-iquote` for a quoted one, `-I`, `-isystem`), as any
include is: a `stddef.h` added to a kernel's `-I` folder after a build changes what the next build
reads. `shadowed` follows a system header's includes through the compiler's system folders
(`system`: as the host compiler's `cc -E -v` prints them, `warmcli.backends.host.system_folders`)
and names each of them that a kernel's folders now hold, for `warmcli.headers` to key as the
kernel's own header: where none does, nothing is added, so a kernel's key is as before (and the
same on a machine without a compiler, which names no system folder). The includes a system header
reaches are read once per process per header (`_edges`, bounded by `MAX_SYSTEM` files, past which
the rest is not followed, as past the first `MAX_SCANNED` bytes of one: a kernel with folders of
its own that includes such a header is then unkeyed, `warmcli.unkeyed`, as past the key's other
bounds); the kernel's folders are looked in at each keying. Pure over the files it reads; compiles
and writes nothing, never raises for a missing file.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Sequence

MAX_SCANNED = 4 << 20  # a system header's includes are read in its first 4 MB
MAX_SYSTEM = 2048  # system headers followed from one (glibc's <stdlib.h> reaches about 30)
_MAX_MEMO = 256
Edge = tuple[str, bool, str]  # an include's name, whether quoted, its including header's folder
_Reached = tuple[tuple[Edge, ...], tuple[dict[str, set[str]], dict[str, set[str]]], bool]
_memo: dict[tuple[str, tuple[str, ...]], _Reached] = {}


def _find(name: str, folders: Sequence[str], start: int = 0) -> tuple[str, int] | None:
    """The file `name` names in `folders` from `start` on, and its folder's place; None."""
    for at in range(start, len(folders)):
        path = os.path.join(folders[at], name)
        if os.path.isfile(path):
            return path, at
    return None


# An include a system header makes (`_next` too: it searches the system folders after its own
# header's), and a name its `__has_include` asks for: its headers are well-formed.
_INCLUDE = re.compile(rb'#[ \t]*include(_next)?[ \t]*(["<])([^">\n]+)[">]')  # (`#` anywhere: more)
_HAS_INCLUDE = re.compile(rb'__has_include[ \t]*\([ \t]*(["<])([^">\n]+)')


def _includes(path: str) -> list[tuple[str, bool, bool]] | None:
    """The names the system header `path` includes (or asks for): whether quoted, whether
    `#include_next`; [] unread; None where it is over `MAX_SCANNED` (the rest unread)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SCANNED + 1)
    except OSError:
        return []
    if len(data) > MAX_SCANNED:
        return None
    found = _INCLUDE.findall(data)
    found += [(b"", *m) for m in _HAS_INCLUDE.findall(data)] if b"__has_include" in data else []
    return [(os.fsdecode(name), mark == b'"', bool(nx)) for nx, mark, name in found]


def _edges(root: str, at: int, system: tuple[str, ...]) -> _Reached:
    """Each include the system header `root` (found in `system[at]`) reaches through `system`
    that its including header's own folder does not answer (a quoted one found there is read there),
    once each (name, quoted), with the folder of the first header including it, and those names
    by whether quoted, then by subfolder (`bits/`), and whether `MAX_SYSTEM` cut the walk short
    (or a header over `MAX_SCANNED` was met); memoised per process. An `#include_next` searches
    the folders after its header's only: the kernel's come first."""
    known = _memo.get((root, system))
    if known is not None:
        return known
    seen, pending, edges = {root}, deque([(root, at)]), dict[tuple[str, bool], str]()
    cut = False  # a header over `MAX_SCANNED` met
    while pending and len(seen) < MAX_SYSTEM:
        path, at = pending.popleft()
        here = os.path.dirname(path)
        names = _includes(path)
        cut = cut or names is None
        for name, quoted, after in names or ():
            if os.path.isabs(name):
                continue
            found = (os.path.join(here, name), at) if quoted and not after else None
            if after:
                found = _find(name, system, at + 1)
            elif found is None or not os.path.isfile(found[0]):
                edges.setdefault((name, quoted), here)
                found = _find(name, system)
            if found is not None and found[0] not in seen:
                seen.add(found[0])
                pending.append(found)
    groups: tuple[dict[str, set[str]], dict[str, set[str]]] = ({}, {})
    for name, quoted in edges:
        sub, _, leaf = name.rpartition("/")
        groups[quoted].setdefault(sub, set()).add(leaf)
    result = (tuple((n, q, here) for (n, q), here in edges.items()), groups, cut or bool(pending))
    if len(_memo) >= _MAX_MEMO:
        _memo.clear()
    _memo[(root, system)] = result
    return result


def shadowed(
    name: str, orders: tuple[list[str], list[str]], system: tuple[str, ...]
) -> list[Edge] | None:
    """The includes that the system header `name` (found in none of the kernel's folders,
    `orders` as `headers.search_orders` gives them) reaches and that those folders now hold:
    (name, quoted, the including header's folder), as the compiler would read them; [] where
    `name` is no system header or none is shadowed; None where it reaches more than
    `MAX_SYSTEM` headers (or one over `MAX_SCANNED`) and the kernel has folders: the rest, not
    followed, may be shadowed."""
    root = _find(name, system) if system and not os.path.isabs(name) else None
    if root is None:
        return []
    edges, groups, cut = _edges(*root, system)
    if cut and (orders[0] or orders[1]):
        return None
    held = (_held(orders[1], groups[False]), _held(orders[0], groups[True]))
    return [e for e in edges if e[0] in held[e[1]]] if held[0] or held[1] else []


def _held(folders: list[str], groups: dict[str, set[str]]) -> set[str]:
    """Which of the names `groups` holds (by subfolder) a file of `folders` answers: each
    folder (and subfolder the names go through) listed once, not each name looked for; one
    that cannot be listed but searched (`chmod 111`: cc opens its files) looked in by name."""
    held = set[str]()
    for folder in folders:
        for sub, leaves in groups.items():
            place = os.path.join(folder, sub) if sub else folder
            try:
                present = leaves.intersection(os.listdir(place))
            except PermissionError:  # (each name: a stale hit else)
                present = leaves
            except OSError:
                continue
            for leaf in present:
                if os.path.isfile(os.path.join(place, leaf)):
                    held.add(f"{sub}/{leaf}" if sub else leaf)
    return held
