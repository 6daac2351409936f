"""What `warm run --dask` sends each shard of the bundle it runs into: its part, a "seed".

A local re-run skips what its bundle already holds (a kernel built, a tune measured). A shard runs
on its worker into a bundle of its own; `shard_seeds` writes, for each of the `count` shards, a new
bundle (in the caller's temporary folder) holding what of the bundle at `path` that shard would
reach, and nothing else: the kernels whose content hash it owns (`warmcli.runtime.shard`:
`components["kernel"]`, every row lacking one too), the tunes it owns, and the kernels those tunes
launch (a measured tune's pick; every candidate of one not measured; every row of its content hash:
its cubin and its PTX), each row as the bundle holds it (a kernel's created and last-used times too;
a tune's `updated` is when the seed was written), with the bundle's fingerprints. A seed is written
for every shard, one that owns nothing too. The shard runs into its seed, so it builds and measures
only what is new, and what it gives back is its part: the merge of the bundle and the shards is what
a local re-run stores. Each seed records the bundle's run as shard I of N
(`warmcli.bundle.run_record`): the part of a run that a shard owns is that shard of it, so a re-run
of the same run is recorded whole after the merge, as a local re-run is, and another run's is
recorded as none, as locally.

A seed is sent as bytes through the scheduler (a worker on another machine has no access
to the caller's bundle) and is written to a file there that the shard's `warm run` opens
as it opens any bundle, untrusted. A seed over `SEED_MAX_BYTES` is not sent (that shard
builds its part again, as before seeds, and `Seeds.notes` says so; no kernel is copied
into one past it, so it is never written whole), nor one past
`SEEDS_MAX_BYTES` of seeds in all (the caller holds every seed sent in memory at once);
nor is any under `trusted` keys that do not cover the whole bundle (a run under them
rebuilds what they did not sign): the judgment and the seeds are one read of the bundle, so
a write-back committed meanwhile waits, never sent unjudged (its shard would serve it, and the
merge sign it as the run's). A row warm cannot read is left out (the shard builds it). This
module owns no state and never prints.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.bundle.blobs import streamed
from warmcli.bundle.kernel_row import write_kernel_row
from warmcli.bundle.manifest import fingerprint_row, put_fingerprint
from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.run_record import KEY, RunRecord, parse, put
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_row import interner, tune_values
from warmcli.errors import BundleError
from warmcli.records import KernelRecord
from warmcli.runtime.shard import Shard, tune_token

SEED_MAX_BYTES = 256 << 20  # a shard's part above this is not sent: the shard rebuilds it
SEEDS_MAX_BYTES = 1 << 30  # the parts sent, all held in memory at once, at most this in all


@dataclass
class Seeds:
    """Each shard's seed file (None: that shard starts from an empty bundle), and why any
    is left out (one line each)."""

    paths: list[Path | None]
    notes: list[str] = field(default_factory=list)


def shard_seeds(
    path: Path,
    count: int,
    folder: Path,
    trusted: Sequence[bytes] | None = None,
    limit: int = SEED_MAX_BYTES,
    total: int = SEEDS_MAX_BYTES,
) -> Seeds:
    """The seeds of `count` shards of a run into the bundle at `path`, written in `folder`
    (see the module doc). A bundle that cannot be read gives no seeds: the run's own
    opening of it says why."""
    shards = [Shard(i, count) for i in range(count)]
    seeds = Seeds([None] * count)
    try:
        source = Bundle.open(path)
    except (BundleError, OSError):
        return seeds
    with source, source.snapshot():  # what is judged is what is sent: one read of the file
        if trusted is not None and signature_report(source, trusted).problems:
            seeds.notes.append(
                f"{path} is not wholly signed by WARM_TRUSTED_KEYS: each shard builds its "
                "part again"
            )
            return seeds
        paths = [folder / f"seed{i}-of-{count}.warm" for i in range(count)]
        try:
            sizes = _write(source, shards, paths, limit)
        except (BundleError, OSError, sqlite3.Error) as exc:
            seeds.notes.append(f"{path}: no part sent to the shards ({exc})")
            return seeds
    sent = 0  # the bytes of the seeds sent, read into memory together (`fanout`)
    for i, (seed, size) in enumerate(zip(paths, sizes, strict=True)):
        real = seed.stat().st_size
        part = max(size, real)
        if part > limit or sent + real > total:
            seed.unlink()
            over = (  # (one over the limit was not written whole: more than said)
                f"{part} bytes or more, over the {limit} sent"
                if part > limit
                else f"{part} bytes, past the {total} sent in all"
            )
            seeds.notes.append(
                f"shard {i}/{count}: its part of {path} is {over}: it builds that part again"
            )
        else:
            seeds.paths[i] = seed
            sent += real
    return seeds


def _owner(shards: Sequence[Shard], token: str) -> int:
    return next(s.index for s in shards if s.owns(token))


def _write(source: Bundle, shards: Sequence[Shard], paths: Sequence[Path], limit: int) -> list[int]:
    """Write each shard's part of `source` into a new bundle at its path; the bytes of
    blobs each holds (each blob once, as it is stored). A part past `limit` is not sent:
    no kernel is copied into it once it is (it grows past by one binary at most)."""
    try:
        held = parse(source.manifest().get(KEY))
    except BundleError:
        held = None
    skip = lambda _key, _problem: None  # noqa: E731 (a row warm cannot read: left out)
    wanted: dict[str, set[int]] = {}  # a candidate's kernel key -> the shards whose tune names it
    for tune in source.each_tune(on_error=skip, order=AS_STORED):
        owner = _owner(shards, tune_token(tune.operation, tune.shape_key, tune.checksum))
        for candidate in tune.candidates:  # a measured pick's alone: no other is built
            if tune.status != "measured" or candidate.name == tune.pick:
                wanted.setdefault(candidate.kernel_key, set()).add(owner)
    sizes = [0] * len(shards)
    now = time.time()
    with contextlib.ExitStack() as stack:
        seeds = [stack.enter_context(Bundle.create(p)) for p in paths]
        conns = [stack.enter_context(seed.transaction()) for seed in seeds]
        for identity, kind, data in map(fingerprint_row, source.fingerprints()):
            for conn in conns:
                put_fingerprint(conn, identity, kind, data)
        contents = {  # a candidate's kernel by its content hash: its cubin and its PTX too
            record.key: record.components.get("kernel")
            for record, _ in source.each_kernel_used(on_error=skip, order=AS_STORED)
        }
        by_content: dict[str, set[int]] = {}
        for key, owners in wanted.items():
            if contents.get(key):
                by_content.setdefault(str(contents[key]), set()).update(owners)
        for record, (created, used) in source.each_kernel_used(on_error=skip, order=AS_STORED):
            content = record.components.get("kernel")
            targets = {_owner(shards, content)} if content else set(range(len(shards)))
            targets |= wanted.get(record.key, set()) | by_content.get(content or "", set())
            for i in sorted(targets):
                if sizes[i] <= limit:  # (one past it is dropped: never written whole)
                    sizes[i] += _copy_kernel(conns[i], source, record, (created, used))
        interns = [interner(conn, seed.path) for conn, seed in zip(conns, seeds, strict=True)]
        for tune in source.each_tune(on_error=skip, order=AS_STORED):
            i = _owner(shards, tune_token(tune.operation, tune.shape_key, tune.checksum))
            conns[i].execute(
                "INSERT OR REPLACE INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                tune_values(tune, interns[i], now),
            )
        if held is not None:  # the part of a run a shard owns is that shard of it
            for shard, conn in zip(shards, conns, strict=True):
                put(conn, RunRecord(held.run, held.workload, shard.count, {shard.index}))
    return sizes


def _copy_kernel(
    conn: sqlite3.Connection, source: Bundle, record: KernelRecord, times: tuple[float, float]
) -> int:
    """Copy one kernel row and its blob into a seed, in a savepoint: a blob that is missing
    or does not match its sha256 leaves the kernel out (the shard builds it). The bytes of
    blob it added: 0 for a blob the seed holds already (one binary of several kernels)."""
    conn.execute("SAVEPOINT seed")
    added = 0
    try:
        have = conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (record.sha256,)).fetchone()
        if have is None:
            blob = streamed(source, record.sha256)
            blob.store(conn)
            added = blob.size
        write_kernel_row(conn, record, times[1])
        conn.execute(
            "UPDATE kernels SET created = ?, last_used = ? WHERE key = ?", (*times, record.key)
        )
    except BundleError:
        conn.execute("ROLLBACK TO seed")
        conn.execute("RELEASE seed")
        return 0
    conn.execute("RELEASE seed")
    return added
