"""Which toolchain's build of each kernel a device with no compiler here is served, as
`warm check` judged it, kept on disk for the tunes judged after the kernels.

With no compiler, production runs the build of a kernel that `serving.choose` picks among
its builds, whatever toolchain made it; a tune whose pick was measured on another is
measured again (`warmcli.ops.check._pick_served`). `warm check` judges each kernel's
builds once, in one group (`_check_kernels`), and puts its verdict here, under the sha256
of the kernel's identity (`serving.same_kernel`, with the device's fingerprint); each tune
then reads its pick's in one point query. Kept in memory, it would grow with the
bundle's kernels (README: every command's memory stays flat); read again from the bundle
for each tune, as before, every tune naming a kernel of its own read every row of that
kernel's entry (2,000 tunes over 2,000 kernels of one entry: 55 s). So it is a private
temporary SQLite file (`connect("")`: SQLite removes it as it closes), made on first use.
A kernel whose builds came in two groups (components SQL and Python read apart in a
malformed bundle) is not known here, nor is anything where that file cannot be written:
`get` says `UNKNOWN`, and the caller reads the bundle as before. No other state; never
prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import hashlib

UNKNOWN = "?"  # what `get` says of a kernel not judged here (no toolchain is named so)
_SCHEMA = "CREATE TABLE served (kin BLOB PRIMARY KEY, toolchain TEXT, known INTEGER NOT NULL)"
_PUT = "INSERT INTO served VALUES (?, ?, 1) ON CONFLICT(kin) DO UPDATE SET known = 0"


def _digest(kin: tuple[str, ...]) -> bytes:
    return hashlib.sha256("\0".join(kin).encode("utf-8", "surrogatepass")).digest()


class ServedBuilds:
    """The toolchain whose build of a kernel (None: none runs) a device is served."""

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None
        self._broken = False  # the file could not be made or written: nothing kept

    def put(self, kin: tuple[str, ...], toolchain: str | None) -> None:
        """Keep `toolchain` for `kin` (the device's fingerprint, then `same_kernel`'s);
        a `kin` put twice is forgotten (`UNKNOWN`): its builds came in two groups."""
        if self._broken:
            return
        try:
            if self._conn is None:
                self._conn = sqlite3.connect("")
                self._conn.execute(_SCHEMA)
            self._conn.execute(_PUT, (_digest(kin), toolchain))
        except sqlite3.Error:
            self._broken = True

    def get(self, kin: tuple[str, ...]) -> str | None:
        """The toolchain put for `kin`, None if no build runs, `UNKNOWN` if not known."""
        if self._conn is None or self._broken:
            return UNKNOWN
        try:
            row = self._conn.execute(
                "SELECT toolchain, known FROM served WHERE kin = ?", (_digest(kin),)
            ).fetchone()
        except sqlite3.Error:
            return UNKNOWN
        return row[0] if row is not None and row[1] else UNKNOWN
