"""Stop 53's mutation review, part 2 (keys, tunes and data safety): the guards whose mutant
no earlier test caught, each held here by what a user sees through the real CLI and real
compiles.

- A tune's key names the device it was measured on: a bundle's tune measured on another CPU
  is measured again here, never served as this one's (its key without the device served it).
- A tunable that buckets nothing keys a buffer by its exact shape: tuned on 12 and on 16
  elements, it measures both (its shapes bucketed to powers of two whatever it asked, one).
- A bundle's tune whose key checks out but whose pick is no candidate of the workload's
  tunable (a row from elsewhere naming a candidate "c9") is measured again: a hit that took
  its pick raised `KeyError: 'c9'` out of the workload.
- A kernel stored again with another binary frees its old one only where no other kernel uses
  it: two host kernels built in one batch share one shared object, and the first rebuilt
  leaves the second's binary in place (freed whatever used it, `warm verify` found it gone).
"""

from __future__ import annotations

import json
import hashlib
import sqlite3
from dataclasses import replace
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.store import Bundle
from warmcli.records import tune_key

# A host tunable of two candidates that compute alike, keyed by its one buffer's shape.
TUNED = """
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0f + 0 * U; }"
T = Tunable(
    name="inc",
    candidates={f"c{u}": Kernel(SRC, "inc", "Pi", defines={"U": u}) for u in range(2)},
    launch=lambda rt, k, x, *, stream=None: rt.launch(k, x, x.shape[0], stream=stream),
)


def workload(rt):
    x = rt.buffer(16, "float32")
    rt.tune(T, x)
    return x
"""
TWO_SHAPES = TUNED.replace("rt.tune(T, x)", "rt.tune(T, x)\n    rt.tune(T, rt.buffer(12))")


def _autotune(warm: Warm, workload: Path, bundle: Path) -> dict[str, int]:
    """The measuring pass's autotune counts of `warm run workload -b bundle`."""
    proc = warm("run", workload, "-b", bundle, "--json", "-q")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["passes"][1]["autotune"]


def test_a_tune_measured_on_another_cpu_is_measured_again_here(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    workload = workload_file(TUNED)
    assert _autotune(warm, workload, bundle_path)["measured"] == 1
    with sqlite3.connect(bundle_path) as conn:  # as a bundle warmed on another CPU holds it
        old, op, shape, device, checksum = conn.execute(
            "SELECT key, operation, shape_key, device, checksum FROM tunes"
        ).fetchone()
        other = device.replace("|", "|Another CPU ", 1)
        new = bytes.fromhex(tune_key(op, shape, other, checksum.hex()))
        conn.execute("UPDATE tunes SET key = ?, device = ? WHERE key = ?", (new, other, old))
        fp = conn.execute("SELECT data FROM fingerprints WHERE kind = 'device'").fetchone()[0]
        data = json.dumps({**json.loads(fp), "name": other.split("|")[1]}, sort_keys=True)
        conn.execute(
            "INSERT INTO fingerprints VALUES (?, 'device', ?)", ("device:" + other, data)
        )
    again = _autotune(warm, workload, bundle_path)
    assert (again["measured"], again["hits"]) == (1, 0), again


def test_a_tunable_that_buckets_nothing_measures_each_shape_apart(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    assert _autotune(warm, workload_file(TWO_SHAPES), bundle_path)["measured"] == 2
    with sqlite3.connect(bundle_path) as conn:
        shapes = sorted(s for (s,) in conn.execute("SELECT shape_key FROM tunes"))
    assert shapes == ["float32[12]", "float32[16]"], shapes


def test_a_bundle_pick_that_is_no_candidate_is_measured_again(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    workload = workload_file(TUNED)
    assert _autotune(warm, workload, bundle_path)["measured"] == 1
    with Bundle.open(bundle_path, write=True) as bundle:  # a row naming a candidate c9
        (tune,) = bundle.tunes()
        renamed = [replace(c, name="c9") if c.name == tune.pick else c for c in tune.candidates]
        bundle.put(tunes=[replace(tune, pick="c9", candidates=tuple(renamed))])
    again = _autotune(warm, workload, bundle_path)
    assert (again["measured"], again["hits"]) == (1, 0), again


TWO_KERNELS = """
from warmcli import Kernel

DEVICE = "host"


def workload(rt):
    x = rt.buffer(4)
    for v in (1, 2):
        rt.launch(Kernel("void k(float *x, int n) { x[0] = n * V; }", "k", "Pi", defines={"V": v}), x, 4)
"""


def test_a_kernel_stored_again_keeps_the_binary_its_batch_mate_uses(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    done = warm("run", workload_file(TWO_KERNELS), "-b", bundle_path, "-q", "--jobs", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    with Bundle.open(bundle_path, write=True) as bundle:
        one, two = bundle.kernels()
        assert one.sha256 == two.sha256  # one batch: one shared object
        rebuilt = bundle.blob(one.sha256) + b"\0"  # the same code, another binary
        sha = hashlib.sha256(rebuilt).hexdigest()
        bundle.put([(replace(one, sha256=sha, size=len(rebuilt)), rebuilt)])
    checked = warm("verify", bundle_path)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
