"""Review of leftovers42b and trial42a: PyCUDA record arrays staged by drv.In/Out/InOut,
a thread ended by what only the pass refuses through a chained exception, the soft lock's
wait said as flock's is, and the stand-in PointerHolderBase's pointer as PyCUDA takes it.

Real parts: the real CLI in subprocesses (a GPU-less `--pycuda --arch sm_90` pre-build with
the real NVRTC), real numpy arrays, the real `filelock` soft lock held by another process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_leftovers42b import THREADED as THREADED_42B

from warmcli.backends.cuda.nvrtc import find_nvrtc

needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

# -- drv.In/Out/InOut of an array of records ----------------------------------------------

RECORDS = '''
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda import gpuarray
from pycuda.compiler import SourceModule

SRC = """
struct P { char c; double d; };
__global__ void v(float4 *x, P *p) { x[0] = make_float4(1, 2, 3, 4); p[0].d = 1; }
"""

def workload(rt):
    f = SourceModule(SRC).get_function("v")
    a = np.zeros(8, gpuarray.vec.float4)
    padded = np.zeros(3, np.dtype([("c", np.int8), ("d", np.float64)], align=True))
    f(drv.InOut(a), drv.In(padded), block=(1, 1, 1))
    f(drv.Out(a), drv.InOut(padded), block=(1, 1, 1))
'''


@needs_nvrtc
def test_staged_arrays_of_records_prebuild(warm: Warm, tmp_path: Path) -> None:
    """`f(drv.InOut(np.zeros(8, gpuarray.vec.float4)), drv.In(padded_structs))`, which
    PyCUDA copies as its bytes, failed with a bare `TypeError: data type 'void128' not
    understood` (the staged path made a Buffer of the record dtype's name): the fix to
    foreign.wrap (leftovers42b) covered only GPUArrays and `__cuda_array_interface__`."""
    script = tmp_path / "records.py"
    script.write_text(RECORDS)
    bundle = tmp_path / "r.warm"
    reads = "--allow-discarded-reads"  # (InOut reads back: zeros here, no GPU)
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", reads, "-q", "-b", bundle)
    assert proc.returncode == 0, proc.stderr
    assert warm.json("stats", bundle)["kernels"]  # built and stored


def _records() -> list[np.ndarray]:
    float4 = np.dtype([(f, np.float32) for f in "xyzw"])
    padded = np.dtype([("c", np.int8), ("d", np.float64)], align=True)
    mixed = np.dtype([("i", np.int32), ("f", np.float32), ("h", np.int16)])
    nested = np.dtype([("p", padded), ("v", float4), ("k", np.uint8)])
    rng = np.random.default_rng(0)
    found = []
    for dtype in (float4, padded, mixed, nested):
        a = np.zeros(6, dtype)
        a.view(np.uint8)[...] = rng.integers(0, 256, a.nbytes, dtype=np.uint8)
        found.append(a)
    fortran = np.asfortranarray(np.zeros((3, 2), nested))
    fortran.reshape(-1, order="A").view(np.uint8)[...] = rng.integers(0, 256, fortran.nbytes)
    return [*found, fortran]


def test_a_staged_record_array_is_held_as_its_bytes_byte_for_byte() -> None:
    """What warm uploads for a staged array of records is the array's bytes as they lie
    (padding included, C or Fortran order), as PyCUDA's memcpy_htod copies them; what it
    downloads lands in those same bytes."""
    from warmcli.backends.base import Buffer
    from warmcli.backends.cuda.foreign import held_view

    for array in _records():
        view = held_view(array)
        assert view.dtype.kind in "biufc" and np.shares_memory(view, array)
        assert view.tobytes() == array.tobytes(order="A")  # PyCUDA's bytes, byte for byte
        assert Buffer("x", view.shape, view.dtype.name).nbytes == array.nbytes
        fresh = np.frombuffer(np.random.default_rng(1).bytes(array.nbytes), view.dtype)
        view[...] = fresh.reshape(view.shape)  # a download into the array
        assert array.tobytes(order="A") == fresh.tobytes()
    with pytest.raises(Exception, match="object"):
        held_view(np.array([object()] * 2))


# -- a thread ended by what only the pass refuses ------------------------------------------

THREADED = "import concurrent.futures\n" + THREADED_42B  # its threads, and a pool
CHAINED = """try:
        drv.get_driver_version()
    except drv.Error as exc:
        raise RuntimeError("no driver") from exc"""
HANDLED = """try:
        drv.get_driver_version()
    except drv.Error:
        raise RuntimeError("no driver")"""
CAUGHT = """try:
        drv.get_driver_version()
    except Exception:
        pass"""


@needs_nvrtc
@pytest.mark.parametrize("want_gpu", [CHAINED, HANDLED])
def test_a_thread_ended_by_an_error_raised_for_the_pass_own_fails_the_prebuild(
    warm: Warm, workload_file: Any, tmp_path: Path, want_gpu: str
) -> None:
    """A thread that caught the stand-in's 'needs a GPU' and raised its own error from it
    (or while handling it) died of what only the pass refuses, as one that let it through
    does (leftovers42b); it was a note, and the run stored nothing, called the bundle
    complete and exited 0."""
    script = workload_file(THREADED.replace("WANT_GPU", want_gpu), "threaded.py")
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", tmp_path / "t.warm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "workload raised during CompileOnly in thread w" in line, line
    assert "RuntimeError: no driver" in line and "needs a GPU" in line, line
    assert "complete" not in proc.stdout


@needs_nvrtc
def test_a_thread_that_catches_the_want_of_a_gpu_and_goes_on_passes(
    warm: Warm, workload_file: Any, tmp_path: Path
) -> None:
    script = workload_file(THREADED.replace("WANT_GPU", CAUGHT), "threaded.py")
    bundle = tmp_path / "t.warm"
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", bundle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert warm.json("stats", bundle)["kernels"]


# -- the soft lock's wait, said as flock's is ---------------------------------------------

SOFT_HOLDER = """
import sys, time
from pathlib import Path
from filelock import SoftFileLock

lock = SoftFileLock(sys.argv[1])
lock.acquire()
Path(sys.argv[2]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.05)
lock.release()
"""


def test_the_soft_lock_says_a_wait_past_two_seconds_as_flock_does(tmp_path: Path) -> None:
    """Where flock is missing, a writer waiting for another's soft lock waited without a
    word, for ever (leftovers42b told only flock's waits): it says the same one line now,
    once, and keeps waiting until the holder lets go."""
    import threading

    from warmcli.bundle.lock import _soft_lock, told_of_waits

    bundle, held, release = tmp_path / "b.warm", tmp_path / "held", tmp_path / "release"
    name = f"{bundle}.softlock"
    holder = subprocess.Popen([sys.executable, "-c", SOFT_HOLDER, name, str(held), str(release)])
    try:
        deadline = time.monotonic() + 30
        while not held.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        said: list[str] = []
        taken = threading.Event()

        def take() -> None:
            with told_of_waits(said.append), _soft_lock(bundle, name):
                taken.set()

        began = time.monotonic()
        waiter = threading.Thread(target=take)
        waiter.start()
        while not said:
            assert time.monotonic() - began < 20, "never said"
            time.sleep(0.05)
        assert time.monotonic() - began >= 2.0 and not taken.is_set()
        assert said == [f"waiting for another warm writing {bundle} to finish"]
        release.touch()
        waiter.join(30)
        assert taken.is_set() and len(said) == 1
    finally:
        release.touch()
        holder.wait(30)


# -- the stand-in PointerHolderBase's pointer, as PyCUDA converts it ------------------------


@pytest.mark.parametrize("pointer", [1.5, np.uint64(16), -16, 2**64, "16", None], ids=repr)
def test_a_pointer_holders_pointer_is_a_python_int_of_64_bits_as_pycudas(pointer: Any) -> None:
    """PyCUDA converts `get_pointer()`'s answer to a CUdeviceptr (Boost.Python: a Python
    int, 0 to 2**64 - 1; a float or a numpy integer is a TypeError, one out of range an
    OverflowError). The stand-in took `int()` of anything: 1.5 was the address 1, -16 and
    2**64 were passed on, so a pre-build passed a script that fails on a GPU."""
    from warmcli.pycuda import PyCudaError
    from warmcli.pycuda.standins import modules

    drv = modules()["pycuda.driver"]

    class Holder(drv.PointerHolderBase):  # type: ignore[misc, name-defined]
        def __init__(self, given: Any) -> None:
            super().__init__()
            self.given = given

        def get_pointer(self) -> Any:
            return self.given

    with pytest.raises(PyCudaError, match=r"Holder\.get_pointer\(\) gave .*: PyCUDA"):
        int(Holder(pointer))
    assert int(Holder(2**64 - 1)) == 2**64 - 1 and int(Holder(0)) == 0
    assert Holder(4096).__index__() == 4096


def test_vec_makers_take_their_fields_by_name_as_pycudas() -> None:
    """PyCUDA's `make_float4` is `lambda x, y, z, w: array((x, y, z, w), dtype=...)`: its
    fields may be named (`make_float2(x=1, y=2)`); the stand-in's took positions only."""
    from warmcli.pycuda.standin_vec import vec

    assert vec.make_float2(x=1, y=2).tobytes() == vec.make_float2(1, 2).tobytes()
    assert vec.make_int4(1, 2, w=4, z=3).tobytes() == np.array([1, 2, 3, 4], np.int32).tobytes()
    assert vec.make_float4(1, 2, 3, 4).dtype == vec.float4
    for bad in ((1,), (1, 2, 3)):
        with pytest.raises(TypeError):
            vec.make_float2(*bad)
    with pytest.raises(TypeError):
        vec.make_float2(1, x=2)


REPLACING_HOLDER = """
import fcntl, os, sys, time
from pathlib import Path

name, held, told, release, hold = sys.argv[1:]
first = os.open(name, os.O_RDWR | os.O_CREAT)
fcntl.flock(first, fcntl.LOCK_EX)
Path(held).touch()
while not Path(told).exists():
    time.sleep(0.05)
os.unlink(name)  # a writer's remove_new: the waiter's file is no longer the lock
second = os.open(name, os.O_RDWR | os.O_CREAT)
fcntl.flock(second, fcntl.LOCK_EX)
fcntl.flock(first, fcntl.LOCK_UN)
deadline = time.monotonic() + float(hold)  # the waiter waits on the new file past TOLD_AFTER
while not Path(release).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
fcntl.flock(second, fcntl.LOCK_UN)
"""


def test_a_wait_through_a_replaced_lock_file_is_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer waiting on a lock file that its holder removed and made anew (remove_new)
    takes the new file by its name and waits again: it said 'waiting for another warm'
    once per file, twice in one wait. (A wait is told past `TOLD_AFTER`, 2 s: 0.5 s here,
    where what is tested is the once; the new file held 1.5 s past it, as before.)"""
    import threading

    from warmcli.bundle import lock
    from warmcli.bundle.lock import told_of_waits, write_lock

    monkeypatch.setattr(lock, "TOLD_AFTER", 0.5)
    bundle = tmp_path / "b.warm"
    held, told, release = (tmp_path / n for n in ("held", "told", "release"))
    args = [f"{bundle}.lock", str(held), str(told), str(release), "2.0"]
    holder = subprocess.Popen([sys.executable, "-c", REPLACING_HOLDER, *args])
    try:
        deadline = time.monotonic() + 30
        while not held.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        said: list[str] = []
        taken = threading.Event()

        def tell(line: str) -> None:
            said.append(line)
            told.touch()

        def take() -> None:
            with told_of_waits(tell), write_lock(bundle):
                taken.set()

        waiter = threading.Thread(target=take)
        waiter.start()
        waiter.join(30)
        assert taken.is_set() and holder.wait(30) == 0
        assert len(said) == 1, said
        assert said[0].startswith(f"waiting for another warm writing {bundle} (pid ")
    finally:
        release.touch()
        holder.wait(30)


def test_make_context_takes_pycudas_ctx_flags() -> None:
    """`dev.make_context(drv.ctx_flags.SCHED_BLOCKING_SYNC)`, PyCUDA's usual way to pass
    flags, failed as 'pycuda.driver.ctx_flags: not in warm's stand-in': leftovers42b's
    make_context took flags but the stand-in had none to give it. Values are cuda.h's."""
    from warmcli import ProcessMode, ProcessModeOverride
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.pycuda import bound_runtime
    from warmcli.pycuda.standins import modules
    from warmcli.runtime.runtime import Runtime

    drv = modules()["pycuda.driver"]
    flags = drv.ctx_flags
    expected = dict(SCHED_AUTO=0, SCHED_SPIN=1, SCHED_YIELD=2, SCHED_BLOCKING_SYNC=4)
    expected.update(BLOCKING_SYNC=4, SCHED_MASK=7, MAP_HOST=8, LMEM_RESIZE_TO_MAX=16)
    assert {n: getattr(flags, n) for n in expected} == expected and flags.FLAGS_MASK == 0xFF
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        ctx = drv.Device(0).make_context(flags.SCHED_BLOCKING_SYNC | flags.MAP_HOST)
        assert ctx.get_device().compute_capability() == (9, 0)
