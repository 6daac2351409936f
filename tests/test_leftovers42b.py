"""Items left at stop 41: the GPU-less PyCUDA stand-ins' missing calls, the header names a
kernel's components keep, a pre-build whose threads all die for want of a GPU, and a writer
that waits on another's bundle lock without a word.

Real parts: the stand-ins on a compile-only sm_90 runtime with the real NVRTC, the real CLI
in subprocesses, real SQLite bundles and real header files.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.errors import DeviceError
from warmcli.pycuda import ArgumentError, PyCudaError, SourceModule, bound_runtime
from warmcli.runtime.runtime import Runtime

needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")
SOURCE = "__global__ void k(float *x, int n) { if (threadIdx.x < n) x[0] = 1.0f; }"
VEC = "__global__ void v(float4 *x) { x[0] = make_float4(1, 2, 3, 4); }"


def _standins() -> dict[str, Any]:
    from warmcli.pycuda.standins import modules

    return modules()


def _compile_only() -> tuple[Any, Any]:
    return bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(
        ProcessMode.COMPILE_ONLY
    )


# -- 1. the stand-ins' missing calls ------------------------------------------------------


@needs_nvrtc
def test_get_version_is_the_release_warm_builds_with() -> None:
    """PyCUDA's `get_version()` is the CUDA release it was built against, a 3-tuple; the
    stand-in's is the release of the NVRTC it builds with (nvrtcVersion's major, minor)."""
    from cuda.bindings import nvrtc

    drv = _standins()["pycuda.driver"]
    _, major, minor = nvrtc.nvrtcVersion()
    rt, mode = _compile_only()
    with rt, mode:
        assert drv.get_version() == (major, minor, 0)


def test_get_driver_version_needs_a_gpu_never_made_up() -> None:
    drv = _standins()["pycuda.driver"]
    rt, mode = _compile_only()
    with rt, mode, pytest.raises(DeviceError, match=r"get_driver_version\(\) needs a GPU.*sm_90"):
        drv.get_driver_version()


def test_make_context_gives_a_context_with_pycudas_methods() -> None:
    drv = _standins()["pycuda.driver"]
    rt, mode = _compile_only()
    with rt, mode:
        ctx = drv.Device(0).make_context()
        assert ctx.push() is None and ctx.detach() is None
        assert ctx.pop() is None and ctx.synchronize() is None
        assert drv.Context.pop() is None and drv.Context.synchronize() is None
        assert ctx.get_device().compute_capability() == (9, 0)
        with pytest.raises(PyCudaError, match="make_context"):
            drv.Device(0).make_context(1.5)


@needs_nvrtc
def test_a_pointer_holder_is_an_argument_as_pycuda_takes_one() -> None:
    """A subclass of `PointerHolderBase` (`get_pointer()`): a prepared call packs it by its
    `__index__`; PyCUDA's unprepared call takes it through its `.gpudata` only (else its
    TypeError: invalid type on parameter), and so does warm's."""
    drv = _standins()["pycuda.driver"]

    class Holder(drv.PointerHolderBase):  # type: ignore[misc, name-defined]
        def __init__(self, memory: Any) -> None:
            super().__init__()
            self.memory = memory

        def get_pointer(self) -> int:
            return int(self.memory)

    class WithData(Holder):
        def __init__(self, memory: Any) -> None:
            super().__init__(memory)
            self.gpudata = int(memory)

    rt, mode = _compile_only()
    with rt, mode:
        f = SourceModule(SOURCE).get_function("k")
        memory = drv.mem_alloc(4)
        assert int(Holder(memory)) == 0  # a stand-in allocation's pointer: null
        f.prepare("Pi").prepared_call((1, 1), (32, 1, 1), Holder(memory), np.int32(1))
        f(WithData(memory), np.int32(1), block=(32, 1, 1))
        with pytest.raises(ArgumentError, match=r"argument 1: .*Holder.*gpudata"):
            f(Holder(memory), np.int32(1), block=(32, 1, 1))
        with pytest.raises(PyCudaError, match="pure virtual"):
            int(drv.PointerHolderBase())


@needs_nvrtc
def test_gpuarray_vec_types_are_pycudas() -> None:
    gpuarray = _standins()["pycuda.gpuarray"]
    vec = gpuarray.vec
    assert vec.float4 == np.dtype([("x", np.float32), ("y", np.float32), ("z", np.float32),
                                   ("w", np.float32)])  # fmt: skip
    assert vec.make_float4(1, 2, 3, 4)["z"] == 3.0
    assert vec.long1.itemsize == 8 and vec.double2.names == ("x", "y")
    assert not hasattr(vec, "double3")  # PyCUDA's has 1 and 2 only
    with pytest.raises(TypeError):
        vec.make_int2(1)
    rt, mode = _compile_only()
    with rt, mode:
        SourceModule(VEC).get_function("v")(gpuarray.empty(4, vec.float4), block=(1, 1, 1))


def test_foreign_memory_of_records_is_its_numbers_or_bytes() -> None:
    """A GPUArray (PyCUDA's own too) or a `__cuda_array_interface__` of records (float4s,
    `|V16`) was a bare `TypeError: data type 'void128' not understood` at its launch."""
    from warmcli.backends.cuda.foreign import wrap

    gpuarray = _standins()["pycuda.gpuarray"]
    buffer = wrap(gpuarray.empty((2, 3), gpuarray.vec.float4), "sm_90")
    assert (buffer.shape, buffer.dtype) == ((2, 3, 4), "float32")
    mixed = np.dtype([("a", np.float32), ("b", np.int8)])
    buffer = wrap(gpuarray.empty(5, mixed), "sm_90")
    assert (buffer.shape, buffer.dtype) == ((5, mixed.itemsize), "uint8")

    class FakeRecords:  # a fake: an array library's interface of 16-byte records
        __cuda_array_interface__: ClassVar[dict[str, Any]] = {
            "shape": (4,),
            "typestr": "|V16",
            "data": (0, False),
        }

    buffer = wrap(FakeRecords(), "sm_90")
    assert (buffer.shape, buffer.dtype) == ((4, 16), "uint8")


@needs_nvrtc
def test_a_script_using_them_prebuilds(warm: Warm, workload_file: Any, tmp_path: Path) -> None:
    """An unmodified PyCUDA script that asks the toolkit's version, makes its own context,
    passes its memory through a PointerHolderBase and allocates float4s: pre-built."""
    script = workload_file(
        f"""
import numpy as np
import pycuda.driver as drv
from pycuda import gpuarray
from pycuda.characterize import has_double_support
from pycuda.compiler import SourceModule

class Holder(drv.PointerHolderBase):
    def __init__(self, memory):
        super().__init__()
        self.memory = memory
        self.gpudata = int(memory)

    def get_pointer(self):
        return int(self.memory)

def main():
    drv.init()
    assert drv.get_version() >= (11, 0, 0) and has_double_support()
    ctx = drv.Device(0).make_context()
    try:
        f = SourceModule({SOURCE!r}).get_function("k")
        f(Holder(drv.mem_alloc(4)), np.int32(1), block=(32, 1, 1))
        v = SourceModule({VEC!r}).get_function("v")
        v(gpuarray.empty(8, gpuarray.vec.float4), block=(1, 1, 1))
        ctx.synchronize()
    finally:
        ctx.pop()
        ctx.detach()
"""
    )
    bundle = tmp_path / "s.warm"
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)
    assert proc.returncode == 0, proc.stderr
    assert "stored 0 new" not in proc.stdout and "stored " in proc.stdout


# -- 2. the header names a kernel's components keep ----------------------------------------


def _header_files(source: str, options: tuple[str, ...]) -> list[list[str]]:
    from warmcli.kernel import Kernel, key_components

    kernel = Kernel(source, "f", language="c", options=options)
    return json.loads(key_components(kernel, "x86_64", "cc:test").get("header_files", "[]"))


def test_header_names_never_carry_the_build_machines_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-include /abs/pre.h` (and `-imacros`, joined or not) was kept as `<header>`, so a
    changed one was explained as `changed: <header>`: named by its file name now, as an
    absolute `#include` is; a relative name (`../inc/x.h`) as its line or option wrote it."""
    from warmcli.runtime.shown import changed_headers

    (tmp_path / "inc").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "inc" / "x.h").write_text("#define X 1\n")
    pre = tmp_path / "inc" / "pre.h"
    pre.write_text("#define P 2\n")
    monkeypatch.chdir(tmp_path / "src")
    source = '#include "../inc/x.h"\nvoid f(float *a) { a[0] = X + P; }\n'
    for options in (("-include", str(pre)), (f"-include{pre}",), ("-imacros", str(pre))):
        names = [name for name, _ in _header_files(source, (*options, "-I", "../inc"))]
        assert names == ["pre.h", "../inc/x.h"], (options, names)
        assert not any(str(tmp_path) in name for name in names)
    names = [n for n, _ in _header_files(source, ("-include", "../inc/pre.h", "-I", "../inc"))]
    assert names == ["../inc/pre.h", "../inc/x.h"]
    before = {"header_files": json.dumps(_header_files(source, ("-include", str(pre))))}
    pre.write_text("#define P 3\n")
    time.sleep(0.01)
    after = {"header_files": json.dumps(_header_files(source, ("-include", str(pre))))}
    assert changed_headers([before], after) == " (changed: pre.h)"


# -- 3. a pre-build whose threads all die for want of a GPU --------------------------------

THREADED = """
import threading
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

def work():
    mod = SourceModule("__global__ void t(float *x) { x[0] = 1.0f; }")
    WANT_GPU
    mod.get_function("t")(drv.mem_alloc(16), block=(1, 1, 1))

def main():
    threads = [threading.Thread(target=work, name=f"w{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"""


@needs_nvrtc
@pytest.mark.parametrize(
    ("want_gpu", "said"),
    [
        ("drv.get_driver_version()", "DeviceError: pycuda.driver.get_driver_version() needs a GPU"),
        ("drv.memcpy_dtoh(np.zeros(4, np.float32), drv.mem_alloc(16))", "DiscardedReadError"),
    ],
)
def test_threads_that_all_die_for_want_of_a_gpu_fail_the_prebuild(
    warm: Warm, workload_file: Any, tmp_path: Path, want_gpu: str, said: str
) -> None:
    """Each thread died on what only a GPU-less pass refuses; the run said a note per
    thread, stored nothing, called the bundle complete and exited 0."""
    script = workload_file(THREADED.replace("WANT_GPU", want_gpu), "threaded.py")
    bundle = tmp_path / "t.warm"
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "workload raised during CompileOnly in thread w" in line and said in line, line
    assert "threaded.py:10" in line and "Traceback" not in proc.stderr
    assert "complete" not in proc.stdout


# -- 4. a writer waiting on another's bundle lock says so ----------------------------------

SCALE = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void s(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= FACTOR; }", "s", "Pi",
           language="c")

def workload(rt):
    rt.launch(K, rt.upload(np.ones(4, np.float32)), 4)
"""
HOLDER = """
import fcntl, os, time
from pathlib import Path

HERE = Path(__file__).parent

def workload(rt):
    if (HERE / "release").exists():
        return
    fd = os.open(str(HERE / "b.warm.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another warm's write would hold it
    (HERE / "held").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (HERE / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    fcntl.flock(fd, fcntl.LOCK_UN)
"""


def _until(check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_writer_waiting_for_the_lock_says_so_and_stops_on_ctrl_c(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm merge -o B`, `warm run -b B` and `warm clean B` started while another warm
    process held B's write lock waited without a word, for ever (clean's Ctrl-C, held for
    its commit, did not even stop it: it removed, then said interrupted): now one line once
    the wait passes two seconds, naming B and the holder's pid; the merge goes on when the
    lock is let go, and Ctrl-C stops the waiting run and clean with exit 130, nothing lost."""
    for name, factor in (("two.py", "2"), ("three.py", "3")):
        (tmp_path / name).write_text(SCALE.replace("FACTOR", factor))
    (tmp_path / "holder.py").write_text(HOLDER)
    bundle, other = tmp_path / "b.warm", tmp_path / "c.warm"
    assert warm("run", tmp_path / "two.py", "-b", bundle, "--quiet").returncode == 0
    assert warm("run", tmp_path / "three.py", "-b", other, "--quiet").returncode == 0

    def start(*args: str | Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.err"
        command = [sys.executable, "-m", "warmcli", *map(str, args)]
        with log.open("wb") as err:
            proc = subprocess.Popen(command, env=warm.env, cwd=tmp_path, stdout=err, stderr=err)
        return proc, log

    holder, _ = start("run", tmp_path / "holder.py", "-b", bundle, "--quiet", name="holder")
    try:
        _until(lambda: (tmp_path / "held").exists() and (tmp_path / "held").read_text())
        pid = (tmp_path / "held").read_text()
        began = time.monotonic()
        merge, merge_log = start("merge", "-o", bundle, bundle, other, name="merge")
        run, run_log = start("run", tmp_path / "three.py", "-b", bundle, "--quiet", name="run")
        clean, clean_log = start("clean", "--max-size", "1", bundle, name="clean")
        line = f"warm: waiting for another warm writing {bundle} (pid {pid}) to finish"
        logs = (merge_log, run_log, clean_log)
        _until(lambda: all(line in log.read_text() for log in logs))
        assert time.monotonic() - began >= 2.0  # not at once: a short wait is said nothing
        for proc, log in ((run, run_log), (clean, clean_log)):  # (clean's wait was held)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 130, log.read_text()
            assert "interrupted" in log.read_text() and "Traceback" not in log.read_text()
            assert "removed" not in log.read_text()
        assert merge.poll() is None  # still waiting, not failed
    finally:
        (tmp_path / "release").touch()
        assert holder.wait(60) == 0
    assert merge.wait(60) == 0, merge_log.read_text()
    said = merge_log.read_text()
    assert said.count("waiting for another warm") == 1 and "merged 2 bundle(s)" in said
    listed = warm("stats", bundle, "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["kernels"]) == 2
