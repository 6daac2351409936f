"""Crash safety: a bundle writer killed with SIGKILL at random points leaves whole batches only.

Each trial starts `tests/crash_writer.py` on a real bundle file and kills it after
a random delay, mostly inside a write transaction (a journal is left behind),
sometimes while it creates the bundle. The bundle is then opened read-only (which
must roll the interrupted write back), every entry is read back, every binary
checked against its sha256, and the batches must be whole and a prefix: the state
before or after each transaction, never a torn one. Trials run in chains on one
file, so each crash is recovered from by the next writer. `make test` runs a few;
`make stress` runs 150. A few trials whose kills all came too early (a slow machine's:
none inside a write, or none after a batch was stored) are followed by more, each killing
a while after the writer said a batch was committed, until one lands inside a write with
batches stored (a bounded number: what is read back is then whole batches, never none).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT
from crash_writer import check

from warmcli.bundle.store import Bundle

WRITER = Path(__file__).with_name("crash_writer.py")
CHAIN = 10  # trials on one file before a fresh one


@dataclass
class Tally:
    trials: int = 0
    mid_write: int = 0  # the kill left a journal: it landed inside a transaction
    no_bundle: int = 0  # the kill landed before the bundle was created
    entries: int = 0  # entries read back and checked, over all trials


def one_trial(
    path: Path, seed: int, rng: random.Random, tally: Tally, after_batch: bool = False
) -> None:
    """A writer on `path` killed after a random delay: from its start where `path` is
    fresh, else from its `ready`; `after_batch`: from its first batch committed."""
    fresh = not path.exists() and not after_batch
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(path), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        if fresh:  # anywhere from the imports to the first batches, creation included
            time.sleep(rng.uniform(0.05, 0.8))
        else:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
            if after_batch:
                stored = proc.stdout.readline()
                assert stored.startswith("stored "), stored + proc.stderr.read()  # type: ignore[union-attr]
            time.sleep(rng.uniform(0.0, 0.4))
        if proc.poll() is not None:
            raise AssertionError(f"the writer stopped by itself: {proc.stderr.read()}")  # type: ignore[union-attr]
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    tally.trials += 1
    if not path.exists():
        tally.no_bundle += 1
        return
    if path.with_name(path.name + "-journal").exists():
        tally.mid_write += 1
    with Bundle.open(path) as bundle:  # read-only: rolls the interrupted write back
        tally.entries += check(bundle).entries


def run_trials(tmp_path: Path, trials: int, seed: int, at_most: int | None = None) -> Tally:
    """`trials` trials, more (up to `at_most`) until one kill has landed inside a write and
    one after a batch was stored: those kill after a batch is committed."""
    rng = random.Random(seed)
    tally = Tally()
    while tally.trials < trials or (
        (tally.mid_write == 0 or tally.entries == 0) and tally.trials < (at_most or trials)
    ):
        path = tmp_path / f"chain{tally.trials // CHAIN}.warm"
        one_trial(path, seed * 10_000 + tally.trials, rng, tally, tally.trials >= trials)
    print(
        f"crash trials: {tally.trials}, killed mid-write: {tally.mid_write}, "
        f"before the bundle existed: {tally.no_bundle}, entries checked: {tally.entries}"
    )
    return tally


def test_sigkill_during_writes_leaves_whole_batches(tmp_path: Path) -> None:
    tally = run_trials(tmp_path, 8, seed=1, at_most=24)
    assert tally.mid_write >= 1, "no kill landed inside a transaction"
    assert tally.entries > 0


@pytest.mark.slow
def test_sigkill_during_writes_leaves_whole_batches_stress(tmp_path: Path) -> None:
    tally = run_trials(tmp_path, 150, seed=2)
    assert tally.mid_write >= 50, tally
