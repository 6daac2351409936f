"""Review of shards36's run record, through the real CLI (subprocesses, the system cc,
SQLite files): a run into a bundle whose manifest warm cannot read stores, verifies and
signs as before the record (it ended in exit 2, unsigned, after storing); a whole run into
a bundle holding another run's shard records no run it cannot vouch for (a merge then said
a shard it held was missing, exit 1). Shard 0/2 of the example, where a test starts from
it alone, is warmed once for the module and copied.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import ForkedWarm, Servers, forked_warm  # noqa: F401  (conftest's `warm`, forked)

MATMUL = EXAMPLES / "matmul_host.py"
MANY = EXAMPLES / "many_kernels_host.py"


@pytest.fixture(scope="module")
def shard_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> Path:
    """`warm run MATMUL --shard 0/2 -b x.warm -q` once for the module (forked, a home of its
    own): the bundle a test copies where it ran that first."""
    base = tmp_path_factory.mktemp("shard")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    ok(warm("run", MATMUL, "--shard", "0/2", "-b", base / "x.warm", "-q"))
    return base / "x.warm"


def ok(proc: object) -> None:
    code, stdout, stderr = (getattr(proc, n) for n in ("returncode", "stdout", "stderr"))
    assert code == 0 and "Traceback" not in stderr, stdout + stderr


@pytest.mark.parametrize("key", ["run", "zzz"])
def test_run_into_a_bundle_with_an_unreadable_manifest_row_stores_and_signs(
    warm: Warm, tmp_path: Path, key: str
) -> None:
    """A manifest row warm cannot read (too long, from elsewhere: its own `run` or any other)
    made `warm run` store, then fail in one line with exit 2 (no verify, no signature)."""
    bundle, private = tmp_path / "b.warm", tmp_path / "k"
    ok(warm("keygen", private))
    ok(warm("run", MATMUL, "--shard", "0/2", "-b", bundle, "-q", "--key", private))
    with sqlite3.connect(bundle) as conn:
        conn.execute("INSERT OR REPLACE INTO manifest VALUES (?, ?)", (key, "x" * 100_000))
    proc = warm("run", MATMUL, "--shard", "1/2", "-b", bundle, "--key", private)
    ok(proc)
    assert "verify:" in proc.stdout and "signed by key" in proc.stdout, proc.stdout
    trusted = warm.with_env(WARM_TRUSTED_KEYS=f"{private}.pub")
    proc = trusted("verify", bundle)
    assert "not signed by a trusted key" not in proc.stdout, proc.stdout


def test_whole_run_into_a_bundle_holding_a_shard_records_no_run(
    warm: Warm, tmp_path: Path, shard_once: Path
) -> None:
    """x holds shard 0/2 of matmul, then a whole run of another workload: merged with shard
    1/2, matmul is whole, yet the merge said 'shard 0/2 missing' (x recorded the other run
    as all it held) and exited 1."""
    x, y, out = tmp_path / "x.warm", tmp_path / "y.warm", tmp_path / "xy.warm"
    shutil.copyfile(shard_once, x)  # shard 0/2 of MATMUL, warmed
    ok(warm("run", MANY, "-b", x, "-q"))
    ok(warm("run", MATMUL, "--shard", "1/2", "-b", y, "-q"))
    proc = warm("merge", x, y, "-o", out)
    ok(proc)
    assert "missing" not in proc.stderr, proc.stderr


def test_whole_run_again_into_its_own_bundle_stays_whole(
    warm: Warm, tmp_path: Path, shard_once: Path
) -> None:
    """The same run again (or after its shards) still records the run, whole."""
    x, y, out = tmp_path / "x.warm", tmp_path / "y.warm", tmp_path / "xy.warm"
    shutil.copyfile(shard_once, x)  # shard 0/2 of MATMUL, warmed
    ok(warm("run", MATMUL, "-b", x, "-q"))
    ok(warm("run", MATMUL, "--shard", "1/3", "-b", y, "-q"))
    proc = warm("merge", x, y, "-o", out)
    ok(proc)  # x holds the run whole: nothing missing
    with sqlite3.connect(out) as conn:
        (value,) = conn.execute("SELECT value FROM manifest WHERE key = 'run'").fetchone()
    assert '"count": 1' in value, value


LINKED_BY_MACRO = '''
import numpy as np
from warmcli import Kernel
ONE = r"""
#define LINK extern "C"
LINK __device__ int hits;
LINK __global__ void %s(int *out) { hits += 1; out[0] = hits; }
"""
BLOCK = r"""
#define OPEN_C extern "C" {
#define CLOSE_C }
OPEN_C
__device__ int hits2;
__global__ void %s(int *out) { hits2 += 1; out[0] = hits2; }
CLOSE_C
"""
KS = [Kernel(ONE % n, n, "P", language="cuda") for n in ("bump_a", "bump_b")]
KS += [Kernel(BLOCK % n, n, "P", language="cuda") for n in ("bump_c", "bump_d")]
def workload(rt):
    out = rt.upload(np.zeros(1, np.int32))
    for k in KS:
        rt.launch(k, out, grid=1, block=1)
    return out
'''


def test_a_global_given_c_linkage_by_a_macro_is_never_one_symbol_of_two_kernels(
    warm: Warm, tmp_path: Path
) -> None:
    """`#define LINK extern "C"` (or a macro opening an `extern "C" {` block): two kernels'
    `__device__ int hits;` were one `.global hits` in their shared cubin (a hit counted 2
    where each kernel, cold, counts 1). Each such kernel is built in a cubin of its own."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    script, bundle = tmp_path / "linked.py", tmp_path / "b.warm"
    script.write_text(LINKED_BY_MACRO)
    ok(warm("run", script, "--arch", "sm_90", "-j", "1", "-b", bundle, "--no-verify", "-q"))
    with sqlite3.connect(bundle) as conn:
        rows = conn.execute(
            "SELECT k.entry, k.sha256 FROM kernels k JOIN blobs b ON b.sha256 = k.sha256 "
            "WHERE substr(b.data, 1, 4) = x'7f454c46'"  # the cubins (ELF), not the PTX
        ).fetchall()
    cubin = dict(rows)
    assert set(cubin) == {"bump_a", "bump_b", "bump_c", "bump_d"}, rows
    assert cubin["bump_a"] != cubin["bump_b"] and cubin["bump_c"] != cubin["bump_d"], rows


KERNEL_MACRO = '''
import numpy as np
from warmcli import Kernel
SRC = r"""
#define KERNEL extern "C" __global__
KERNEL void %s(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] += %d.0f; }
"""
KS = [Kernel(SRC % ("add%d" % i, i), "add%d" % i, "Pi", language="cuda") for i in range(4)]
def workload(rt):
    x = rt.upload(np.zeros(256, np.float32))
    for k in KS:
        rt.launch(k, x, 256, grid=1, block=256)
    return x
'''


def test_kernels_declared_by_a_kernel_macro_still_share_one_cubin(
    warm: Warm, tmp_path: Path
) -> None:
    """`#define KERNEL extern "C" __global__` declares kernels only (no global, no helper):
    pycuda36b built each such kernel alone (6 kernels: 6 compiler processes, not 1)."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    script, bundle = tmp_path / "kernels.py", tmp_path / "b.warm"
    script.write_text(KERNEL_MACRO)
    ok(warm("run", script, "--arch", "sm_90", "-j", "1", "-b", bundle, "--no-verify", "-q"))
    with sqlite3.connect(bundle) as conn:
        (entries, cubins) = conn.execute(
            "SELECT count(DISTINCT k.entry), count(DISTINCT k.sha256) FROM kernels k "
            "JOIN blobs b ON b.sha256 = k.sha256 WHERE substr(b.data, 1, 4) = x'7f454c46'"
        ).fetchone()
    assert (entries, cubins) == (4, 1)


LINKED_PAST_A_COMMENT = '''
import numpy as np
from warmcli import Kernel
ONE = r"""
extern /* C linkage */ "C" __device__ int hits;
extern "C" __global__ void %s(int *out) { hits += 1; out[0] = hits; }
"""
BLOCK = r"""
extern \\
"C" {
__device__ int hits2;
}
extern "C" __global__ void %s(int *out) { hits2 += 1; out[0] = hits2; }
"""
KS = [Kernel(ONE % n, n, "P", language="cuda") for n in ("bump_a", "bump_b")]
KS += [Kernel(BLOCK % n, n, "P", language="cuda") for n in ("bump_c", "bump_d")]
def workload(rt):
    out = rt.upload(np.zeros(1, np.int32))
    for k in KS:
        rt.launch(k, out, grid=1, block=1)
    return out
'''


def test_a_global_given_c_linkage_past_a_comment_or_a_line_splice_is_never_shared(
    warm: Warm, tmp_path: Path
) -> None:
    """`extern /* ... */ "C"`, or `extern` and `"C"` on two lines spliced, gives C linkage
    as `extern "C"` does: two kernels' `hits` were one `.global hits` in their shared cubin."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    script, bundle = tmp_path / "linked.py", tmp_path / "b.warm"
    script.write_text(LINKED_PAST_A_COMMENT)
    ok(warm("run", script, "--arch", "sm_90", "-j", "1", "-b", bundle, "--no-verify", "-q"))
    with sqlite3.connect(bundle) as conn:
        cubin = dict(
            conn.execute(
                "SELECT k.entry, k.sha256 FROM kernels k JOIN blobs b ON b.sha256 = k.sha256 "
                "WHERE substr(b.data, 1, 4) = x'7f454c46'"
            ).fetchall()
        )
    assert len(cubin) == 4, cubin
    assert cubin["bump_a"] != cubin["bump_b"] and cubin["bump_c"] != cubin["bump_d"], cubin


HOST_DEVICE_HELPER = '''
import numpy as np
from warmcli import Kernel
SRC = r"""
#define HD __host__ __device__
HD inline float sq(float v) { return v * v; }
extern "C" __global__ void %s(float *x, int n)
{ int i = threadIdx.x; if (i < n) x[i] = sq(x[i]) + %d; }
"""
KS = [Kernel(SRC % ("k%d" % i, i), "k%d" % i, "Pi", language="cuda") for i in range(4)]
def workload(rt):
    x = rt.upload(np.zeros(256, np.float32))
    for k in KS:
        rt.launch(k, x, 256, grid=1, block=256)
    return x
'''


def test_kernels_with_a_host_device_macro_helper_of_cpp_linkage_share_one_cubin(
    warm: Warm, tmp_path: Path
) -> None:
    """`#define HD __host__ __device__` on a helper outside any `extern "C"` (C++ linkage,
    kept apart by each kernel's namespace): pycuda36b built each kernel alone (4 cubins)."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    script, bundle = tmp_path / "helpers.py", tmp_path / "b.warm"
    script.write_text(HOST_DEVICE_HELPER)
    ok(warm("run", script, "--arch", "sm_90", "-j", "1", "-b", bundle, "--no-verify", "-q"))
    with sqlite3.connect(bundle) as conn:
        (entries, cubins) = conn.execute(
            "SELECT count(DISTINCT k.entry), count(DISTINCT k.sha256) FROM kernels k "
            "JOIN blobs b ON b.sha256 = k.sha256 WHERE substr(b.data, 1, 4) = x'7f454c46'"
        ).fetchone()
    assert (entries, cubins) == (4, 1)


def test_a_declaring_macro_used_with_c_linkage_still_counts() -> None:
    """Pure text: a device macro counts where a declaration of C linkage uses it (the last
    of a block with no `;`, through another macro, PyCUDA's wrap), not elsewhere."""
    from warmcli.backends.c_linkage import unrenamed_c_names
    from warmcli.pycuda.source import wrap_source

    decl = "#define DECL(n) __constant__ float n;\n"
    last = decl + 'extern "C" {\n__global__ void k(float *x) { x[0] = gain; }\nDECL(gain)\n}\n'
    assert "DECL" in unrenamed_c_names(last, "k")
    chained = decl + '#define DECL2(n) DECL(n)\nextern "C" {\nDECL2(gain)\n}\n'
    assert "DECL2" in unrenamed_c_names(chained, "k")
    helper = "#define HD __host__ __device__\nHD float sq(float v) { return v * v; }\n"
    kernel = 'extern "C" __global__ void k(float *x) { x[0] = sq(x[0]); }\n'
    assert unrenamed_c_names(helper + kernel, "k") == set()
    assert "HD" in unrenamed_c_names(wrap_source(helper + "__global__ void k(float *x) {}"), "k")
