"""A fleet mid-rollout: stop 42's warm (commit 81fe69a) and today's over one bundle.

Several ops' tunes keyed by `key=` dicts (an int key, a str key JSON writes as a number's, a
numpy number), a frozenset, a tuple of numpy and plain scalars, a default key bucketed by
`pow2`, two tunables sharing their candidates' kernels; host kernels including a header that
includes another, through `-I`, with defines and `-D`/`-O2` options; NVRTC `--arch sm_90`
builds of two entries of one source with `-I`, `--use_fast_math` and `-std=c++17`; a PyCUDA
script (`include_dirs`, `no_extern_c`, `-D` options made defines,
`prepare`/`prepared_call`). Every NVRTC kernel key (PyCUDA's too) and every tune key is
what stop 42 made: a tune's key holds no toolchain. A host kernel's is not: since warm 46
(toolid46) a host compiler's identity holds the `as` and `ld` cc runs beside its version line
(`cc:...; as GNU assembler ... 2.40; ld GNU ld ... 2.40`), so that a wrapper `as` or `ld`, or
binutils replaced, is not served another's build; each host kernel is keyed anew, building
what it did. A build is served wherever its binary runs (README, "Where a build is served"),
so each warm serves the other's bundle under WARM_STRICT=1 compiling and measuring nothing,
with a cold start's results; a re-warm by either of the other's bundle stores its own builds
of the host kernels the workload launches (each tune's pick and what it launches itself, not
a tune's unpicked candidates) beside the other's, and no NVRTC build or tune, and a second
re-warm stores nothing; `verify`, `check` (also `--device cuda
--arch sm_90`), `stats` and `stats --json` (each kernel's share of its batch as the other
counts it), `diff` and `clean` of the other's bundle read it as sound, never "corrupt"; a
bundle written by either's merge of one's PyCUDA bundle and the other's, one cleaned by
either's `clean --older-than` (the CUDA builds unused for a year) and `clean --tune`, one
signed by either (served under `WARM_TRUSTED_KEYS` by the other), and production write-backs
of both at once serve the other alike; shards pre-built one by each merge, by either, into
one whole run's bundle. A changed nested header is explained as changed by each in the
other's bundle. What `test_upgrade41` (stop 41 beside today's, retired) had that this
lacked: tunes keyed by strs holding a huge int's hex key alike, and kernels pre-including
`-include /abs/pre.h` build alike (the header named `pre.h`, a changed one explained so by
each); PyCUDA's `options=None` with `DEFAULT_NVCC_FLAGS` extended keys as the explicit list;
rows dated a century ahead are stamped now by either's `clean --older-than` and
`--max-size`; today's write-back stamps what it was served and built at one time; a merge of
both warms' bundles of one workload holds each's host builds and tells no NVRTC binary
apart; a URL with a signed query, or one signing nothing, is one kept copy to both; stop
41's `<header>` mark is paired by content (pure logic). Real CLI (each command a fork of a
process that imported that warm's CLI once, `tests/forked_cli.py`), real production
processes (each run alone a fork of one that imported numpy and that warm's `warmcli` once,
`tests/forked_python.py`; those run at once started), real SQLite files, the system C
compiler and NVRTC.

Stop 42's warm is the checkout at `/tmp/base42` where one is, else a `git worktree` of
81fe69a made in a temporary folder (and removed after); skipped where neither can be had.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from forked_cli import Servers
from forked_python import ForkedPython
from upgrades import MEETING, SERVE, STORED, Fleet, digest, keys, release, stored

BASE = "81fe69a"
CHECKOUT = Path("/tmp/base42")
WORKLOAD = '''
"""Several ops' tunes keyed by key= dicts, sets, tuples and numpy numbers; host kernels
including nested headers through -I, with defines and -D options."""
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
OPTS = ("-I", os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc"), "-O2",
        "-DBIAS=0.5f")
PART = os.environ.get("PART", "abc")  # which ops a production process runs
AXPY = r"""
#include "ops.h"
void axpy(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) y[j] += ALPHA * x[j] + BIAS;
}
"""
SCALE = r"""
#include <ops.h>
void scale(const float *x, float *y, int n, float s) {
    for (int i = 0; i < n; i += UNROLL)
        for (int j = i; j < i + UNROLL && j < n; j++) y[j] = twice(x[j]) * s;
}
"""
ROWSUM = r"""
void rowsum(const float *x, float *out, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < cols; c += LANES)
            for (int k = c; k < c + LANES && k < cols; k++) s += x[r * cols + k];
        out[r] = s;
    }
}
"""
ZERO = Kernel("void zero(float *y, int n) { for (int i = 0; i < n; i++) y[i] = FILL; }",
              "zero", "Pi", options=("-std=c11", "-DFILL=0.25f"))
SUMS = {f"l{n}": Kernel(ROWSUM, "rowsum", "PPii", defines={"LANES": n}) for n in (1, 4)}


def run(rt, k, *args, stream=None):
    rt.launch(k, *args, stream=stream)


AXPY_T = Tunable(
    "axpy",
    {f"st{s}": Kernel(AXPY, "axpy", "PPi", defines={"STEP": s}, options=OPTS) for s in (1, 4)},
    run, key=lambda x, y, n: {"n": np.int64(n), "dtype": "float32", 3: "rows", "1": None},
)
SCALE_T = Tunable(
    "scale",
    {f"u{u}": Kernel(SCALE, "scale", "PPif", defines={"UNROLL": u}, options=OPTS)
     for u in (2, 8)},
    run, check="u2", key=lambda x, y, n, s: (n, np.float32(s), None, True, "n"),
)
SUM_T = Tunable("rowsum", SUMS, run,
                key=lambda x, out, r, c: {"ops": frozenset({"sum", "rows"}), "shape": [r, c]})
SUM_P2 = Tunable("rowsum_p2", SUMS, run, bucket="pow2")  # the same kernels, default key


def workload(rt):
    x = rt.upload(np.arange(120, dtype=np.float32) * 0.37)
    ys = [rt.buffer(120, "float32") for _ in range(4)]
    rt.launch(ZERO, ys[0], 120)
    if "a" in PART:
        rt.tune(AXPY_T, x, ys[0], 120)
    if "b" in PART:
        rt.tune(SCALE_T, x, ys[1], 120, 1.5)
    if "c" in PART:
        for rows, cols, t in ((4, 30, SUM_T), (5, 24, SUM_T), (6, 20, SUM_P2)):
            rt.tune(t, x, ys[2], rows, cols)
            rt.launch(SUMS["l1"], x, ys[3], rows, cols)
    return ys
'''
CUDA = '''
"""NVRTC builds of two entries of one source, including a header through -I."""
import os
from warmcli import Kernel

DEVICE = "cuda"
INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc")
SOURCE = r"""
#include "cu.h"
#ifndef SHIFT
#define SHIFT 1.0f
#endif
extern "C" __global__ void fill(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FILL * factor();
}
extern "C" __global__ void shift(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += SHIFT;
}
"""
KERNELS = [
    *(Kernel(SOURCE, "fill", "Pi", language="cuda", defines={"FILL": f},
             options=("-I", INC, "--use_fast_math")) for f in (1, 2)),
    Kernel(SOURCE, "shift", "Pi", language="cuda", defines={"FILL": 1, "SHIFT": 3},
           options=("-I", INC, "-std=c++17")),
]


def workload(rt):
    y = rt.buffer(512)
    for k in KERNELS:
        rt.launch(k, y, 512, grid=2, block=256)
'''
PYCUDA = '''
import os
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc")
BUMP = """
#include "pc.h"
__global__ void bump(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += BUMP * K;
}
"""
HALVE = """
extern "C" __global__ void halve(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 0.5f;
}
"""
MUL = """
__global__ void mul(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= M;
}
"""


def main():
    x, n = drv.mem_alloc(1024 * 4), np.int32(1024)
    bump = SourceModule(BUMP, include_dirs=[INC], options=["-DK=3"]).get_function("bump")
    bump(x, n, block=(256, 1, 1), grid=(4, 1))
    if os.environ.get("FLAGS") == "default":  # options=None, DEFAULT_NVCC_FLAGS extended
        from pycuda.compiler import DEFAULT_NVCC_FLAGS

        if not DEFAULT_NVCC_FLAGS:
            DEFAULT_NVCC_FLAGS.append("--use_fast_math")
        halve = SourceModule(HALVE, no_extern_c=True)
    else:
        halve = SourceModule(HALVE, no_extern_c=True, options=["--use_fast_math"])
    halve.get_function("halve")(x, n, block=(256, 1, 1), grid=(4, 1))
    for m in (2, 3):  # -D options made warm defines: one compiler process
        mul = SourceModule(MUL, options=[f"-DM={m}"]).get_function("mul")
        mul.prepare("Pi")
        mul.prepared_call((4, 1), (256, 1, 1), x, n)
'''
PRE = '''
"""A tune keyed by a str spelling a list with an int past 10**4300 in hex, one by a str
holding that hex not first; their kernels pre-include a header by its absolute path."""
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
PRE = ("-include", os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc", "pre.h"))
SRC = """void twice(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += STEP) for (int j = i; j < i + STEP && j < n; j++) y[j] = VAL * x[j];
}"""
CANDS = {f"s{s}": Kernel(SRC, "twice", "PPi", defines={"STEP": s}, options=PRE) for s in (1, 2)}
BIG = "[" + hex(10**4300) + "]"
RUN = lambda rt, k, x, y, n, *, stream=None: rt.launch(k, x, y, n)
T = Tunable("t_hex", CANDS, RUN, key=lambda x, y, n: BIG)
KEPT = Tunable("t_kept", CANDS, RUN, key=lambda x, y, n: "rows" + BIG)  # no [ or { first


def workload(rt):
    x = rt.upload(np.arange(100, dtype=np.float32))
    ys = [rt.buffer(100, "float32") for _ in range(2)]
    rt.tune(T, x, ys[0], 100)
    rt.tune(KEPT, x, ys[1], 100)
    return ys
'''
STRICT = {"WARM_STRICT": "1"}
TUNED = ["axpy", "rowsum", "rowsum", "rowsum_p2", "scale"]
HEADERS = {
    "ops.h": '#include "more.h"\nstatic inline float twice(float v) { return 2.0f * v; }\n',
    "more.h": "#define ALPHA 3.0f\n",
    "cu.h": "__device__ inline float factor() { return 2.0f; }\n",
    "pc.h": "#define BUMP 2.0f\n",
    "pre.h": "#define VAL 3.0f\n",
}


class _ForkedFleet(Fleet):
    """`Fleet` whose `serve` (one production process run to its end, what it computed
    read) is a fork of a process that imported numpy and that warm's `warmcli` once
    (`tests/forked_python.py`, one a warm and environment); `serving`, processes that run at once
    (`test_production_write_backs_of_both_at_once`), still starts them."""

    def __init__(self, folder: Path, old: Path, servers: Servers) -> None:
        super().__init__(folder, old, servers)
        self.pythons: dict[tuple[object, ...], ForkedPython] = {}

    def serve(
        self, code: Path, bundle: Path | str | None, workload: Path | None = None, **env: str
    ) -> dict[str, object]:
        more = {"WARM_BUNDLE": str(bundle)} if bundle is not None else {}
        environ = dict(self.env, PYTHONPATH=str(code), **more, **env)
        own = (code, *sorted((k, v) for k, v in env.items() if not k.startswith("WARM_")))
        if own not in self.pythons:  # (one a warm and environment apart from WARM_*)
            self.pythons[own] = ForkedPython(environ, self.folder)
        done = self.pythons[own].run(
            SERVE, str(workload or self.workload), env=environ, cwd=self.folder, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def close(self) -> None:
        for python in self.pythons.values():
            python.close()


@pytest.fixture(scope="module")
def old() -> Iterator[Path]:
    """Stop 42's warm: `/tmp/base42`, else a worktree of 81fe69a made for this module."""
    yield from release(BASE, CHECKOUT)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, old: Path
) -> Iterator[tuple[Fleet, dict[str, object]]]:
    """Both warms, each command and production process run alone forked; `new.warm` and
    `old.warm`, each warm's bundle of the host and CUDA workloads, `pyc-new.warm` and
    `pyc-old.warm` of the PyCUDA script; a cold start's results."""
    folder = tmp_path_factory.mktemp("upgrade42")
    servers = Servers(folder)
    fleet = _ForkedFleet(folder, old, servers)
    try:
        (folder / "inc").mkdir()
        for name, text in HEADERS.items():
            (folder / "inc" / name).write_text(text)
        fleet.workload.write_text(WORKLOAD)
        fleet.cuda.write_text(CUDA)
        (folder / "pyc.py").write_text(PYCUDA)
        (folder / "pre.py").write_text(PRE)
        for code, name in ((fleet.new, "new"), (fleet.old, "old")):
            bundle, pyc = folder / f"{name}.warm", folder / f"pyc-{name}.warm"
            assert fleet.warm(code, bundle) == [
                STORED.format(bundle, 7, 5),
                STORED.format(bundle, 6, 0),  # a cubin and a PTX of each
            ]
            assert fleet.pycuda(code, pyc) == STORED.format(pyc, 8, 0)
        cold = fleet.serve(fleet.new, None)
        assert cold["compiled"] == 7 and cold["tuned"] == TUNED, cold
        assert fleet.serve(fleet.old, None) == cold
        yield fleet, cold
    finally:
        fleet.close()
        servers.close()


def _other(f: Fleet, name: str) -> tuple[Path, Path, str]:
    """The warm named, the other warm and the other's name."""
    return (f.new, f.old, "old") if name == "new" else (f.old, f.new, "new")


def _built(bundle: Path) -> dict[str, tuple[str, str, str]]:
    """Each kernel's key to its device, what it builds but for the toolchain (its key's
    components less `toolchain`: its content hash, arch, options ...) and its toolchain."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT key, device, components FROM kernels").fetchall()
    built = {}
    for key, device, components in rows:
        parts = json.loads(components)
        toolchain = parts.pop("toolchain")
        built[key] = (device, json.dumps(parts, sort_keys=True), toolchain)
    return built


def _what(bundle: Path, device: str = "host") -> list[str]:
    """What `bundle`'s kernels of `device` build, toolchain aside, sorted (one a build)."""
    return sorted(b[1] for b in _built(bundle).values() if b[0] == device)


def _launched(bundle: Path, *also: str) -> int:
    """How many host kernels a workload launches served `bundle`'s tunes: their picks (a
    candidate's name names one kernel in these workloads: `rowsum` and `rowsum_p2` pick among
    the same ones) and `also`, those it launches itself. A re-warm by the warm that built
    none of them builds just these: a tune's unpicked candidates are not launched."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        picks = {str(pick) for (pick,) in db.execute("SELECT pick FROM tunes")}
    return len(picks | set(also))


LAUNCHED = ("zero", "l1")  # what WORKLOAD launches beside its tunes' picks


def _host_keys_apart(one: Path, other: Path) -> None:
    """`one` and `other` (one by each warm) build the same host kernels under keys none
    shared, and the same NVRTC kernels and tunes under the same keys."""
    mine, theirs = keys(one), keys(other)
    assert mine[1] == theirs[1], (mine, theirs)
    host = [{k for k, b in _built(x).items() if b[0] == "host"} for x in (one, other)]
    assert host[0] and not host[0] & host[1], host
    assert set(mine[0]) - host[0] == set(theirs[0]) - host[1]
    assert _what(one) == _what(other)


def test_nvrtc_and_tune_keys_are_unchanged_host_keys_name_as_and_ld(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """Since warm 46 a host kernel's key holds the `as` and `ld` cc runs, beside cc's version
    line: each of the 7 is keyed anew, building what it did; NVRTC's 6 and the 5 tunes (a
    tune's key holds no toolchain) are stop 42's."""
    f, _ = fleet
    new, old = f.folder / "new.warm", f.folder / "old.warm"
    made = keys(new)
    assert tuple(map(len, made)) == tuple(map(len, keys(old))) == (13, 5), made
    _host_keys_apart(new, old)
    assert _what(new, "sm_90") == _what(old, "sm_90") and len(_what(new, "sm_90")) == 6
    toolchains = [{b[2] for b in _built(x).values() if b[0] == "host"} for x in (new, old)]
    ((today,), (then,)) = toolchains
    cc, recipe = re.fullmatch(r"(cc:.+?)( \[warm build recipe \d+\])", then).groups()
    assert re.fullmatch(re.escape(cc) + r"; as .+; ld .+" + re.escape(recipe), today), today
    pyc = keys(f.folder / "pyc-new.warm")
    assert pyc == keys(f.folder / "pyc-old.warm") and tuple(map(len, pyc)) == (8, 0), pyc


@pytest.mark.parametrize("reader", ["new", "old"])
def test_each_serves_and_reads_the_others_bundle_compiling_and_changing_nothing(
    fleet: tuple[Fleet, dict[str, object]], reader: str
) -> None:
    f, cold = fleet
    code, other, name = _other(f, reader)
    bundle = f.folder / f"{name}.warm"
    before = digest(bundle)
    assert f.serve(code, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])
    f.ok(code, "verify", "--workload", f.workload, bundle)
    assert "compiled 0" in f.ok(code, "verify", "--workload", f.cuda, "--arch", "sm_90", bundle)
    assert "13 kernel(s)" in f.ok(code, "verify", bundle)
    f.ok(code, "check", bundle)
    f.ok(code, "check", bundle, "--device", "cuda", "--arch", "sm_90")
    f.ok(code, "stats", bundle)
    stats = json.loads(f.ok(code, "stats", bundle, "--json"))
    assert (len(stats["kernels"]), len(stats["tunes"])) == (13, 5), stats
    # Each kernel's share of its batch's binary and of its compile, as the other counts it.
    theirs = json.loads(f.ok(other, "stats", bundle, "--json"))
    shares = [[(k["key"], k["shared_by"], k["bytes"], k["seconds"]) for k in s["kernels"]]
              for s in (stats, theirs)]  # fmt: skip
    assert shares[0] == shares[1] and max(k[1] for k in shares[0]) >= 2, shares
    f.ok(code, "diff", f.folder / "new.warm", f.folder / "old.warm")
    assert digest(bundle) == before
    copy = f.folder / f"clean-{reader}.warm"
    shutil.copy(bundle, copy)
    f.ok(code, "clean", copy)
    assert keys(copy) == keys(bundle)  # nothing of this machine's removed
    assert f.serve(other, copy, **STRICT) == dict(cold, compiled=0, tuned=[])


@pytest.mark.parametrize("merger", ["new", "old"])
def test_a_merge_of_ones_pycuda_bundle_and_the_others_serves_and_re_warms_as_both(
    fleet: tuple[Fleet, dict[str, object]], merger: str
) -> None:
    f, cold = fleet
    code, other, name = _other(f, merger)
    out = f.folder / f"merged-{merger}.warm"
    f.ok(code, "merge", f.folder / f"pyc-{merger}.warm", f.folder / f"{name}.warm", "-o", out)
    parts = [keys(f.folder / b) for b in (f"pyc-{merger}.warm", f"{name}.warm")]
    assert keys(out) == tuple(sorted({*a, *b}) for a, b in zip(*parts, strict=True))
    for reader in (code, other):
        assert f.serve(reader, out, **STRICT) == dict(cold, compiled=0, tuned=[])
        assert "21 kernel(s)" in f.ok(reader, "verify", out)
    # Each re-warms what the other built: the host kernels it launches once more, its own
    # builds beside the other's (keyed by another toolchain since warm 46), then nothing;
    # NVRTC's and the tunes are the other's.
    more = _launched(out, *LAUNCHED)
    assert f.warm(code, out) == [STORED.format(out, more, 0), STORED.format(out, 0, 0)]
    assert f.warm(code, out) == [STORED.format(out, 0, 0)] * 2
    assert f.warm(other, out, cuda=False) == [STORED.format(out, 0, 0)]
    assert f.pycuda(other, out) == STORED.format(out, 0, 0)
    for reader in (code, other):
        assert f.serve(reader, out, **STRICT) == dict(cold, compiled=0, tuned=[])
        assert f"{21 + more} kernel(s)" in f.ok(reader, "verify", out)
    # Both warms' bundles of one workload: each's host builds, the NVRTC builds and tunes
    # both made, no binary told apart.
    both = f.folder / f"both-{merger}.warm"
    done = f.ok(code, "merge", f.folder / f"{name}.warm", f.folder / f"{merger}.warm", "-o", both)
    assert "kept the binary" not in done, done
    parts = [keys(f.folder / b) for b in ("new.warm", "old.warm")]
    assert keys(both) == tuple(sorted({*a, *b}) for a, b in zip(*parts, strict=True))
    assert tuple(map(len, keys(both))) == (20, 5)
    assert "20 kernel(s)" in f.ok(other, "verify", both)


def test_shards_warmed_by_both_merge_by_either_into_one_whole_run(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """Shard 0/2 pre-built by stop 42, 1/2 by today's: each split the work as the other
    does (by content hash and tune key, no toolchain in either), and recorded the same run,
    so either's merge is one whole run's bundle, each kernel built by its shard's warm under
    that warm's key."""
    f, cold = fleet
    shards = [f.folder / f"shard{i}.warm" for i in (0, 1)]
    for code, i in ((f.old, 0), (f.new, 1)):
        f.ok(code, "run", f.workload, "--shard", f"{i}/2", "-b", shards[i], "-q")
    assert all(keys(s)[0] for s in shards), "a shard of none"
    host = tuple(sorted({*a, *b}) for a, b in zip(*map(keys, shards), strict=True))
    for shard, name in zip(shards, ("old", "new"), strict=True):
        assert set(keys(shard)[0]) <= set(keys(f.folder / f"{name}.warm")[0]), name
    assert sorted({*_what(shards[0]), *_what(shards[1])}) == _what(f.folder / "new.warm")
    assert host[1] == keys(f.folder / "new.warm")[1]
    for code, name in ((f.new, "new"), (f.old, "old")):
        merged = f.folder / f"shards-{name}.warm"
        f.ok(code, "merge", *shards, "-o", merged)  # (exit 1: not one whole run)
        assert keys(merged) == host
        other = f.old if code == f.new else f.new
        assert f.serve(other, merged, **STRICT) == dict(cold, compiled=0, tuned=[])
        assert "compiled 0" in f.ok(other, "verify", "--workload", f.workload, merged)


def _times(bundle: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Each kernel's last use and each tune's written time, by key."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        kernels = dict(db.execute("SELECT key, last_used FROM kernels"))
        tunes = {bytes(k).hex(): t for k, t in db.execute("SELECT key, updated FROM tunes")}
    return kernels, tunes


def _ahead(bundle: Path, kernels: str) -> None:
    """The kernels `kernels` selects (a WHERE clause) and every tune dated a century ahead,
    as a bundle from a machine whose clock was wrong."""
    ahead = time.time() + 100 * 365 * 86400
    with sqlite3.connect(bundle) as db:
        db.execute(f"UPDATE kernels SET last_used = ? {kernels}", (ahead,))
        db.execute("UPDATE tunes SET updated = ?", (ahead,))


def _stamped_now(bundle: Path, started: float) -> None:
    """A clean begun at `started` took its time as that of every row (each dated ahead)."""
    stamped = _times(bundle)
    assert all(started <= t <= time.time() for t in [*stamped[0].values(), *stamped[1].values()])


@pytest.mark.parametrize("cleaner", ["new", "old"])
def test_one_cleans_the_others_bundle_by_age_and_tune_and_the_other_re_warms_it(
    fleet: tuple[Fleet, dict[str, object]], cleaner: str
) -> None:
    """The CUDA builds unused for a year removed by `--older-than 30d`, a tunable's picks by
    `--tune`: the other serves what is left, and re-warms just what was removed."""
    f, cold = fleet
    code, other, name = _other(f, cleaner)
    bundle = f.folder / f"aged-{cleaner}.warm"
    shutil.copy(f.folder / f"{name}.warm", bundle)
    with sqlite3.connect(bundle) as db:
        db.execute("UPDATE kernels SET last_used = ? WHERE device != 'host'",
                   (time.time() - 365 * 86400,))  # fmt: skip
    _ahead(bundle, "WHERE device = 'host'")
    started = time.time()
    f.ok(code, "clean", bundle, "--older-than", "30d")
    assert tuple(map(len, keys(bundle))) == (7, 5)
    _stamped_now(bundle, started)
    assert "7 kernel(s)" in f.ok(other, "verify", bundle)
    assert f.serve(other, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])
    # Dated ahead again, `--max-size` alone: the other stamps them now too, removing none.
    _ahead(bundle, "")
    started = time.time()
    f.ok(other, "clean", bundle, "--max-size", "1G")
    assert tuple(map(len, keys(bundle))) == (7, 5)
    _stamped_now(bundle, started)
    f.ok(code, "stats", bundle, "--json")
    f.ok(code, "clean", bundle, "--tune", "rowsum")
    assert tuple(map(len, keys(bundle))) == (7, 3)
    assert f.warm(other, bundle) == [STORED.format(bundle, 0, 2), STORED.format(bundle, 6, 0)]
    assert keys(bundle) == keys(f.folder / f"{name}.warm")  # (the other's own, whole again)
    assert f.serve(code, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])


def test_production_write_backs_of_both_at_once(fleet: tuple[Fleet, dict[str, object]]) -> None:
    f, cold = fleet
    write = {"WARM_BUNDLE_WRITE": "1"}
    bundle = f.folder / "prod.warm"  # stop 42's, of the PyCUDA script only
    shutil.copy(f.folder / "pyc-old.warm", bundle)
    # Both at once, each looking `zero` (its first launch) up before either writes back (at
    # exit): each builds it under its own key. Without the meeting, one whose write-back
    # committed before the other keyed `zero` served that one its build (a build is served
    # wherever its binary runs, another toolchain's too): 15 rows, the other's report one
    # kernel short, nothing lost (tests/test_flake48.py); under load that was 1 run in 3.
    meet = f.folder / "meet-both"
    meet.mkdir()
    met = dict(write, MEET=str(meet), MEET_N="2")
    started = [
        f.serving(f.old, bundle, PART="ab", script=MEETING, **met),
        f.serving(f.new, bundle, PART="c", script=MEETING, **met),
    ]
    ab, c = map(f.served, started)
    assert ab["tuned"] == ["axpy", "scale"] and c["tuned"] == TUNED[1:4], (ab, c)
    assert (ab["compiled"], c["compiled"]) == (5, 3), (ab, c)  # `zero` built by each
    assert tuple(map(len, keys(bundle))) == (16, 5)  # each's `zero`, under its key
    for code in (f.old, f.new):
        assert f.serve(code, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])
    # Today's re-warm builds the picks of `axpy` and `scale`, which stop 42 alone built.
    assert f.warm(f.new, bundle, cuda=False) == [STORED.format(bundle, 2, 0)]
    assert f.warm(f.new, bundle, cuda=False) == [STORED.format(bundle, 0, 0)]
    # Today's write-back of what it was served (stop 42's ops) and built, at one time.
    one = f.folder / "one.warm"
    shutil.copy(f.folder / "pyc-old.warm", one)
    f.serve(f.old, one, PART="ab", **write)
    before = _times(one)
    assert f.serve(f.new, one, **write) == dict(cold, compiled=2, tuned=TUNED[1:4])
    after = _times(one)
    moved = {t for k, t in after[0].items() if t != before[0].get(k)}
    assert len(moved) == 1 and len(after[0]) == 15, (before, after)
    assert set(after[1].values()) - set(before[1].values()) == moved
    assert f.serve(f.old, one, **STRICT) == dict(cold, compiled=0, tuned=[])


@pytest.mark.parametrize("signer", ["new", "old"])
def test_signed_by_one_served_trusted_by_the_other(
    fleet: tuple[Fleet, dict[str, object]], signer: str
) -> None:
    f, cold = fleet
    code, other, name = _other(f, signer)
    bundle, key = f.folder / f"signed-{signer}.warm", f.folder / f"{signer}.key"
    shutil.copy(f.folder / f"{name}.warm", bundle)
    f.ok(code, "keygen", key)
    f.ok(code, "sign", bundle, "--key", key)
    trusted = {"WARM_TRUSTED_KEYS": f"{key}.pub"}
    assert "valid, trusted" in f.ok(other, "verify", bundle, **trusted)
    f.ok(other, "check", bundle, **trusted)
    assert f.serve(other, bundle, **STRICT, **trusted) == dict(cold, compiled=0, tuned=[])
    # Each re-warming it in turn, signing: the other, whose bundle it is, stores nothing;
    # the signer builds the host kernels it launches once more (its own keys since warm 46),
    # then nothing new; still wholly trusted.
    more = _launched(bundle, *LAUNCHED)
    for warm, new in ((other, 0), (code, more), (code, 0)):
        done = f.warm(warm, bundle, "--key", key, cuda=False, **trusted)
        assert done == [STORED.format(bundle, new, 0)]
        assert "valid, trusted" in f.ok(warm, "verify", bundle, **trusted)


def test_a_changed_nested_header_is_a_miss_each_explains_in_the_others_bundle(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """`more.h`, which `ops.h` includes, edited: each names it in the other's bundle."""
    f, _ = fleet
    changed = f.folder / "changed"
    shutil.copytree(f.folder / "inc", changed / "inc")
    (changed / "inc" / "more.h").write_text("#define ALPHA 5.0f\n")
    shutil.copy(f.workload, changed / "wl.py")
    for code, name in ((f.new, "old"), (f.old, "new")):
        bundle = f.folder / f"{name}.warm"
        done = f.cli(code, "verify", "--workload", changed / "wl.py", bundle, "--explain-misses")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert "corrupt" not in done.stdout + done.stderr, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        misses = [ln for ln in lines if ln.startswith("miss: kernel")]
        assert len(misses) == 4 and all(ln.endswith(" (changed: more.h)") for ln in misses)
        assert all("headers: bundle has sha256" in ln for ln in misses), misses
        tunes = [ln for ln in lines if ln.startswith("miss: tune")]
        assert [ln.split()[2] for ln in tunes] == ["axpy", "scale"], lines
        assert all("or a header it includes) is not the bundle's" in ln for ln in tunes)


def test_hex_str_keys_and_an_absolute_pre_include_key_alike_and_serve_both(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """(From test_upgrade41: stop 42 made both changes since stop 41.) A tune keyed by a str
    spelling a list with a huge int's hex, one by a str holding it not first, kernels
    pre-including `-include /abs/pre.h`: the same tune keys, the same kernels (keyed apart by
    toolchain since warm 46), the header named `pre.h`, each serving the other's bundle and
    re-warming it (its own builds of the picks, then nothing); a changed `pre.h` explained so
    by each."""
    f, _ = fleet
    pre, made = f.folder / "pre.py", {}
    cold = f.serve(f.new, None, pre)
    assert cold["compiled"] == 2 and cold["tuned"] == ["t_hex", "t_kept"], cold
    assert f.serve(f.old, None, pre) == cold
    for code, name in ((f.old, "old"), (f.new, "new")):
        made[name] = f.folder / f"pre-{name}.warm"
        done = f.ok(code, "run", pre, "-b", made[name], "-q").splitlines()[0]
        assert done == STORED.format(made[name], 2, 2), done
    _host_keys_apart(made["new"], made["old"])
    for name in ("new", "old"):
        with sqlite3.connect(made[name]) as db:
            rows = [json.loads(c) for (c,) in db.execute("SELECT components FROM kernels")]
        named = sorted(h[0] for c in rows for h in json.loads(c.get("header_files", "[]")))
        assert named == ["pre.h"] * 2, (name, named)
    changed = f.folder / "changed-pre"
    (changed / "inc").mkdir(parents=True)
    (changed / "inc" / "pre.h").write_text("#define VAL 5.0f\n")
    shutil.copy(pre, changed / "pre.py")
    for code, name in ((f.new, "old"), (f.old, "new")):
        assert f.serve(code, made[name], pre, **STRICT) == dict(cold, compiled=0, tuned=[])
        # Re-warmed, its own builds of the picks beside the other's, then nothing.
        more = _launched(made[name])
        for new in (more, 0):
            done = stored(f.ok(code, "run", pre, "-b", made[name], "-q"))
            assert done == STORED.format(made[name], new, 0), done
        explained = f.cli(
            code, "verify", "--workload", changed / "pre.py", made[name], "--explain-misses"
        )
        out = explained.stdout + explained.stderr
        assert explained.returncode == 1 and "Traceback" not in out and "corrupt" not in out
        misses = [ln for ln in explained.stdout.splitlines() if ln.startswith("miss: kernel")]
        assert len(misses) == 2 and all(ln.endswith(" (changed: pre.h)") for ln in misses), out


def test_pycuda_default_nvcc_flags_extended_key_as_the_explicit_list(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """(From test_upgrade41.) `SourceModule(options=None)` after the script extended
    `DEFAULT_NVCC_FLAGS` keys as the explicit list the other's bundle holds."""
    f, _ = fleet
    for code, name in ((f.new, "old"), (f.old, "new")):
        bundle = f.folder / f"pyc-flags-{name}.warm"
        shutil.copy(f.folder / f"pyc-{name}.warm", bundle)
        assert f.pycuda(code, bundle, FLAGS="default") == STORED.format(bundle, 0, 0)


def test_stop_41s_header_mark_is_paired_by_content_else_changed() -> None:
    """(From test_upgrade41: stop 41's bundles are still about.) Pure logic: a held list
    naming `<header>` (stop 41's) beside this process's `pre.h`."""
    from warmcli.runtime.shown import changed_headers

    def files(*pairs: tuple[str, str]) -> dict[str, str]:
        return {"header_files": json.dumps([list(p) for p in pairs])}

    held = [files(("<header>", "aaaa"), ("x.h", "1111"))]
    assert changed_headers(held, files(("pre.h", "aaaa"), ("x.h", "2222"))) == " (changed: x.h)"
    assert changed_headers(held, files(("pre.h", "bbbb"), ("x.h", "1111"))) == " (changed: pre.h)"
    assert changed_headers(held, files(("pre.h", "aaaa"), ("x.h", "1111"))) == ""
    both = files(("pre.h", "bbbb"), ("y.h", "3333"), ("x.h", "1111"))
    assert changed_headers(held, both) == " (changed: pre.h; new: y.h)"


class _Store(BaseHTTPRequestHandler):
    """Serves `body` at any path, with its sha256 as ETag (304 to a matching If-None-Match);
    counts the downloads (200s) by path, query included."""

    body: ClassVar[bytes] = b""
    downloads: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:
        etag = '"' + hashlib.sha256(self.body).hexdigest() + '"'
        if self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.end_headers()
            return
        self.downloads[self.path] = self.downloads.get(self.path, 0) + 1
        self.send_response(200)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_url_with_a_query_is_one_kept_copy_to_both(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """(From test_upgrade41, where stop 41 kept a copy by the whole URL.) Both keep a URL's
    copy by the URL less its query's signing fields: a presigned URL, and one whose query
    signs nothing (`?name=`), is downloaded once, then each asks and serves the other's
    kept copy."""
    f, cold = fleet
    store = type(
        "Store", (_Store,), {"body": (f.folder / "new.warm").read_bytes(), "downloads": {}}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), store)
    threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,)).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        signed = "/b.warm?name=fleet&X-Amz-Signature=ab12&X-Amz-Date=20261205T000000Z"
        for path in (signed, "/c.warm?name=fleet"):
            seen = []
            for code in (f.old, f.new, f.old):
                assert f.serve(code, base + path, **STRICT) == dict(cold, compiled=0, tuned=[])
                seen.append(store.downloads.get(path, 0))
            assert seen == [1, 1, 1], (path, seen)
    finally:
        server.shutdown()
        server.server_close()
