"""trial39: a team serving inference adopts warm from the README alone.

Their server's kernels are host C kernels behind several Tunables keyed over array shapes
and dtypes (float32, float64, int32; 0-d and empty arrays, non-contiguous views), launched
from several threads on the first requests; the bundle is warmed in CI with `warm run`,
shipped read-only and served by processes that fork workers. The real CLI in a
subprocess, the real cc, real bundles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

FORKSERVER_POOL = """
import concurrent.futures as cf
import multiprocessing as mp

import numpy as np
from warmcli import Kernel

ADD = Kernel(
    "void add1(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1.0f; }", "add1", "Pi"
)


def plus(x):
    return x + 1


def workload(rt):
    y = rt.upload(np.zeros(3, np.float32))
    rt.launch(ADD, y, 3)
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("{method}")) as ex:
        assert list(ex.map(plus, [1, 2])) == [2, 3]
"""


def test_pool_workload_leaves_nothing_in_tmpdir(warm: Warm, tmp_path: Path) -> None:
    """A workload that maps over a forkserver pool (as the server's warm-up does) leaves
    nothing in TMPDIR under `warm run`, as under `python`: multiprocessing's folder of the
    forkserver's socket (`pymp-*/listener-*`) is removed when the worker ends."""
    work = tmp_path / "pool.py"
    work.write_text(FORKSERVER_POOL.replace("{method}", "forkserver"))
    # a short TMPDIR: the forkserver's socket path must fit AF_UNIX's 108 bytes, which a
    # pytest-xdist tmp_path (…/popen-gw0/test_pool_workload_…/) may not leave room for
    with tempfile.TemporaryDirectory(prefix="t39", dir="/tmp") as short:
        env = dict(warm.env, TMPDIR=short)
        proc = Warm(env)("run", work, "-b", tmp_path / "pool.warm", "--quiet")
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert sorted(os.listdir(short)) == []


TWO_TUNABLES = """
import os

import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] * MUL + ADD; }"


def launch(rt, k, y, n, *, stream=None):
    rt.launch(k, y, n, stream=stream)


def pair(mul, add):
    return {
        f"plain{mul}": Kernel(SRC, "f", "Pl", defines={"MUL": mul, "ADD": add}),
        f"other{mul}": Kernel(SRC, "f", "Pl", defines={"MUL": mul, "ADD": add, "Z": 1}),
    }


P = Tunable("P", pair(2, 1), launch)
Q = Tunable("Q", pair(3, 5), launch)
KS = [Kernel(SRC, "f", "Pl", defines={"MUL": m, "ADD": 1, "K": 1}) for m in range(1, 13)]


def run(rt, tunable, n=8):
    y = rt.upload(np.arange(n, dtype=np.float32))
    rt.tune(tunable, y, n)
    return y


def workload(rt):
    order = [P, Q] if os.environ.get("ORDER", "PQ") == "PQ" else [Q, P]
    for tunable in order:
        run(rt, tunable)
    if order[0] is Q:  # the new bundle's: a shape the old one never warmed
        run(rt, Q, 16)
    for k in KS if order[0] is P else KS[::-1]:  # built in other batches, other blobs
        rt.launch(k, rt.buffer(4, "float32"), 4)
"""

# A server that loaded the old bundle, served P, then saw a new bundle `mv`-ed over its
# path (the rollout, done here by the server itself) and forked a worker serving Q and P.
ROLLOUT_SERVER = """
import json, os, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
import tunables
live, new, pub = sys.argv[2:5]
warmcli.use_bundle(live, trusted_keys=[pub] if pub else None)
rt = warmcli.runtime()
p = rt.read(tunables.run(rt, tunables.P))
os.replace(new, live)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        child = warmcli.runtime()
        q = child.read(tunables.run(child, tunables.Q))
        p2 = child.read(tunables.run(child, tunables.P))
        q16 = child.read(tunables.run(child, tunables.Q, 16))
        said = {"q": q.tolist(), "p": p2.tolist(), "q16": q16.tolist(),
                "tunes": len(warmcli.report().tunes)}
    except Exception as exc:
        said = {"error": f"{type(exc).__name__}: {exc}"}
    os.write(w, json.dumps(said).encode())
    os._exit(0)
os.close(w)
data = b""
while chunk := os.read(r, 65536):
    data += chunk
os.waitpid(pid, 0)
print(json.dumps({"parent_p": p.tolist(), "child": json.loads(data)}))
"""


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warm, Path]:
    """Two bundles of the same two tunables, warmed in the other order (so each numbers the
    candidates' kernels otherwise), both signed by one key."""
    root = tmp_path_factory.mktemp("rollout")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    w = Warm(dict(env, WARM_HOME=str(root / "home"), COLUMNS="200"))
    (root / "tunables.py").write_text(TWO_TUNABLES)
    key = root / "ci.key"
    assert w("keygen", key).returncode == 0
    for name, order in (("old", "PQ"), ("new", "QP")):
        run = Warm(dict(w.env, ORDER=order))
        proc = run("run", root / "tunables.py", "-b", root / f"{name}.warm", "--key", key, "-q")
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return w, root


@pytest.mark.parametrize("signed", [False, True])
def test_worker_forked_after_rollout_serves_the_new_bundle(
    rollout: tuple[Warm, Path], tmp_path: Path, signed: bool
) -> None:
    """A worker forked after a new bundle was `mv`-ed over the path its server serves reads
    that new file: served whole and right, a shape only the new one holds too, under
    `WARM_STRICT=1` and trusted keys (it had read the new file's tunes by the ids of its
    parent's file, and judged them by the old file's signatures: a tune both bundles hold,
    signed, was refused as unsigned, `StrictMissError` in every such worker)."""
    w, root = rollout
    live, new = tmp_path / "live.warm", tmp_path / "incoming.warm"
    shutil.copyfile(root / "old.warm", live)
    shutil.copyfile(root / "new.warm", new)
    pub = str(root / "ci.key.pub") if signed else ""
    env = dict(w.env, WARM_STRICT="1")
    proc = subprocess.run(
        [sys.executable, "-c", ROLLOUT_SERVER, root, live, new, pub],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    x = np.arange(8, dtype=np.float32)
    assert np.array_equal(said["parent_p"], x * 2 + 1)
    assert "error" not in said["child"], said["child"]
    assert np.array_equal(said["child"]["q"], x * 3 + 5)
    assert np.array_equal(said["child"]["p"], x * 2 + 1)
    assert np.array_equal(said["child"]["q16"], np.arange(16, dtype=np.float32) * 3 + 5)
    assert said["child"]["tunes"] == 0


# The same server, its first request launching one kernel: its kernel rows are prefetched
# from the old file; the worker forked after the rollout launches every kernel.
KERNELS_SERVER = """
import json, os, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
import tunables
live, new = sys.argv[2:4]
warmcli.use_bundle(live)
rt = warmcli.runtime()
y = rt.upload(np.arange(4, dtype=np.float32))
rt.launch(tunables.KS[0], y, 4)
os.replace(new, live)
pid = os.fork()
if pid == 0:
    try:
        child = warmcli.runtime()
        got = []
        for k in tunables.KS:
            y = child.upload(np.arange(4, dtype=np.float32))
            child.launch(k, y, 4)
            got.append(child.read(y).tolist())
        said = {"got": got, "kernels": len(warmcli.report().kernels)}
    except Exception as exc:
        said = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(said), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_worker_forked_after_rollout_loads_the_new_bundles_builds(
    rollout: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Kernel rows its server prefetched from the old file name the old file's blobs: a
    worker forked after the rollout reads the new file's rows, so every kernel both bundles
    hold is served under `WARM_STRICT=1` (it looked the old blobs up in the new file: a
    `binary` miss, `StrictMissError`)."""
    w, root = rollout
    live, new = tmp_path / "live.warm", tmp_path / "incoming.warm"
    shutil.copyfile(root / "old.warm", live)
    shutil.copyfile(root / "new.warm", new)
    proc = subprocess.run(
        [sys.executable, "-c", KERNELS_SERVER, root, live, new],
        env=dict(w.env, WARM_STRICT="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert "error" not in said, said
    x = np.arange(4, dtype=np.float32)
    for m, got in enumerate(said["got"], 1):
        assert np.array_equal(got, x * m + 1)
    assert said["kernels"] == 0


KEYED = """
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void h(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] * 2 + 1; }"


def launch(rt, k, y, n, *, stream=None):
    rt.launch(k, y, n, stream=stream)


CANDIDATES = {f"v{v}": Kernel(SRC, "h", "Pl", defines={"V": v}) for v in (1, 2)}
BY_N = Tunable("by_n", CANDIDATES, launch, key=lambda y, n: n)
BY_SIZE = Tunable("by_size", CANDIDATES, launch, key=lambda y, n: (n, n > 4, n / 2))


def run(rt, n):
    y = rt.upload(np.arange(int(n), dtype=np.float32))
    rt.tune(BY_N, y, n)
    rt.tune(BY_SIZE, y, n)
    return y


def workload(rt):
    for n in (3, 6):
        run(rt, n)  # Python ints, as CI's warm-up passes them
"""

# The server computes its sizes with numpy: `np.prod` of a shape, an element of an array.
KEYED_SERVER = """
import json, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
import keyed
rt = warmcli.runtime()
got = []
for n in (np.int64(3), np.prod((2, 3)), np.int32(3), np.array([6])[0]):
    got.append(rt.read(keyed.run(rt, n)).tolist())
print(json.dumps({"got": got, "tunes": len(warmcli.report().tunes)}))
"""


def test_key_of_numpy_integers_hits_what_python_ints_warmed(warm: Warm, tmp_path: Path) -> None:
    """A `key=` that hands back the size it is given (`key=lambda x, n: n`, as the README
    shows) keys a numpy integer (or bool, or float32) as the Python number of the same
    value, as the default key does: a server passing `np.prod(shape)` is served what CI
    warmed with `n = 6` (it keyed `"6"` against the bundle's `6`: every tune a miss, a
    `StrictMissError` under `WARM_STRICT=1`)."""
    (tmp_path / "keyed.py").write_text(KEYED)
    bundle = tmp_path / "k.warm"
    proc = warm("run", tmp_path / "keyed.py", "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    served = subprocess.run(
        [sys.executable, "-c", KEYED_SERVER, tmp_path],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr
    said = json.loads(served.stdout)
    for n, got in zip((3, 6, 3, 6), said["got"], strict=True):
        assert np.array_equal(got, np.arange(n, dtype=np.float32) * 4 + 3)  # tuned twice
    assert said["tunes"] == 0


def test_bucket_with_a_key_callable_is_refused_where_made(warm: Warm, tmp_path: Path) -> None:
    """`bucket="pow2"` rounds the default key's sizes: beside a `key=` callable it rounded
    nothing, silently (every size its own tune, a miss in production for a size CI never
    ran), so the pair is refused where the Tunable is made, in one line."""
    work = tmp_path / "bucketed.py"
    work.write_text(KEYED.replace("key=lambda y, n: n)", 'key=lambda y, n: n, bucket="pow2")', 1))
    proc = warm("run", work, "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    assert "tunable by_n: bucket='pow2' rounds the default key's sizes" in proc.stderr
