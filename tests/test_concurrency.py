"""Concurrent writers: 8 `warm run`s on different workloads into one bundle, readers reading.

Every run is the real CLI in its own process, on its own workload (two kernels
and a tunable of two candidates, all its own), writing the same bundle file at
once, while a reader process opens the bundle read-only and reads every entry
and binary in a loop. Every run must succeed (no "database is locked" reaches a
user), every entry of every run must be there afterwards, and the reader must
have kept reading, without one error. `make test` runs one round; `make stress`
runs five rounds on the same bundle.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WRITERS = 8

WORKLOAD = """\
from warmcli import Kernel, Tunable

W = {w}
SCALE = Kernel("void scale(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] *= W; }}",
               "scale", "Pi", defines={{"W": W}})
SHIFT = Kernel("void shift(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += W; }}",
               "shift", "Pi", defines={{"W": W}})
SRC = ("void op(float *x, int n) "
       "{{ for (int r = 0; r < R; r++) for (int i = 0; i < n; i++) x[i] += W; }}")
OP = Tunable(f"op{{W}}", {{f"r{{r}}": Kernel(SRC, "op", "Pi", defines={{"R": r, "W": W}})
                         for r in (1, 3)}},
             lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream), repeats=2)

def workload(rt):
    x = rt.buffer(256)
    rt.launch(SCALE, x, 256)
    rt.tune(OP, x, 256)
    rt.launch(SHIFT, x, 256)
"""

READER = """\
import sys, time
from pathlib import Path
from warmcli.bundle.store import Bundle

path, stop = Path(sys.argv[1]), Path(sys.argv[2])
reads = 0
while not stop.exists():
    if not path.exists():
        time.sleep(0.01)
        continue
    with Bundle.open(path) as bundle:
        kernels = bundle.kernels()
        for k in kernels[-4:]:
            bundle.blob(k.sha256)
        bundle.tunes()
        bundle.manifest()
    reads += 1
print(reads)
"""


def expected(w: int) -> set[str]:
    """The kernel labels workload `w` stores."""
    return {f"scale[W={w}]", f"shift[W={w}]", f"op[R=1,W={w}]", f"op[R=3,W={w}]"}


def one_round(warm: Warm, tmp_path: Path, bundle: Path, first: int) -> tuple[int, int]:
    """8 writers and a reader at once; returns (runs, reads by the reader)."""
    stop = tmp_path / f"stop{first}"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(bundle), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    runs = []
    for w in range(first, first + WRITERS):
        path = tmp_path / f"work{w}.py"
        path.write_text(WORKLOAD.format(w=w))
        runs.append(
            subprocess.Popen(
                [sys.executable, "-m", "warmcli", "run", str(path), "--bundle", str(bundle)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=warm.env,
                cwd=ROOT,
            )
        )
    for proc in runs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err + out
        assert "locked" not in err + out and "Traceback" not in err
    time.sleep(0.2)
    stop.touch()
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    return len(runs), int(out)


def check_all_present(warm: Warm, bundle: Path, workloads: int) -> int:
    """Every kernel and tune of every run is in the bundle; returns the entries checked."""
    doc = warm.json("stats", bundle)
    labels = [k["label"] for k in doc["kernels"]]
    assert sorted(labels) == sorted(set().union(*(expected(w) for w in range(workloads))))
    assert {t["operation"] for t in doc["tunes"]} == {f"op{w}" for w in range(workloads)}
    assert all(t["pick"] in ("r1", "r3") for t in doc["tunes"])
    return len(doc["kernels"]) + len(doc["tunes"])


def run_rounds(warm: Warm, tmp_path: Path, rounds: int) -> None:
    bundle = tmp_path / "shared.warm"
    runs = reads = entries = 0
    for r in range(rounds):
        n, m = one_round(warm, tmp_path, bundle, r * WRITERS)
        runs, reads = runs + n, reads + m
        entries = check_all_present(warm, bundle, (r + 1) * WRITERS)
        assert m > 0, "the reader never got a read in"
    print(f"concurrent runs: {runs}, reader passes: {reads}, entries checked: {entries}")


def test_eight_writers_and_a_reader_lose_nothing(warm: Warm, tmp_path: Path) -> None:
    run_rounds(warm, tmp_path, 1)


@pytest.mark.slow
def test_eight_writers_and_a_reader_lose_nothing_stress(warm: Warm, tmp_path: Path) -> None:
    run_rounds(warm, tmp_path, 5)
