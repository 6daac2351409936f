"""Evicting what a clean would keep: by age (`--older-than`), then by size (`--max-size`).

An age is a number and a unit (`parse_age`: s, m, h, d or w; `30d`, `1.5h`), at most
`MAX_AGE`. A kernel is *used* when it was written or served to a process that opened the
bundle writable (its `last_used`, as `--max-size` orders kernels); a tune whose pick's
kernel the bundle keeps is used when that kernel is (serving the tune launches it), any
other tune (pending, or its pick's kernel not held) when it was written (its `updated`;
one that is no number, text or NULL, taken as long ago).
A time in the future (a skewed clock, a bundle from elsewhere) is taken as the clean's
own time, and a clean that writes stamps it so (`stamp_future`): it is kept now, and
ages from now on. Neither time is signed, so stamping one leaves every signature valid.
A CUDA PTX build (`compute_XX`) is used when the cubin it was built beside is (`used_with_cubins`):
a GPU loads that cubin, never the PTX kept for newer GPUs, so only the cubin is stamped.
A clean evicting by a clock before `CLOCK_FLOOR` (1970: one not yet set) is refused
(`clock_refused`): it would stamp every entry as used then, for the next clean to remove.
`by_age` and `by_size` add their evictions to a `CleanPlan` (`warmcli.ops.clean_plan`) and
return the keys, `bytes_freed` says what each listed kernel removal frees;
`old_and_future_tunes` and `stamp_future` read and write the bundle.
Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from warmcli.bundle.tune_row import KEY_HEX
from warmcli.ops.clean_plan import CleanPlan, Removal
from warmcli.printable import LISTED
from warmcli.records import KernelRecord, symbol_prefix, where

if TYPE_CHECKING:
    from warmcli.bundle.store import Bundle

AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AGE = 36500 * 86400  # 100 years: a longer age is refused (it would remove nothing)
# 2024-01-01: a clock before it is set wrong (1970: no clock set yet); aging by it, a clean
# would stamp every entry dated after it (all of them) as used then, for the next to remove
CLOCK_FLOOR = 1704067200.0
_SHOWN = 40  # characters of a refused age said
_AGE = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)([smhdwSHDWM])")  # (as sizes: any case)
_NUMERIC = "typeof({0}) IN ('integer', 'real')"
_TUNES = f"SELECT {KEY_HEX} FROM tunes WHERE "
# A tune written before the cutoff, or at no time that is a number (text, a blob, NULL: a
# bundle from elsewhere, its times unsigned): no time of writing read, it is taken as long
# ago, as -inf is (else kept by every age, for ever); and one written after the clean's time.
_OLD_TUNES = f"{_TUNES}NOT {_NUMERIC.format('updated')} OR updated < ?"
_FUTURE_TUNES = f"{_TUNES}{_NUMERIC.format('updated')} AND updated > ?"
Kept = list[tuple[float, str, str]]  # (last used, key, blob) of each kernel kept so far
Labels = Callable[[str], KernelRecord | None]


def clock_refused(older_than: float | None, max_size: int | None, now: float) -> str | None:
    """Why a clean evicting by `older_than` or `max_size` at `now` (this machine's clock) is
    refused: a clock before `CLOCK_FLOOR`; None where it is not."""
    if (older_than is None and max_size is None) or now >= CLOCK_FLOOR:
        return None
    reads = time.strftime("%Y-%m-%d", time.gmtime(now)) if now > -1e10 else repr(now)
    return (
        f"this machine's clock reads {reads} (UTC), before warm was written: --older-than "
        "and --max-size age entries by it (set the clock first); nothing was removed"
    )


def parse_age(text: str) -> float:
    """`text` (`30d`, `12h`, `1.5w`; `30D` too, as sizes take `10m`, but not `M`: minutes
    or months?) in seconds; a `ValueError` saying why not (naming its first `_SHOWN`
    characters)."""
    match = _AGE.fullmatch(text)
    shown = repr(text[:_SHOWN])  # (as `--max-size` cuts its own: an argument may be 100 KB)
    if match is None:
        raise ValueError(
            f"{shown} is not an age: a number and a unit, s, m, h, d or w (30d, 12h, 90m)"
        )
    if match[2] == "M":  # minutes, or months? (`--max-size 10m` is 10 MiB, but an age...)
        raise ValueError(f"{shown}: M is minutes or months? give m for minutes, d for days")
    seconds = float(match[1]) * AGE_UNITS[match[2].lower()]
    if not math.isfinite(seconds) or seconds > MAX_AGE:
        raise ValueError(f"{shown} is over 100 years (36500d): it would remove nothing")
    return seconds


def age_text(seconds: float) -> str:
    """`seconds` as the largest unit it is a whole number of (`2592000.0` is `30d`), else in
    seconds with every digit an age may give (`parse_age`: nine after the point)."""
    for unit, size in sorted(AGE_UNITS.items(), key=lambda u: -u[1]):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return (f"{seconds:.9f}".rstrip("0").rstrip(".") or "0") + "s"


def _evict(
    plan: CleanPlan,
    labels: Labels,
    listed: dict[str, tuple[str, int]],
    entry: tuple[str, str, int],
    reason: str,
) -> None:
    """Add the eviction of the kernel `entry` (key, blob, blob's size) to `plan`."""
    key, sha, size = entry
    shown = len(plan.removals) < LISTED  # named (a lookup), else by its key alone
    k = labels(key) if shown else None
    label, place = (k.label, where(k.device, k.arch)) if k else (key[:16], "")
    if shown:
        listed[key] = (sha, size)
    plan.remove(Removal("kernel", key, label, place, reason, size))


def used_with_cubins(kept: Kept, ptx: Mapping[str, str]) -> None:
    """Take each PTX build of `kept` (`ptx`: its key's symbol, `warm_<key[:16]>_<entry>`,
    that of the cubin it was built beside) as used when that cubin last was, where later."""
    latest: dict[str, float] = {}
    for used, key, _ in kept if ptx else ():
        if key not in ptx:
            prefix = symbol_prefix(key)
            latest[prefix] = max(used, latest.get(prefix, used))
    for i, (used, key, sha) in enumerate(kept if ptx else ()):
        cubin = latest.get(ptx[key][: len(symbol_prefix(key))], used) if key in ptx else used
        kept[i] = (max(used, cubin), key, sha)


def by_age(
    kept: Kept,
    cutoff: float,
    age: float,
    sizes: Mapping[str, int],
    plan: CleanPlan,
    labels: Labels,
    listed: dict[str, tuple[str, int]],
) -> set[str]:
    """Evict each of `kept` last used before `cutoff` (`age` before the clean); the keys
    evicted (`kept` keeps the rest, in its order)."""
    evicted: set[str] = set()
    reason = f"not used in the last {age_text(age)}"
    for _, key, sha in (e for e in kept if e[0] < cutoff):
        evicted.add(key)
        _evict(plan, labels, listed, (key, sha, sizes[sha]), reason)
    kept[:] = [e for e in kept if e[1] not in evicted]
    return evicted


def by_size(
    kept: Kept,
    sizes: Mapping[str, int],
    max_size: int,
    plan: CleanPlan,
    labels: Labels,
    listed: dict[str, tuple[str, int]],
) -> set[str]:
    """Evict the least recently used of `kept` until the blobs the rest use fit in
    `max_size`; the keys evicted. Kernels used at the same time (one run wrote them) go a
    blob at a time: a blob is freed only with its last kernel, and a tie broken by key
    would spread the evictions over every blob, freeing none."""
    users = Counter(sha for _, _, sha in kept)
    size = sum(sizes[sha] for sha in users)
    evicted: set[str] = set()
    reason = f"least recently used (over {max_size:,} bytes)"
    for _, key, sha in sorted(kept, key=lambda e: (e[0], e[2], e[1])):
        if size <= max_size:
            break
        users[sha] -= 1
        if users[sha] == 0:
            size -= sizes[sha]
        evicted.add(key)
        _evict(plan, labels, listed, (key, sha, sizes[sha]), reason)
    return evicted


def bytes_freed(plan: CleanPlan, listed: Mapping[str, tuple[str, int]], staying: set[str]) -> None:
    """Each listed kernel removal's `bytes`: what removing it frees. A binary a batch shares
    is freed by the last of its kernels to go (the others free nothing), never by one that
    stays, so the removals' bytes add up to `binary_bytes_before - binary_bytes_after`
    (when every removal is listed)."""
    freed: set[str] = set()
    for i in reversed(range(len(plan.removals))):
        r = plan.removals[i]
        if r.kind != "kernel" or r.key not in listed:
            continue
        sha, size = listed[r.key]
        gone = sha not in staying and sha not in freed
        freed.add(sha)
        plan.removals[i] = dataclasses.replace(r, bytes=size if gone else 0)


def old_and_future_tunes(
    bundle: Bundle, cutoff: float | None, now: float
) -> tuple[set[str], set[str]]:
    """The keys of the tunes written before `cutoff` (or at a time that is no number; none
    where `cutoff` is None: no age), and of those written after `now`."""
    rows = () if cutoff is None else bundle._iter(_OLD_TUNES, (cutoff,))
    old = {str(r[0]) for r in rows}
    future = {str(r[0]) for r in bundle._iter(_FUTURE_TUNES, (now,))}
    return old, future


def stamp_future(bundle: Bundle, now: float) -> None:
    """Stamp every kernel used, and every tune written, after `now` as used at `now`."""
    with bundle.transaction() as conn:
        _stamp(conn, "kernels", "last_used", now)
        _stamp(conn, "tunes", "updated", now)


def _stamp(conn: sqlite3.Connection, table: str, column: str, now: float) -> None:
    numeric = _NUMERIC.format(column)
    conn.execute(f"UPDATE {table} SET {column} = ? WHERE {numeric} AND {column} > ?", (now, now))
