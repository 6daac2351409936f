"""The victim of the crash trials: writes batches into a bundle, one transaction each, until killed.

`python tests/crash_writer.py BUNDLE SEED` opens (or creates) the bundle, prints
`ready`, and from the first batch the bundle lacks writes batch after batch (printing
`stored N` as batch N is committed, for a killer that waits for one): each
is `PER_BATCH` kernels with their own random binaries, one tune per batch, and a
rewrite of the `latest` tune, whose pick names the batch. A kill at any point
must leave whole batches only, a prefix of them, with `latest` naming the last.
`check` (used by the trials) reads a bundle back and says what it found.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import sys
from dataclasses import dataclass

from warmcli.bundle.store import Bundle
from warmcli.records import CandidateMeasurement, KernelRecord, TuneRecord, tune_key

PER_BATCH = 4
ENTRY = "crash"
DEVICE = "crash|trial|none|none"
CHECKSUM = "0" * 64


def _key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _tune(shape_key: str, pick: str) -> TuneRecord:
    cands = (CandidateMeasurement(pick, _key(pick), "ok", 1e-3, (1e-3,)),)
    key = tune_key(ENTRY, shape_key, DEVICE, CHECKSUM)
    return TuneRecord(key, ENTRY, shape_key, DEVICE, CHECKSUM, "measured", pick, cands, 0.1, 1.0)


def batch(n: int, rng: random.Random) -> tuple[list[tuple[KernelRecord, bytes]], list[TuneRecord]]:
    """Batch `n`: its kernels (binaries of 200 B to 1 MiB) and its two tunes."""
    kernels = []
    for j in range(PER_BATCH):
        size = rng.choice((200, 4000, 60_000, 1 << 20)) + rng.randrange(100)
        binary = rng.randbytes(size)
        key = _key(n, j)
        record = KernelRecord(
            key=key,
            device="crash",
            backend="crash",
            arch="none",
            entry=ENTRY,
            label=f"batch{n}/{j}",
            symbol=f"warm_{key[:16]}_{ENTRY}",
            sha256=hashlib.sha256(binary).hexdigest(),
            toolchain="crash",
            compile_log=f"batch {n}",
            size=size,
        )
        kernels.append((record, binary))
    return kernels, [_tune(f"batch{n}", f"p{n}"), _tune("latest", f"p{n}")]


@dataclass
class Found:
    """What a bundle holds after a crash: whole batches 0..batches-1, and entries checked."""

    batches: int
    entries: int


def check(bundle: Bundle) -> Found:
    """Read every entry back; raise AssertionError on a torn batch or a blob that does not match."""
    kernels = [k for k in bundle.kernels(ENTRY)]
    by_batch: dict[int, int] = {}
    for record in kernels:
        data = bundle.blob(record.sha256)  # checked against its sha256 before it is returned
        assert len(data) == record.size, record.label
        n = int(record.label.removeprefix("batch").split("/")[0])
        by_batch[n] = by_batch.get(n, 0) + 1
    batches = len(by_batch)
    assert sorted(by_batch) == list(range(batches)), f"not a prefix of batches: {sorted(by_batch)}"
    assert all(c == PER_BATCH for c in by_batch.values()), f"a torn batch: {by_batch}"
    tunes = {t.shape_key: t for t in bundle.tunes(ENTRY)}
    assert set(tunes) == {f"batch{n}" for n in range(batches)} | ({"latest"} if batches else set())
    if batches:
        assert tunes["latest"].pick == f"p{batches - 1}", "latest names another batch"
    return Found(batches, len(kernels) + len(tunes))


def main(path: str, seed: int) -> None:
    rng = random.Random(seed)
    with Bundle.open(path, write=True) as bundle:
        start = check(bundle).batches
        print("ready", flush=True)
        for n in itertools.count(start):
            kernels, tunes = batch(n, rng)
            bundle.put(kernels, tunes)
            print(f"stored {n}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
