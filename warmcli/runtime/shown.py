"""How a miss's explanation shows a key component's value, and which headers differ.

`show` gives one value of a component as a miss line says it: defines and options as their items (a
bundle's text that is not the JSON warm writes, cut), a source's, checksum's or headers' digest as
its first 12 hex digits; `memo_show` shows a held (a bundle's) value so, cut (`held_text`: a
bundle's megabytes of well-formed defines were kept whole in each miss's explanation, megabytes a
miss), each text value's once in a listing's memo. `changed_headers`
names the headers a kernel's build read that differ from those this process reads (`header_files`,
as `warmcli.kernel_parts.header_files` keeps them beside a key): those it reads with other contents
(or a content more times than the build read it under that name: two absolute includes of one file
name, made alike), and those the build did not read at all (one an earlier warm's list names
`<header>`, a header read by its absolute path, is paired with this process's by content, else
named as changed); a bundle's build keyed before warm kept them, or whose list is malformed or
far longer than warm writes, names none (the first few nearest builds are looked at: a miss costs
little whatever the bundle holds). Only this process's own header names are shown (escaped:
`printable`), never a bundle's text; for a kernel unkeyed here (`warmcli.unkeyed`), why.
Pure: it reads its arguments only and never prints.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence

from warmcli.include_options import HEADER_MARK
from warmcli.kernel_parts import MAX_HEADER_FILES, stored
from warmcli.printable import cut, printable
from warmcli.unkeyed import reason_of

SHOWN_CHARS = 200  # of a component's text that is not what warm writes
# Of one held value (a bundle's, however well-formed: megabytes of defines, a toolchain, a
# shape), kept in each miss's explanation: one per miss, all a process's misses kept.
HELD_CHARS = 1_000
_NAMED = 3  # headers named of each kind; the rest counted
# A bundle's list is untrusted text, read at each headers miss: one far longer than warm
# writes (MAX_HEADER_FILES headers, their names as included) is malformed, and the first
# few nearest held builds are looked at for one (a miss costs little whatever the bundle).
_LIST_CHARS = MAX_HEADER_FILES * 256
_LOOKED = 4
_NONE = "-"  # `warmcli.kernel_parts.header_files`' digest of a header found nowhere


def show(component: str, value: str) -> str:
    if component in ("defines", "options"):
        items = stored(value, pairs=component == "defines")
        if items is None:  # not as warm writes it (a bundle's text): shown as it is, cut
            return value if len(value) <= SHOWN_CHARS else f"{value[:SHOWN_CHARS]}..."
        shown = (i if isinstance(i, str) else f"{i[0]}={i[1]}" for i in items)
        return " ".join(shown) or f"no {component}"
    if component == "headers" and not value:
        return "no headers from include folders"
    if component in ("source", "checksum", "headers"):
        return f"sha256 {value[:12]}"
    return value or "none"


def memo_show(component: str, value: str, memo: dict[tuple[str, str], str]) -> str:
    """`show` of a held (a bundle's) value, cut after `HELD_CHARS`, each text value's once in
    `memo` (a listing's: shown again at each miss)."""
    if not isinstance(value, str):
        return held_text(show(component, value))
    text = memo.get((component, value))
    if text is None:
        text = memo[(component, value)] = held_text(show(component, value))
    return text


def held_text(text: object) -> str:
    """A bundle's value as a miss line shows it: cut after `HELD_CHARS` (saying its length)."""
    return cut(text, HELD_CHARS)


def changed_headers(held: Sequence[Mapping[str, str]], wanted: Mapping[str, str]) -> str:
    """` (changed: a.h; new: b.h; not found here: c.h)`: the headers this process reads
    (`wanted`'s) that the nearest of `held` with a list of its own read with other contents, or
    did not read, or read where this process finds none (a relative `-I` from another working
    folder); "" where neither list is known, or none differs by name. The nearest: of the
    first `_LOOKED` held lists, the one naming the fewest such headers (the first of equals),
    so a bundle holding a build of each edit names only what differs from its latest. A held
    `<header>` (stop 41's name for a header read by its absolute path, today's is its file
    name) is one of ours of its contents, else one of ours it did not name, changed. A kernel
    this process keyed unkeyed (`warmcli.unkeyed`): why it is never served instead."""
    if why := reason_of(wanted.get("headers", "")):  # (`warmcli.unkeyed`: built in each process)
        return f" (never served: its key cannot cover what its build reads: {why})"
    ours = _files(wanted.get("header_files", ""))
    if not ours:  # (a bundle's lists are not read then)
        return ""
    lists = [f for f in (_files(h.get("header_files", "")) for h in held[:_LOOKED]) if f]
    if not lists:
        return ""
    kinds = min((_differing(theirs, ours) for theirs in lists), key=_count)
    parts = [f"{kind}: {_names(names)}" for kind, names in kinds if names]
    return f" ({'; '.join(parts)})" if parts else ""


Kinds = tuple[tuple[str, list[str]], ...]


def _count(kinds: Kinds) -> int:
    return sum(len(names) for _, names in kinds)


def _differing(theirs: list[tuple[str, str]], ours: list[tuple[str, str]]) -> Kinds:
    """The headers of `ours` that a build's list, `theirs`, read changed, did not read, or read
    where this process finds none: `changed_headers`' kinds, each with its names."""
    read: dict[str, Counter[str]] = {}  # a name's contents, each as many times as read
    for name, sha in theirs:
        read.setdefault(name, Counter())[sha] += 1
    wants: dict[str, Counter[str]] = {}
    for name, sha in ours:
        wants.setdefault(name, Counter())[sha] += 1
    # An earlier warm's name (stop 41's) for a header read by its absolute path: paired with
    # one this process names by its file name by content, else taken as that one changed.
    marked = read.pop(HEADER_MARK, Counter())
    changed = [n for n, shas in wants.items() if n in read and shas - read[n]]
    unread: list[str] = []  # names the build's list holds not
    for name, sha in ours:
        if name in read:
            continue
        if marked[sha] > 0:
            marked[sha] -= 1
        else:
            unread.append(name)
    spare = sum(marked.values())
    changed += unread[:spare]
    new = [n for n in dict.fromkeys(unread[spare:]) if n not in changed]
    gone = [n for n in changed if set(wants[n]) == {_NONE}]  # read there, found nowhere here
    changed = [n for n in changed if n not in gone]
    return (("changed", changed), ("new", new), ("not found here", gone))


def _names(names: list[str]) -> str:
    more = f" (+{len(names) - _NAMED} more)" if len(names) > _NAMED else ""
    return ", ".join(printable(n) for n in dict.fromkeys(names[:_NAMED])) + more


def _files(text: object) -> list[tuple[str, str]]:
    """A `header_files` list as (name, sha256 start) pairs; [] where it is none or malformed."""
    if not isinstance(text, str) or not text or len(text) > _LIST_CHARS:
        return []
    try:
        files = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(files, list) or len(files) > MAX_HEADER_FILES:
        return []
    pairs = [f for f in files if isinstance(f, list) and len(f) == 2]
    if len(pairs) != len(files) or not all(type(a) is str and type(b) is str for a, b in pairs):
        return []
    return [(a, b) for a, b in pairs]
