"""Which run a bundle holds, and which of its shards: the manifest's `run` row.

`warm run` records (`note_run`) the run it wrote, named by `run_id` (a digest of the
workload's content, its entry and the devices warmed: shards of one run on identical
machines agree) and its file name: into a new bundle, an unsharded run is shard 0 of 1
(whole), a run with `--shard I/N` shard I of N; into one recording the same run, an
unsharded run (or any into the run held whole) is whole, a shard of the same count adds
I (a shard re-run is the same shard; all N are a whole run). A run into a bundle that
holds anything else (no record, another run's, shards of another count; what another writer
stored or recorded while the run ran: judged in the recording transaction) records no run:
a record says every shard its bundle holds, so a merge never calls a held shard missing.
A manifest warm cannot read is no record. `warm merge` joins its inputs' records (`join`): every run
some input holds whole, or whose shards together are all N, is whole; for each other the
line names the shards missing, or the counts their shards were made with when they
differ. An input with no record (from an older warm, or a merge of several runs) or a
record that is not what warm writes (a bundle is untrusted: `parse` is strict, never
raises) may hold any run: then nothing is told, and the output records none. The output
of inputs holding parts of one run records that run and the shards held; of several
runs, none. This module owns no state, opens no file (it writes one row into a writer's
transaction) and never prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from itertools import islice
from pathlib import Path

from warmcli.bundle.rows import MAX_NAME_CHARS, MAX_VALUE_BYTES
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
from warmcli.printable import LISTED
from warmcli.records import Record

KEY = "run"  # the manifest row
MAX_COUNT = 1 << 20  # far above any shard count
MAX_WORKLOAD_CHARS = 255  # a file name


class RunRecord(Record):
    """Shards `shards` of the `count` a run (`run`, its `workload` file's name) was cut in."""

    run: str
    workload: str
    count: int
    shards: frozenset[int]

    @property
    def whole(self) -> bool:
        return len(self.shards) == self.count

    def __str__(self) -> str:
        held = ", ".join(f"{i}/{self.count}" for i in sorted(self.shards))
        return f"{held} of {self.workload}"

    def text(self) -> str | None:
        """The row's value; None where it would be longer than a manifest value may be."""
        fields = {"run": self.run, "workload": self.workload, "count": self.count}
        value = json.dumps({**fields, "shards": sorted(self.shards)})
        return value if len(value) <= MAX_NAME_CHARS else None


def run_id(workload: Path, entry: str, devices: Sequence[str]) -> str:
    """What names one run: the workload file's content, its entry and the devices warmed."""
    digest = hashlib.sha256()
    try:
        with open(workload, "rb") as file:  # (the workload was just loaded from it)
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:  # a module loaded from elsewhere (an archive): named by its path
        digest.update(os.fsencode(workload))
    digest.update(json.dumps([entry, sorted(devices)]).encode())
    return digest.hexdigest()[:16]


def parse(text: object) -> RunRecord | None:
    """A manifest `run` value as a record; None where it is none warm writes."""
    if not isinstance(text, str) or len(text) > MAX_NAME_CHARS:
        return None
    try:
        doc = json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or set(doc) != {"run", "workload", "count", "shards"}:
        return None
    run, workload, count, shards = doc["run"], doc["workload"], doc["count"], doc["shards"]
    if not (isinstance(run, str) and len(run) == 16 and all(c in "0123456789abcdef" for c in run)):
        return None
    if not isinstance(workload, str) or not 0 < len(workload) <= MAX_WORKLOAD_CHARS:
        return None
    if type(count) is not int or not 1 <= count <= MAX_COUNT or not isinstance(shards, list):
        return None
    if not shards or any(type(i) is not int or not 0 <= i < count for i in shards):
        return None
    return RunRecord(run, workload, count, frozenset(shards))


def _refuse(name: str) -> None:
    raise ValueError(name)  # NaN, Infinity: no JSON warm writes


def recorded(
    held: RunRecord | None, run: str, workload: str, shard: tuple[int, int] | None, new: bool
) -> RunRecord | None:
    """The record of the run just written (see the module doc): `held`, the bundle's before;
    `shard`, (I, N) or None for a whole run; `new`, whether the bundle held nothing before
    the run. None where the bundle holds more than one record can say."""
    index, count = shard or (0, 1)
    name = workload[:MAX_WORKLOAD_CHARS] or "?"
    if new:
        return RunRecord(run, name, count, frozenset({index}))
    if held is None or held.run != run:  # the bundle holds another run's entries too
        return None
    if count == 1 or held.whole:
        return RunRecord(run, name, 1, frozenset({0}))
    if held.count == count:
        shards = held.shards | {index}
        return RunRecord(run, name, *((count, shards) if len(shards) < count else (1, {0})))
    return None  # shards of one run cut in two counts: no record says both


def put(conn: sqlite3.Connection, record: RunRecord | None) -> None:
    """Store `record` (None, or one too long for a manifest value: no record)."""
    text = None if record is None else record.text()
    if text is None:
        conn.execute("DELETE FROM manifest WHERE key = ?", (KEY,))
    else:
        conn.execute("INSERT OR REPLACE INTO manifest VALUES (?, ?)", (KEY, text))


class Joined(Record):
    """What a merge's inputs' records say: the output's record, and what is not whole."""

    record: RunRecord | None
    problem: str  # one line, "" when every run some input holds part of is whole
    missing: list[str]  # each shard missing, I/N (of each run, the first `LISTED`)


def join(records: Sequence[RunRecord | None]) -> Joined:
    """The records of a merge's inputs joined (see the module doc)."""
    if not all(records):  # an input holding runs no record names: nothing can be told
        return Joined(None, "", [])
    runs: dict[str, dict[int, set[int]]] = {}  # run -> count -> shards held
    names: dict[str, str] = {}
    for r in filter(None, records):
        runs.setdefault(r.run, {}).setdefault(r.count, set()).update(r.shards)
        names.setdefault(r.run, r.workload)
    said: list[str] = []
    missing: list[str] = []
    for run, counts in runs.items():
        if any(len(held) == count for count, held in counts.items()):
            continue  # held whole by some input, or by its shards together
        if len(counts) > 1:
            given = [f"{i}/{n}" for n in sorted(counts) for i in sorted(counts[n])]
            said.append(f"{names[run]}'s shards were cut in different counts ({_few(given)})")
            continue
        (count, held), = counts.items()  # fmt: skip
        # the first `LISTED` named (a bundle's count, up to `MAX_COUNT`, sets no list's size)
        gone = list(islice((f"{i}/{count}" for i in range(count) if i not in held), LISTED))
        missing += gone
        total = count - len(held)
        said.append(f"{names[run]}: shard {_few(gone, total)} missing ({total} of {count})")
    record = None
    if len(runs) == 1:
        (run, counts), = runs.items()  # fmt: skip
        whole = [n for n, held in counts.items() if len(held) == n]
        count = 1 if whole else next(iter(counts)) if len(counts) == 1 else 0
        if count:
            held = frozenset({0}) if whole else frozenset(counts[count])
            record = RunRecord(run, names[run], count, held)
    problem = f"not one whole run: {'; '.join(said)}" if said else ""
    return Joined(record, problem, missing)


def note_run(bundle: Bundle, write: Callable[[sqlite3.Connection], None] | None) -> None:
    """Record in `bundle` (open to write) the run just written into it, as `run_write`
    gave it (`write`; None: the row is as it would be), in a transaction of its own."""
    if write is not None:
        with bundle.transaction() as conn:
            write(conn)


def run_write(
    bundle: Bundle,
    workload: Path,
    entry: str,
    devices: Sequence[str],
    shard: tuple[int, int] | None,
    new: bool,
) -> Callable[[sqlite3.Connection], None] | None:
    """What records the run (`note_run`) in a transaction of `bundle`'s (`warm run`'s last
    store: `Bundle.joining`); None where the row is as it would be (nor rewritten, nor left
    unsigned). The record is made again from the row the transaction reads, under the write
    lock: another run may have stored or recorded itself since the bundle was opened (then
    the bundle is new to neither: `_only_written`); a value longer than any record is not
    read (no record).
    The row is the run's to sign (`Bundle.written`)."""
    try:
        before, readable = bundle.manifest().get(KEY), True
    except BundleError:  # a row warm cannot read (its own `run` too): no record held
        before, readable = None, False
    run, name = run_id(workload, entry, devices), workload.name
    record = recorded(parse(before), run, name, shard, new)
    text = None if record is None else record.text()
    if text == before and (text is not None or readable):  # as it was: no row rewritten
        return None

    def write(conn: sqlite3.Connection) -> None:
        try:
            row = _run_row(conn)
            fresh = new and row is None and _only_written(conn, bundle)
        except sqlite3.DatabaseError:  # (the store stays: `seal` reads no more of it)
            row, fresh = (None,), False
        held = None if row is None else row[0]
        now = recorded(parse(held), run, name, shard, fresh)
        if held is not None or now is not None:
            put(conn, now)
            if now is not None and now.text() is not None:
                bundle.written.add(("manifest", KEY))

    return write


def _run_row(conn: sqlite3.Connection) -> tuple[object] | None:
    """The manifest's `run` row, its value "" (no record) where longer than any record: one
    over `MAX_VALUE_BYTES` is never loaded (SQLite refuses it, as every reader's does)."""
    before = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    try:
        sql = "SELECT CASE WHEN length(value) <= ? THEN value ELSE '' END FROM manifest WHERE key=?"
        return conn.execute(sql, (MAX_NAME_CHARS, KEY)).fetchone()  # type: ignore[no-any-return]
    except sqlite3.DataError:  # too long to load: no record
        return ("",)
    finally:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, before)


def _only_written(conn: sqlite3.Connection, bundle: Bundle) -> bool:
    """Whether every kernel and tune `conn`'s bundle holds is one `bundle` wrote (a bundle
    new to the run: what another writer stored since it was opened is another run's). A tune's
    key, stored as its 32 bytes, is written down in hex."""
    for table in ("kernels", "tunes"):
        for (key,) in conn.execute(f"SELECT key FROM {table}"):  # (new: this run's rows)
            if (table, key.hex() if isinstance(key, bytes) else key) not in bundle.written:
                return False
    return True


SHOWN = 8  # shards a line names


def _few(shards: list[str], total: int | None = None) -> str:
    """The first `SHOWN` of `shards` (of `total`, when more), then how many more."""
    total = len(shards) if total is None else total
    more = f", and {total - SHOWN} more" if total > SHOWN else ""
    return ", ".join(shards[:SHOWN]) + more
