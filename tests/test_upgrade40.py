"""A fleet mid-rollout: stop 40's warm (commit 5c60454) and today's over one bundle.

Today's warm adds one field to a kernel row's `components`: `header_files` (which headers
a headers digest covered, names and sha256 starts), and reads none of the rest differently;
every kernel and tune key is what stop 40 made. So each warm serves the other's bundle
compiling and measuring nothing (host kernels including a header, plain and checked
tunes, several kernels per batch; `--arch sm_90` NVRTC builds re-warmed), alternating
re-warms store nothing new, production write-backs of both land in one bundle, each merges
one's and the other's bundle, a bundle signed by one is served under `WARM_TRUSTED_KEYS`
by the other, and `clean`/`verify`/`check`/`stats --json`/`diff` of the other's bundle
read it as sound, never "corrupt", through the real CLI and fresh processes.

Stop 40's warm is the checkout at `/tmp/base40` where one is, else a `git worktree` of
5c60454 made in a temporary folder (and removed after); skipped where neither can be had.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from upgrades import STORED, Fleet, digest, keys, release

BASE = "5c60454"
CHECKOUT = Path("/tmp/base40")
WORKLOAD = '''
"""Host kernels with a header, tunes plain and checked, several kernels per batch."""
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
INC = ("-I" + HERE + "/inc",)
PART = os.environ.get("PART", "ab")  # which half a production process runs
SRC = r"""
#include "val.h"
void scale(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) y[j] = x[j] * VAL;
}
"""
ADDS = [Kernel(f"void add{i}(float *y, int n) {{ for (int i = 0; i < n; i++) y[i] += {i}; }}",
               f"add{i}", "Pi") for i in range(4)]


def cands(step):
    return {f"s{s}": Kernel(SRC, "scale", "PPi", defines={"STEP": s}, options=INC)
            for s in (1, step)}


def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)


TUNABLES = [
    ("a", Tunable("t_plain", cands(4), launch)),
    ("b", Tunable("t_checked", cands(8), launch, check="s1", key=lambda x, y, n: n)),
]


def workload(rt):
    results = []
    x = rt.upload(np.arange(100, dtype=np.float32) * 0.37)
    for part, t in TUNABLES:
        if part not in PART:
            continue
        y = rt.buffer(100, "float32")
        rt.tune(t, x, y, 100)
        for k in ADDS[:2] if part == "a" else ADDS[2:]:
            rt.launch(k, y, 100)
        results.append(y)
    return results
'''
CUDA = '''
from warmcli import Kernel
DEVICE = "cuda"
SOURCE = r"""
__device__ float helper(float x) { return x * SCALE; }
extern "C" __global__ void scale(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = helper(y[i]) + 1.0f;
}
"""
KERNELS = [Kernel(SOURCE, "scale", "Pi", language="cuda", defines={"SCALE": s}) for s in (2, 3)]


def workload(rt):
    y = rt.buffer(256)
    for k in KERNELS:
        rt.launch(k, y, 256, grid=1, block=256)
'''


@pytest.fixture(scope="module")
def old() -> Iterator[Path]:
    """Stop 40's warm: `/tmp/base40`, else a worktree of 5c60454 made for this module."""
    yield from release(BASE, CHECKOUT)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, old: Path) -> tuple[Fleet, dict[str, object]]:
    """Both warms; `new.warm` and `old.warm`, each warm's bundle of both workloads; a cold
    start's results."""
    folder = tmp_path_factory.mktemp("upgrade40")
    fleet = Fleet(folder, old)
    (folder / "inc").mkdir()
    (folder / "inc" / "val.h").write_text("#define VAL 3.0f\n")
    fleet.workload.write_text(WORKLOAD)
    fleet.cuda.write_text(CUDA)
    for code, name in ((fleet.new, "new"), (fleet.old, "old")):
        bundle = folder / f"{name}.warm"
        assert fleet.warm(code, bundle) == [
            STORED.format(bundle, 7, 2),
            STORED.format(bundle, 4, 0),
        ]
    cold = fleet.serve(fleet.new, None)
    assert cold["compiled"] == 7 and cold["tuned"] == ["t_checked", "t_plain"], cold
    assert fleet.serve(fleet.old, None) == cold
    return fleet, cold


def test_the_new_field_is_there_and_every_key_is_unchanged(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    f, _ = fleet
    assert keys(f.folder / "new.warm") == keys(f.folder / "old.warm")
    with sqlite3.connect(f.folder / "new.warm") as db:
        rows = [json.loads(c) for (c,) in db.execute("SELECT components FROM kernels")]
    assert sum("header_files" in c for c in rows) == 3, rows  # the 3 scale builds


@pytest.mark.parametrize("reader", ["new", "old"])
def test_each_serves_and_reads_the_others_bundle_compiling_and_changing_nothing(
    fleet: tuple[Fleet, dict[str, object]], reader: str
) -> None:
    f, cold = fleet
    code = f.new if reader == "new" else f.old
    bundle = f.folder / ("old.warm" if reader == "new" else "new.warm")
    before = digest(bundle)
    assert f.serve(code, bundle, WARM_STRICT="1") == dict(cold, compiled=0, tuned=[])
    f.ok(code, "verify", "--workload", f.workload, bundle)
    assert "compiled 0" in f.ok(code, "verify", "--workload", f.cuda, "--arch", "sm_90", bundle)
    assert "11 kernel(s)" in f.ok(code, "verify", bundle)
    f.ok(code, "check", bundle)
    f.ok(code, "check", bundle, "--device", "cuda", "--arch", "sm_90")
    stats = json.loads(f.ok(code, "stats", bundle, "--json"))
    assert (len(stats["kernels"]), len(stats["tunes"])) == (11, 2), stats
    # Each kernel's share of its batch's binary and of its compile, as the other counts it.
    theirs = json.loads(f.ok(f.old if code == f.new else f.new, "stats", bundle, "--json"))
    shares = [[(k["key"], k["shared_by"], k["bytes"], k["seconds"]) for k in s["kernels"]]
              for s in (stats, theirs)]  # fmt: skip
    assert shares[0] == shares[1] and max(k[1] for k in shares[0]) == 2, shares
    f.ok(code, "diff", f.folder / "new.warm", f.folder / "old.warm")
    assert digest(bundle) == before
    copy = f.folder / f"clean-{reader}.warm"
    shutil.copy(bundle, copy)
    f.ok(code, "clean", copy)
    assert keys(copy) == keys(bundle)  # nothing of this machine's removed
    f.ok(code, "stats", bundle)
    assert f.serve(f.new if reader == "old" else f.old, copy, WARM_STRICT="1") == dict(
        cold, compiled=0, tuned=[]
    )


def test_alternating_re_warms_store_nothing_new(fleet: tuple[Fleet, dict[str, object]]) -> None:
    f, _ = fleet
    bundle = f.folder / "alternate.warm"
    shutil.copy(f.folder / "new.warm", bundle)
    for code in (f.old, f.new, f.old, f.new):
        assert f.warm(code, bundle) == [STORED.format(bundle, 0, 0)] * 2
    assert keys(bundle) == keys(f.folder / "new.warm")


def test_production_write_backs_of_both_interleaved(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    f, cold = fleet
    bundle = f.folder / "prod.warm"  # stop 40's, of the CUDA workload only
    f.ok(f.old, "run", f.cuda, "--arch", "sm_90", "-b", bundle, "-q")
    write = {"WARM_BUNDLE_WRITE": "1"}
    # Each half of the host workload in one of both warms, at once, each writing back.
    started = [
        f.serving(f.old, bundle, PART="a", **write),
        f.serving(f.new, bundle, PART="b", **write),
    ]
    half_a, half_b = map(f.served, started)
    assert half_a["tuned"] == ["t_plain"] and half_b["tuned"] == ["t_checked"]
    half_b2 = f.serve(f.old, bundle, PART="b", **write)
    assert half_b2["compiled"] == 0 and half_b2["tuned"] == []
    for code in (f.old, f.new):
        assert f.serve(code, bundle, WARM_STRICT="1") == dict(cold, compiled=0, tuned=[])
        f.ok(code, "verify", "--workload", f.workload, bundle)
    assert f.warm(f.new, bundle, cuda=False) == [STORED.format(bundle, 0, 0)]


@pytest.mark.parametrize("merger", ["new", "old"])
def test_each_merges_ones_and_the_others_bundle(
    fleet: tuple[Fleet, dict[str, object]], merger: str
) -> None:
    f, cold = fleet
    code = f.new if merger == "new" else f.old
    out = f.folder / f"merged-{merger}.warm"
    f.ok(code, "merge", f.folder / "new.warm", f.folder / "old.warm", "-o", out)
    assert keys(out) == keys(f.folder / "new.warm")
    for reader in (f.old, f.new):
        assert f.serve(reader, out, WARM_STRICT="1") == dict(cold, compiled=0, tuned=[])
        assert "11 kernel(s)" in f.ok(reader, "verify", out)
    done = f.ok(code, "merge", f.folder / "old.warm", f.folder / "new.warm", "-o", out, "--force")
    assert "kept the binary" not in done, done  # one build of each kernel, either warm's
    assert f.warm(f.old if merger == "new" else f.new, out, cuda=False) == [
        STORED.format(out, 0, 0)
    ]


@pytest.mark.parametrize("signer", ["new", "old"])
def test_signed_by_one_served_trusted_by_the_other(
    fleet: tuple[Fleet, dict[str, object]], signer: str
) -> None:
    f, cold = fleet
    code, other = (f.new, f.old) if signer == "new" else (f.old, f.new)
    bundle, key = f.folder / f"signed-{signer}.warm", f.folder / f"{signer}.key"
    shutil.copy(f.folder / ("old.warm" if signer == "new" else "new.warm"), bundle)
    f.ok(code, "keygen", key)
    f.ok(code, "sign", bundle, "--key", key)
    trusted = {"WARM_TRUSTED_KEYS": f"{key}.pub"}
    assert "valid, trusted" in f.ok(other, "verify", bundle, **trusted)
    f.ok(other, "check", bundle, **trusted)
    served = f.serve(other, bundle, WARM_STRICT="1", **trusted)
    assert served == dict(cold, compiled=0, tuned=[])
    # Each re-warming it in turn, signing: nothing new, still wholly trusted.
    for warm in (other, code):
        stored = f.warm(warm, bundle, "--key", key, cuda=False, **trusted)
        assert stored == [STORED.format(bundle, 0, 0)]
        assert "valid, trusted" in f.ok(warm, "verify", bundle, **trusted)


def test_a_changed_header_is_a_miss_each_explains_in_the_others_bundle(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """After a header changes, each warm names the miss of either bundle (today's names the
    header where the bundle's row lists them: its own; stop 40's rows list none)."""
    f, _ = fleet
    changed = f.folder / "changed"
    shutil.copytree(f.folder / "inc", changed / "inc")
    (changed / "inc" / "val.h").write_text("#define VAL 5.0f\n")
    shutil.copy(f.workload, changed / "wl.py")
    for code, name, said in (
        (f.new, "old", ""),
        (f.new, "new", " (changed: val.h)"),
        (f.old, "new", ""),
    ):
        bundle = f.folder / f"{name}.warm"
        done = f.cli(code, "verify", "--workload", changed / "wl.py", bundle, "--explain-misses")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert "corrupt" not in done.stdout + done.stderr, done.stdout + done.stderr
        misses = [ln for ln in done.stdout.splitlines() if ln.startswith("miss: kernel scale")]
        assert len(misses) == 3 and all(ln.endswith(said) for ln in misses), done.stdout
        assert all("headers: bundle has sha256" in ln for ln in misses), misses
