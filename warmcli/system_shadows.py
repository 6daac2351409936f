"""The headers a kernel's include folders shadow where a system header includes them.

A header the compiler finds in its own folders (`<stdlib.h>` in `/usr/include`) is the toolchain
identity's, not keyed; but the names that header includes in turn (`<stddef.h>`, `<features.h>`)
are searched in the kernel's folders first (`-iquote` for a quoted one, `-I`, `-isystem`), as
any include is: a `stddef.h` added to a kernel's `-I` folder after a build changes what the next
build reads. `shadowed` follows a system header's includes through the compiler's system folders
(`system`: as the host compiler's `cc -E -v` prints them, `warmcli.backends.system_folders`;
nvcc's toolkit's and its `gcc`'s, NVRTC's own: `warmcli.backends.cuda.own_folders`) and names
each of them that a kernel's folders now hold, for `warmcli.headers` to key as the kernel's own
header: where none does, nothing is added, so a kernel's key is as before (and the same on a
machine without a compiler, which names no system folder). Where the compiler's own folders
are searched among the kernel's (NVRTC's before them; nvcc's toolkit before `CPATH`), `placed`
keeps those a kernel's folder answers first. The includes a system header
reaches (`_edges`, bounded by `MAX_SYSTEM` files, past which the rest is not followed, as past
the first `MAX_SCANNED` bytes of one: a kernel with folders of its own that includes such a header
is then unkeyed, `warmcli.unkeyed`, as past the key's other bounds) are found once per process per
header, and remembered across processes (that cut too) where the host backend lends a `store`
(warm's home): with the stamp of each file read and each folder looked in (mode, device, inode,
size, mtime, ctime; a folder's changes where a name in it is added, removed or renamed: so it
vouches for a subfolder missing there, not kept), taken before it was read, believed only while
each is the same (one `stat` each instead of a read), and
never kept where one changed in the last `RACY_NS`, a header could not be read, or a name looked
for is there but no file (a link that may come to point at one). A system header's place is found
once per process, as its edges. The kernel's folders are looked in at each keying (each listed
once per keying, `listed`; one that can be searched but not listed, by name), a FIFO or a
device there too (`stamped.compiler_opens`: cc opens it, `warmcli.headers` refuses it). Compiles
nothing and never raises for a missing file; writes only through `store`. State: the per-process
memos of each system header's place, its edges and each remembered path's stamp.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections import deque
from collections.abc import Callable, Sequence

from warmcli.stamped import compiler_opens, last_change, opened

MAX_SCANNED = 4 << 20  # a system header's includes are read in its first 4 MB
MAX_SYSTEM = 2048  # system headers followed from one (glibc's <stdlib.h> reaches about 30)
FORM = "2"  # how `_walk` reads and follows includes: raised where that changes (none believed)
RACY_NS = 2_000_000_000  # a file changed this lately may change again unseen by its stamp
_MAX_MEMO = 256
Edge = tuple[str, bool, str]  # an include's name, whether quoted, its including header's folder
_Groups = tuple[dict[str, set[str]], dict[str, set[str]]]
_Reached = tuple[tuple[Edge, ...], _Groups, bool]  # (whether the walk was cut)
_memo: dict[tuple[str, tuple[str, ...]], _Reached] = {}
_roots: dict[tuple[str, tuple[str, ...]], tuple[str, int] | None] = {}
_stamps: dict[str, str] = {}  # a remembered path's stamp, as first asked in this process (the
# headers its system headers share: read once per process, as before, not once per header)
Entry = dict[str, object]  # what `store` keeps for a key: `_entry`
# Where edges are remembered across processes: (read a key's entry, None where none; keep one),
# lent by the backends (`warmcli.backends.system_folders`: in warm's home).
store: list[tuple[Callable[[str], object], Callable[[str, Entry], None]]] = []
# A folder's names and casefolded; None: not listed; True: searched but not listed (`chmod 111`)
Listed = dict[str, tuple[frozenset[str], frozenset[str]] | bool | None]


def _first(name: str, folders: Sequence[str]) -> tuple[str, int] | None:
    """The file `name` names in `folders` (a FIFO or a device too: the compiler opens it), and
    its folder's place; None."""
    for at, folder in enumerate(folders):
        if compiler_opens(os.path.join(folder, name)):
            return os.path.join(folder, name), at
    return None


def _stamp(path: str) -> str:
    """What is at `path` now, links followed: mode, device, inode, size, mtime and ctime; "-"
    where nothing is."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return "-"
    return f"{st.st_mode}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


class _Walk:
    """What one walk met: each path's stamp, taken before it was read or looked in (a change
    after it changes the stamp the next process reads), and whether it may not be kept."""

    def __init__(self) -> None:
        self.met: dict[str, str] = {}
        self.odd = False  # a name looked for there and no file, a header unread

    def there(self, path: str) -> bool:
        """Whether something is at `path` (its stamp as first met)."""
        stamp = self.met.get(path)
        if stamp is None:
            stamp = self.met[path] = _stamp(path)
        return stamp != "-"

    def look(self, folder: str, name: str) -> str | None:
        """The file `name` names in `folder` (`os.path.isfile`), each folder on its way met
        first; None."""
        place = folder
        for part in name.split("/")[:-1]:
            if not self.there(place):
                return None
            place = os.path.join(place, part)
        if not self.there(place):
            return None
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            self.there(path)
            return path
        self.odd = self.odd or os.path.lexists(path)
        return None

    def find(self, name: str, folders: Sequence[str], start: int) -> tuple[str, int] | None:
        """The file `name` names in `folders` from `start` on, and its folder's place; None."""
        for at in range(start, len(folders)):
            path = self.look(folders[at], name)
            if path is not None:
                return path, at
        return None

    def vouched(self) -> dict[str, str]:
        """What it met, less each path missing in a folder met there: that folder's stamp
        (its mtime and ctime change where a name in it is added) vouches for it, as for each
        name looked for there (a missing path's `stat` raising costs ~10 us); not a link
        that points nowhere (what it points at may come while its folder stays)."""
        met = self.met
        return {
            p: s
            for p, s in met.items()
            if s != "-" or met.get(os.path.dirname(p), "-") == "-" or os.path.lexists(p)
        }

    def settled(self) -> bool:
        """Whether what it met may be remembered: nothing odd, nothing changed lately."""
        now = time.time_ns()
        for stamp in self.met.values():
            if stamp != "-" and now - last_change(*map(int, stamp.split("|")[4:]), now) < RACY_NS:
                return False
        return not self.odd


# An include a system header makes (`_next` too: it searches the system folders after its own
# header's), and a name its `__has_include` asks for: its headers are well-formed.
_INCLUDE = re.compile(rb'#[ \t]*include(_next)?[ \t]*(["<])([^">\n]+)[">]')  # (`#` anywhere: more)
_HAS_INCLUDE = re.compile(rb'__has_include[ \t]*\([ \t]*(["<])([^">\n]+)')


def _includes(path: str) -> list[tuple[str, bool, bool]] | None:
    """The names the system header `path` includes (or asks for): whether quoted, whether
    `#include_next`; None where it is over `MAX_SCANNED` (the rest unread); OSError unread (a
    FIFO come in its place too: never waited on, `warmcli.stamped.opened`)."""
    if (found := opened(path)) is None:
        raise OSError(f"{path}: no regular file to read")
    with found[0] as f:
        data = f.read(MAX_SCANNED + 1)
    if len(data) > MAX_SCANNED:
        return None
    found = _INCLUDE.findall(data)
    found += [(b"", *m) for m in _HAS_INCLUDE.findall(data)] if b"__has_include" in data else []
    return [(os.fsdecode(name), mark == b'"', bool(nx)) for nx, mark, name in found]


def _edges(root: str, at: int, system: tuple[str, ...]) -> _Reached:
    """Each include the system header `root` (found in `system[at]`) reaches through `system`
    that its including header's own folder does not answer, with the folder of the first header
    including it, and those names by whether quoted, then by subfolder (`bits/`), and whether
    `MAX_SYSTEM` cut the walk short (or a header over `MAX_SCANNED` was met); memoised per
    process, remembered in `store` (the module doc)."""
    known = _memo.get((root, system))
    if known is not None:
        return known
    key = "\0".join((FORM, root, str(at), *system))  # (no path holds a NUL)
    recalled = _recalled(key)
    if recalled is None:
        walk = _Walk()
        edges, cut = _walk(root, at, system, walk)
        if store and _keepable(walk, edges):
            met = walk.vouched()
            entry = _entry(key, list(met), list(met.values()), edges, cut=cut)
            for _, keep in store:
                keep(key, entry)
    else:
        edges, cut = recalled
    groups: _Groups = ({}, {})
    for name, quoted, _ in edges:
        sub, _, leaf = name.rpartition("/")
        groups[quoted].setdefault(sub, set()).add(leaf)
    if len(_memo) >= _MAX_MEMO:
        _memo.clear()
    _memo[(root, system)] = result = (edges, groups, cut)
    return result


def _walk(
    root: str, at: int, system: tuple[str, ...], walk: _Walk
) -> tuple[tuple[Edge, ...], bool]:
    """`_edges`' includes, found by reading: each (name, quoted) once, a quoted one found in
    its header's folder read there, and whether the walk was cut. An `#include_next` searches
    the folders after its header's only: the kernel's come first."""
    walk.there(root)
    seen, pending, edges = {root}, deque([(root, at)]), dict[tuple[str, bool], str]()
    cut = False  # a header over `MAX_SCANNED` met
    while pending and len(seen) < MAX_SYSTEM:
        path, at = pending.popleft()
        here = os.path.dirname(path)
        try:
            names = _includes(path)
        except OSError:  # (out of descriptors, say: read as none, and not kept so)
            names, walk.odd = [], True
        cut = cut or names is None
        for name, quoted, after in names or ():
            if os.path.isabs(name):
                continue
            near = walk.look(here, name) if quoted and not after else None
            if after:
                found = walk.find(name, system, at + 1)
            elif near is None:
                edges.setdefault((name, quoted), here)
                found = walk.find(name, system, 0)
            else:
                found = near, at
            if found is not None and found[0] not in seen:
                seen.add(found[0])
                pending.append(found)
    return tuple((n, q, here) for (n, q), here in edges.items()), cut or bool(pending)


def _digest(key: str, paths: str, stamps: list[str], edges: str, cut: bool) -> str:
    """What seals an entry: its key, its paths, their stamps, its edges, whether the walk was
    cut (no part holds a NUL but as `_entry` joins it)."""
    text = "\0\0".join((key, paths, "\0".join(stamps), edges, "cut" if cut else ""))
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()


def _entry(
    key: str, paths: list[str], stamps: list[str], edges: Sequence[Edge], *, cut: bool = False
) -> Entry:
    """What `store` keeps for `key`: its edges (name, 1 or 0 for quoted, folder) and the paths
    met, each joined by NULs (a string JSON reads at once), whether the walk was cut (past its
    bound: a kernel with folders stays unkeyed), and the digest of them all."""
    flat = "\0".join(f"{n}\0{int(q)}\0{h}" for n, q, h in edges)
    joined = "\0".join(paths)
    return {
        "key": key,
        "edges": flat,
        "paths": joined,
        "cut": cut,
        "digest": _digest(key, joined, stamps, flat, cut),
    }


def _recalled(key: str) -> tuple[tuple[Edge, ...], bool] | None:
    """The edges `store` keeps for `key` and whether that walk was cut, where each path it met
    is as it was then; None where there are none, or any doubt (another shape, another stamp,
    another digest)."""
    for recall, _ in store:
        entry = recall(key)
        if type(entry) is not dict or entry.get("key") != key:
            return None
        edges, paths = entry.get("edges"), entry.get("paths")
        cut = entry.get("cut")
        if type(edges) is not str or type(paths) is not str or not paths or type(cut) is not bool:
            return None
        parts = edges.split("\0") if edges else []
        if len(parts) % 3 or not {*parts[1::3]} <= {"0", "1"}:
            return None
        stamps = [_stamps.get(p) or _stamps.setdefault(p, _stamp(p)) for p in paths.split("\0")]
        if len(_stamps) > 64 * _MAX_MEMO:
            _stamps.clear()
        if entry.get("digest") != _digest(key, paths, stamps, edges, cut):
            return None
        quoted = [q == "1" for q in parts[1::3]]
        return tuple(zip(parts[0::3], quoted, parts[2::3], strict=True)), cut
    return None


def _keepable(walk: _Walk, edges: Sequence[Edge]) -> bool:
    """Whether a walk's edges may be remembered: settled, each path and edge as `_entry`
    joins them (no NUL), each edge's name relative and its folder absolute."""
    if not walk.settled() or any("\0" in p for p in walk.met):
        return False
    for name, _, here in edges:
        if "\0" in name or "\0" in here or name[:1] in ("", os.sep) or here[:1] != os.sep:
            return False
    return True


def shadowed(
    name: str,
    orders: tuple[list[str], list[str]],
    system: tuple[str, ...],
    listed: Listed | None = None,
) -> list[Edge] | None:
    """The includes that the system header `name` (found in none of the kernel's folders,
    `orders` as `headers.search_orders` gives them) reaches and that those folders now hold:
    (name, quoted, the including header's folder), as the compiler would read them; [] where
    `name` is no system header or none is shadowed; None where it reaches more than
    `MAX_SYSTEM` headers (or one over `MAX_SCANNED`) and the kernel has folders: the rest, not
    followed, may be shadowed. `listed`: the folders listed in this keying (each once)."""
    if not system or os.path.isabs(name):
        return []
    root = _roots.get((name, system), False)
    if root is False:  # (once per process, as its edges)
        if len(_roots) >= _MAX_MEMO:
            _roots.clear()
        root = _roots[(name, system)] = _first(name, system)
    if root is None:
        return []
    edges, groups, cut = _edges(*root, system)
    if cut and (orders[0] or orders[1]):
        return None
    listed = {} if listed is None else listed
    held = (_held(orders[1], groups[False], listed), _held(orders[0], groups[True], listed))
    return [e for e in edges if e[0] in held[e[1]]] if held[0] or held[1] else []


def placed(
    edges: Sequence[Edge],
    orders: tuple[list[str], list[str]],
    system: Sequence[str],
    theirs: frozenset[str],
    dropped: Sequence[str] = (),
) -> list[Edge]:
    """Those of `edges` (`shadowed`'s) the compiler reads from a kernel's folder where its own
    are searched among them (NVRTC's before them, nvcc's toolkit before `CPATH`): the first
    folder holding the name along `orders` (quoted or angled), then `system`, is none of
    `theirs` (the compiler's own). A folder of `orders` that is one of `dropped` (gcc's system
    folders: it drops a `-I` naming one, "ignoring duplicate directory") is searched there."""
    ids = {_identity(f) for f in dropped}
    kept = []
    for edge in edges:
        chain = [*(f for f in orders[not edge[1]] if _identity(f) not in ids), *system]
        found = _first(edge[0], chain)
        if found is not None and chain[found[1]] not in theirs:
            kept.append(edge)
    return kept


def _identity(folder: str) -> object:
    """A folder's device and inode, else its path (as gcc tells a folder named twice)."""
    try:
        return (found := os.stat(folder)).st_dev, found.st_ino
    except (OSError, ValueError):
        return folder


def _names(folder: str, listed: Listed) -> tuple[frozenset[str], frozenset[str]] | bool | None:
    """The names in `folder` and casefolded, listed once; True where it can be searched but
    not listed (`PermissionError`), None where it cannot be listed else."""
    if folder not in listed:
        try:
            found = frozenset(os.listdir(folder))
            listed[folder] = found, frozenset(n.casefold() for n in found)
        except PermissionError:  # (cc may still open its files: each name looked for)
            listed[folder] = True
        except (OSError, ValueError):
            listed[folder] = None
    return listed[folder]


def _held(folders: list[str], groups: dict[str, set[str]], listed: Listed) -> set[str]:
    """Which of the names `groups` holds (by subfolder) a file of `folders` answers: each
    folder (and subfolder the names go through) listed once, not each name looked for; a
    subfolder not listed where its folder holds no name like its first (in any case); one that
    cannot be listed but searched (`chmod 111`: cc opens its files) looked in by name."""
    held = set[str]()
    for folder in folders:
        top = _names(folder, listed)
        for sub, leaves in groups.items():
            first = sub.partition("/")[0]
            plain = sub and first.isascii() and first not in {".", ".."}
            if plain and type(top) is tuple and first.casefold() not in top[1]:
                continue  # (no such subfolder: listing it would fail)
            place = os.path.join(folder, sub) if sub else folder
            names = _names(place, listed)
            present = leaves.intersection(names[0]) if isinstance(names, tuple) else leaves
            present = present if names is not None else set()
            for leaf in present:  # (each name where not listed: a stale hit else; a FIFO
                if compiler_opens(os.path.join(place, leaf)):  # too: `headers` refuses it)
                    held.add(f"{sub}/{leaf}" if sub else leaf)
    return held
