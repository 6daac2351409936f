"""What a served process pays once, at its first launch, that no path skips (run as a module).

`python -m bench.first_use BUNDLE`, in the environment of the served processes
(`bench.start.env_for`: their `WARM_HOME`), imports what `bench.first_result` imports,
opens the bundle as a plain SQLite connection and reads its schema (as warm's opening
does: not timed), then times each first use a served process's first launch makes,
done plainly (no warm code), and the same use once more on other data (what every
later use costs): OpenSSL's first sha256; the host compiler found on PATH (one
`access` per entry, as `shutil.which` does) and its remembered version line read
(`toolchains.json`); the first kernel rows read (a statement prepared, its pages
read: the plain select `bench.serve`'s bound reads) and the first blob read (another
statement); the first library loaded from the host library cache (`dlopen`). It
prints one JSON object of seconds: each step's first use less the same use again (what
is paid once; the compiler's identity, probed once per process, whole). It never
writes anything.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy.random  # noqa: F401  (a served process imports it first, as first_result does)

from warmcli import production  # noqa: F401  (warm's modules loaded, as a served process's are)
from warmcli.backends.host.compiler import host_cc
from warmcli.backends.host.libraries import DIRECTORY
from warmcli.bundle.rows import KERNEL_COLUMNS

ROWS = f"SELECT {KERNEL_COLUMNS}, rowid FROM kernels WHERE backend = ? AND arch = ? AND rowid > ? "
ROWS += "ORDER BY rowid LIMIT 8"
BLOB = "SELECT data FROM blobs WHERE sha256 = ?"
# Another blob, named by a later kernel row (the blobs' pages are not read before the first).
SECOND = "SELECT sha256 FROM kernels WHERE sha256 != ? ORDER BY rowid LIMIT 1"


def _twice(first: Callable[[], Any], again: Callable[[], Any]) -> tuple[Any, float]:
    """`first()`'s result and its time less `again()`'s (the once-only part), in seconds."""
    started = time.perf_counter()
    result = first()
    middle = time.perf_counter()
    again()
    return result, max(0.0, 2 * middle - started - time.perf_counter())


def _compiler(name: str) -> str:
    """The executable `name` on PATH, found as `shutil.which` does, and stat'ed."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        place = os.path.join(folder or os.curdir, name)
        if os.access(place, os.X_OK):
            os.stat(place)
            return place
    return ""


def _versions(home: str) -> dict[str, str]:
    """The remembered version lines (one read of the file)."""
    with open(os.path.join(home, "toolchains.json"), "rb") as fh:
        return json.loads(fh.read())  # type: ignore[no-any-return]


def main(bundle: str) -> dict[str, float]:
    home = os.environ["WARM_HOME"]
    conn = sqlite3.connect(f"file:{bundle}?mode=ro", uri=True, isolation_level=None)
    conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()  # opened
    where = ("host", platform.machine())
    _, sha_s = _twice(lambda: hashlib.sha256(b"a").digest(), lambda: hashlib.sha256(b"b").digest())
    cc = host_cc()
    started = time.perf_counter()  # once per process, whole: the identity is probed once
    _compiler(cc)
    _versions(home)
    tool_s = time.perf_counter() - started
    rows, rows_s = _twice(
        lambda: conn.execute(ROWS, (*where, -1)).fetchall(),
        lambda: conn.execute(ROWS, (*where, 16)).fetchall(),
    )
    other = (conn.execute(SECOND, (rows[0][7],)).fetchone() or (rows[0][7],))[0]  # or itself
    _, blob_s = _twice(
        lambda: conn.execute(BLOB, (rows[0][7],)).fetchone(),
        lambda: conn.execute(BLOB, (other,)).fetchone(),
    )
    libraries = [os.path.join(home, DIRECTORY, f"{s}.so") for s in (rows[0][7], other)]
    _, dlopen_s = _twice(lambda: ctypes.CDLL(libraries[0]), lambda: ctypes.CDLL(libraries[1]))
    conn.close()
    return {
        "sha256": sha_s,
        "toolchain": tool_s,
        "rows": rows_s,
        "blob": blob_s,
        "dlopen": dlopen_s,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
