"""A bundle file's surroundings, checked without opening it as a bundle: is its schema
the one warm creates, and which files beside it did dead writers leave?

`warm_schema` is the `sqlite_master` rows a schema script creates (made once in
memory) and `schema_problems` names every row of a bundle's `sqlite_master` that
differs from them: a trigger, a view, an extra table or index, a generated column,
a missing table. `remove_leftovers` removes, under the bundle's write lock, the
temporary files, journals and locks that a killed or failed create or merge left
beside it, when their process is gone. This module owns no state and never
decides to refuse a bundle (`warmcli.bundle.store` does).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

SCHEMA_SELECT = (  # a hostile schema's text is cut, never read whole
    "SELECT type, name, tbl_name, substr(sql, 1, 4096) FROM sqlite_master"
)
_LEFTOVER = re.compile(r"([0-9]{1,9})\.(?:tmp|merge|merge\.[0-9]{1,9}\.tmp)(?:-journal|\.lock)?")


@functools.cache
def warm_schema(script: str) -> frozenset[tuple[object, ...]]:
    """The `sqlite_master` rows `script` creates: a bundle holds these, no other."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(script)
        return frozenset(conn.execute(SCHEMA_SELECT).fetchall())
    finally:
        conn.close()


def schema_problems(
    rows: Iterable[tuple[object, ...]], expected: frozenset[tuple[object, ...]]
) -> list[str]:
    """What a bundle's `sqlite_master` `rows` hold that `expected` does not, or lack."""
    actual = frozenset(rows)
    names = {(row[0], row[1]) for row in actual}
    ours = {(row[0], row[1]) for row in expected}
    problems = [
        f"{kind} {str(name)[:60]!r} is not as warm creates it"
        if (kind, name) in ours
        else f"{kind} {str(name)[:60]!r} on {str(table)[:60]!r} is not warm's"
        for kind, name, table, _ in sorted(actual - expected, key=repr)
    ]
    problems += [
        f"no {kind} {name!r}"
        for kind, name, _, _ in sorted(expected, key=repr)
        if (kind, name) not in names
    ]
    return problems


def unlink_all(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def remove_leftovers(path: Path) -> None:
    """Under `path`'s write lock: remove what a killed or failed writer of it left beside
    it, when its process is gone: a create's `.NAME.PID.tmp`, a merge's `.NAME.PID.merge`
    with its journal and lock (and that file's own create temporary)."""
    lead = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        stripped = name[1:] if name.startswith("..") else name
        if not stripped.startswith(lead):
            continue
        found = _LEFTOVER.fullmatch(stripped[len(lead) :])
        if found and not _alive(int(found[1])):
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)
