"""Bugs found by review34b, each through the real CLI over a real bundle made by `warm run`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# One entry built with two defines: each build's cubin and PTX are rows of one entry.
TWO_FACTORS = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" __global__ void scale(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * FACTOR;
}
"""
K2 = Kernel(SRC, "scale", "Pi", language="cuda", defines={"FACTOR": 2})
K3 = Kernel(SRC, "scale", "Pi", language="cuda", defines={"FACTOR": 3})
def workload(rt):
    y = rt.buffer(64)
    rt.launch(K2, y, 64, grid=1, block=64)
    rt.launch(K3, y, 64, grid=1, block=64)
'''


def _swap_ptx_keys(bundle: Path, label_a: str, label_b: str) -> None:
    """Two PTX rows' keys swapped, every other field (blob, symbol, components) kept."""
    conn = sqlite3.connect(bundle)
    query = "SELECT key FROM kernels WHERE label = ? AND arch LIKE 'compute_%'"
    (a,) = conn.execute(query, (label_a,)).fetchone()
    (b,) = conn.execute(query, (label_b,)).fetchone()
    conn.execute("UPDATE kernels SET key = 'swapping' WHERE key = ?", (a,))
    conn.execute("UPDATE kernels SET key = ? WHERE key = ?", (a, b))
    conn.execute("UPDATE kernels SET key = ? WHERE key = 'swapping'", (b,))
    conn.commit()
    conn.close()


def test_a_ptx_row_under_another_builds_key_is_never_served_for_it(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """fuzz34 tied a cubin row's symbol to its key, but a PTX row only to its entry: the PTX
    of scale[FACTOR=2] moved under scale[FACTOR=3]'s PTX key was served to a newer GPU
    (the driver JITs it, finding its symbol there) as FACTOR=3's build: `warm verify
    --workload --arch sm_90` counted both kernels loaded by PTX JIT, the bundle complete.
    A PTX row's symbol is its cubin's, whose key is the kernel's for an sm arch: served only
    where the kernel's own key for such an arch gives that symbol."""
    workload = workload_file(TWO_FACTORS)
    bundle = tmp_path / "b.warm"
    built = warm("run", workload, "--arch", "sm_80", "-b", bundle, "-q")
    assert built.returncode == 0, built.stderr
    sound = warm.json("verify", bundle, "--workload", workload, "--arch", "sm_90")
    assert sound["verified"] is True and sound["compilation"]["ptx_jit"] == 2, sound
    _swap_ptx_keys(bundle, "scale[FACTOR=2]", "scale[FACTOR=3]")
    replay = warm("verify", bundle, "--workload", workload, "--arch", "sm_90")
    assert replay.returncode == 1, replay.stdout
    # integrity35: each row's key is recomputed from its components now, so verify calls
    # them corrupt before the replay (test_integrity35 replays production over them too)
    assert replay.stdout.count("key: not the key of kernel") == 2, replay.stdout
    assert "Traceback" not in replay.stderr


def test_ptx_of_another_arch_than_its_cubins_is_still_served(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """The PTX row's symbol is looked for among the kernel's keys for any sm arch: PTX kept
    for a newer arch than the cubins (`--arch sm_80 --ptx compute_90`) or beside an
    arch-specific one's (`--arch sm_90a`) is served to a newer GPU as before."""
    workload = workload_file(TWO_FACTORS)
    for i, args in enumerate((("sm_80", "--ptx", "compute_90"), ("sm_90a",))):
        bundle = tmp_path / f"b{i}.warm"
        built = warm("run", workload, "--arch", *args, "-b", bundle, "-q")
        assert built.returncode == 0, built.stderr
        doc = warm.json("verify", bundle, "--workload", workload, "--arch", "sm_100")
        assert doc["verified"] is True and doc["compilation"]["ptx_jit"] == 2, doc


NATIVE_WORKLOAD = """
import numpy as np
from warmcli import Kernel
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] * 2 + 1; }",
           "k", "Pl", options=("-march=native",))
def workload(rt):
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(K, y, 4)
"""


def test_a_kernel_tuned_for_this_cpu_is_served_by_a_raised_recipe(
    warm: Warm, tmp_path: Path
) -> None:
    """A kernel built with -march=native is keyed with the CPU after the toolchain identity
    (`cc:... [warm build recipe 2] +native <cpu>`): `recipe_of` read the recipe only at the
    identity's end, so once `BUILD_RECIPE` is raised such a build was of recipe 0 and never
    served, even by the warm that made it (compiled again in every production process)."""
    from test_build_recipe34 import _serve, _warm

    (tmp_path / "w.py").write_text(NATIVE_WORKLOAD)
    bundle = tmp_path / "two.warm"
    done = _warm(warm, True, "run", tmp_path / "w.py", "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _serve(warm, True, tmp_path, bundle) == {"y": 3.0, "compiled": 0}
    assert _serve(warm, False, tmp_path, bundle) == {"y": 3.0, "compiled": 1}
    checked = _warm(warm, True, "check", bundle)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_an_entry_whose_symbol_no_bundle_holds_is_refused_where_the_kernel_is_made(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A kernel row's symbol is `warm_<key[:16]>_<entry>`, 22 characters more than its entry,
    and a bundle holds names of at most 4,096: an entry of 4,075 to 4,096 characters was
    built and stored as a row warm itself calls corrupt (`warm run` exit 1, `warm verify`:
    'symbol: 4108 characters, over the limit'). It is refused as the Kernel is made."""

    from warmcli import Kernel

    longest = "k" * 4074
    Kernel(f"void {longest}(float *y) {{ y[0] = 1; }}", longest, "P")
    with pytest.raises(ValueError, match="4075 characters"):
        Kernel("void f(float *y) { y[0] = 1; }", longest + "k", "P")
    entry = "k" * 4086
    workload = workload_file(
        "from warmcli import Kernel\n"
        f"K = Kernel('void {entry}(float *y) {{ y[0] = 1; }}', '{entry}', 'P')\n"
        "def workload(rt):\n    rt.launch(K, rt.buffer(1))\n"
    )
    bundle = tmp_path / "long.warm"
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 2 and "4086 characters" in done.stderr, done.stderr[-600:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not bundle.exists()


SHARED = """
from warmcli import Kernel
K = Kernel('extern "C" __global__ void k(float *y) {{ extern __shared__ float s[]; '
           's[threadIdx.x] = 1.0f; y[threadIdx.x] = s[threadIdx.x]; }}', "k", "P",
           language="cuda")
def workload(rt):
    y = rt.buffer(32)
    rt.launch(K, y, grid=1, block=32, shared={shared})
"""


def test_dynamic_shared_memory_no_gpu_takes_fails_the_prebuild(warm: Warm, tmp_path: Path) -> None:
    """A launch's dynamic shared memory over 48 KiB is refused by every GPU unless its
    function opts in (`cuFuncSetAttribute`), which warm never does (and its PyCUDA
    `set_attribute` is refused): `shared=65536` passed `warm run --arch sm_90` (exit 0, a
    bundle written) as 5957d44's other sizes did, to fail production's first launch."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    for shared, code in ((65536, 2), (49152, 0)):
        (tmp_path / "w.py").write_text(SHARED.format(shared=shared))
        bundle = tmp_path / f"b{shared}.warm"
        done = warm("run", tmp_path / "w.py", "--arch", "sm_90", "-b", bundle, "-q")
        assert done.returncode == code, done.stdout[-1000:] + done.stderr[-1000:]
        if code:
            assert "shared memory 65536 bytes" in done.stderr, done.stderr
            assert "Traceback" not in done.stderr and not bundle.exists()


WRAPPED = """
import json
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
from warmcli.backends.host.device import HostBuffer
ADD = "void %s(float *y, long n) { for (long i = 0; i < n; i++) y[i] += 1; }"
CANDIDATES = {e: Kernel(ADD % e, e, "Pl") for e in ("a", "b")}
app = np.ones(4, np.float32)  # the app's memory, wrapped afresh on every call
def launch(rt, k, n, stream=None):
    rt.launch(k, HostBuffer(rt.device.id, (4,), "float32", app), n, stream=stream)
rt = warmcli.runtime("host")
rt.tune(Tunable("acc", CANDIDATES, launch), 4)
print(json.dumps(app.tolist()))
"""


def test_memory_the_app_owns_wrapped_on_every_call_is_put_back_after_a_tune(
    warm: Warm, tmp_path: Path
) -> None:
    """e2605e4 held every buffer kept beside a tune's inputs weakly, to free a workspace the
    launch function makes on every call; but a wrapper of the app's own memory made on every
    call (as `rt.wrap(x)` in a launch function, and warm's PyCUDA arguments, make a `Buffer`
    per launch) died as well, and the memory it names was put back no more: the tune of an
    in-place `y += 1` left the app's array at 14.0 where one run (a bundle's hit) leaves 2.0.
    Only a buffer warm allocated (`rt.buffer`, `rt.upload`) is held weakly."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", WRAPPED], capture_output=True, text=True,
        env=warm.env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [2.0] * 4
