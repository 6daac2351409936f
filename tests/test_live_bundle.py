"""A bundle in use: `warm merge ... -o OUT` loses no concurrent write, and `warm verify`
never calls a sound bundle corrupt while writers commit.

The merge (or verify) is the real CLI in a subprocess, stopped at a point (a function
of warm's waits for a gate file before it runs, as the reproduction did) while a real
production write-back, a second real merge or a writer commits to the same bundle;
then it is let go, and every entry of every writer must be in the result. `make
stress` runs the merge race unpaused, 20 trials.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_concurrency import WORKLOAD, expected
from test_crash import WRITER as CRASH_WRITER
from test_production import MATMUL, partial_bundle, serve

PAUSED = """\
import importlib, sys, time
from pathlib import Path
from warmcli.cli import main

gate = Path(sys.argv.pop(1))
module, _, name = sys.argv.pop(1).partition(":")
owner = importlib.import_module(module)
*path, attr = name.split(".")
for part in path:
    owner = getattr(owner, part)
real = getattr(owner, attr)

def paused(*args, **kwargs):
    Path(f"{gate}.reached").touch()
    while not gate.exists():
        time.sleep(0.01)
    return real(*args, **kwargs)

setattr(owner, attr, paused)
sys.argv[0] = "warm"
main()
"""
MERGE_PUBLISH = "warmcli.ops.merge:_publish"  # a merge, after its reads
VERIFY_KERNELS = (  # verify, after the blobs, before the kernels (with their times)
    "warmcli.bundle.admin:BundleAdmin.each_kernel_used"
)


class Paused:
    """`warm ARGS` in a subprocess, stopped when it calls `target` until `go()`."""

    def __init__(self, warm: Warm, gate: Path, target: str, *args: str | Path) -> None:
        self.gate = gate
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PAUSED, str(gate), target, *map(str, args)],
            env=warm.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        reached = Path(f"{gate}.reached")
        deadline = time.monotonic() + 60
        while not reached.exists():
            assert self.proc.poll() is None, self.proc.communicate()
            assert time.monotonic() < deadline, f"{target} was never reached"
            time.sleep(0.01)

    def go(self) -> subprocess.CompletedProcess[str]:
        self.gate.touch()
        out, err = self.proc.communicate(timeout=120)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)


def labels(bundle: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{bundle}?mode=ro", uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT label FROM kernels")}
    finally:
        conn.close()


_MADE: dict[int, bytes] = {}  # workload -> its bundle, made once per session


def bundle_of(warm: Warm, tmp_path: Path, w: int) -> Path:
    """A bundle of workload `w` (test_concurrency's: kernels of its own), made by the
    real CLI once per session and copied."""
    path = tmp_path / f"w{w}.warm"
    if w not in _MADE:
        workload = tmp_path / f"w{w}.py"
        workload.write_text(WORKLOAD.format(w=w))
        proc = warm("run", workload, "--bundle", path, "-q")
        assert proc.returncode == 0, proc.stderr
        _MADE[w] = path.read_bytes()
    else:
        path.write_bytes(_MADE[w])
    return path


def settle(proc: subprocess.Popen[str], seconds: float) -> None:
    """Give a writer time to commit (it does at once unless the merge holds the lock)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)


def test_a_write_back_during_a_merge_onto_its_bundle_is_kept(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "a.warm")
    partial_bundle(bundle)  # production will write row_sum and a tune back
    other = bundle_of(warm, tmp_path, 1)
    merge = Paused(warm, tmp_path / "gate", MERGE_PUBLISH, "merge", bundle, other, "-o", bundle)
    writer = serve(warm, bundle, WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    settle(writer, 1.5)
    merged = merge.go()
    _, err = writer.communicate(timeout=120)
    assert writer.returncode == 0 and "written back" in err, err
    assert merged.returncode == 0, merged.stderr
    have = labels(bundle)
    assert any(label.startswith("row_sum") for label in have), "the write-back was lost"
    assert expected(1) <= have
    assert warm("verify", bundle, "--workload", MATMUL).returncode == 0


def test_two_merges_into_one_bundle_both_land(warm: Warm, tmp_path: Path) -> None:
    bundle, one, two = (bundle_of(warm, tmp_path, w) for w in (0, 1, 2))
    first = Paused(warm, tmp_path / "gate", MERGE_PUBLISH, "merge", bundle, one, "-o", bundle)
    second = subprocess.Popen(
        [sys.executable, "-m", "warmcli", "merge", bundle, two, "-o", bundle],
        env=warm.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    settle(second, 1.5)
    assert first.go().returncode == 0
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert expected(0) | expected(1) | expected(2) <= labels(bundle)


def test_verify_while_a_writer_commits_reads_one_snapshot(warm: Warm, tmp_path: Path) -> None:
    bundle = bundle_of(warm, tmp_path, 0)
    verify = Paused(warm, tmp_path / "gate", VERIFY_KERNELS, "verify", bundle)
    writer = subprocess.Popen(  # commits batch after batch of new kernels and blobs
        [sys.executable, str(CRASH_WRITER), str(bundle), "1"],
        env=warm.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        settle(writer, 1.5)
        verified = verify.go()
    finally:
        writer.kill()
        writer.communicate()
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert warm("verify", bundle).returncode == 0


def race(
    warm: Warm, tmp_path: Path, template: Path, others: list[Path], writer: Path
) -> tuple[int, int]:
    """One trial: two merges into a copy of `template` and a `warm run` into it, at once;
    (entries lost, commands that failed)."""
    bundle = tmp_path / "race.warm"
    bundle.write_bytes(template.read_bytes())
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "warmcli", *map(str, args)],
            env=warm.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for args in (
            ("merge", bundle, others[0], "-o", bundle),
            ("run", writer, "--bundle", bundle, "-q"),
            ("merge", bundle, others[1], "-o", bundle),
        )
    ]
    failed = sum(proc.wait(timeout=300) != 0 for proc in procs)
    for proc in procs:
        proc.communicate()
    want = expected(0) | expected(1) | expected(2) | expected(3)
    return len(want - labels(bundle)), failed


@pytest.mark.slow
def test_merges_and_a_run_racing_on_one_bundle_lose_nothing_stress(
    warm: Warm, tmp_path: Path
) -> None:
    template, one, two = (bundle_of(warm, tmp_path, w) for w in (0, 1, 2))
    writer = tmp_path / "w3.py"
    writer.write_text(WORKLOAD.format(w=3))
    trials = [race(warm, tmp_path, template, [one, two], writer) for _ in range(20)]
    lost, failed = sum(t[0] for t in trials), sum(t[1] for t in trials)
    print(f"merge race: {len(trials)} trials, {lost} entries lost, {failed} commands failed")
    assert (lost, failed) == (0, 0), trials
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".race.warm.")]
