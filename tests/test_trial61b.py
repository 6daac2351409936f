"""Review of the PyCUDA backend against PyCUDA's own sources (src/cpp/cuda.hpp, pycuda/driver.py).

No GPU here: what is pure logic is tested with `FakeDriver`, a stand-in named as such that
keeps PyCUDA's rules for the part under test (its per-thread context stack, and what its C++
destructors do); what needs a GPU is marked `gpu` and skips here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pip
import pytest
from conftest import ROOT

from warmcli import Runtime
from warmcli.backends.base import Stream
from warmcli.backends.cuda.device import CudaDevice, list_cuda_devices
from warmcli.pycuda import SourceModule, bound_runtime


class FakeContext:
    """PyCUDA's `primary_context`: remembers the thread that retained it (`m_thread`)."""

    def __init__(self, driver: FakeDriver) -> None:
        self.driver = driver
        self.thread = threading.get_ident()

    def push(self) -> None:
        self.driver.stack().append(self)


class FakeEvent:
    """PyCUDA's `event`: made in the current context (`context_dependent`); its destructor's
    `scoped_context_activation` frees it in the current context if that is its own, else
    pushes its own only on the thread that retained it: on another thread PyCUDA warns
    ("event in out-of-thread context could not be cleaned up") and the event leaks."""

    def __init__(self, driver: FakeDriver) -> None:
        self.driver = driver
        self.context = driver.current()

    def record(self, stream: Any = None) -> None:
        self.driver.calls.append("record")

    def synchronize(self) -> None:
        self.driver.calls.append("synchronize")

    def time_till(self, end: FakeEvent) -> float:
        return 2.5  # milliseconds, as PyCUDA's

    def __del__(self) -> None:
        own = self.driver.current() is self.context
        if not own and threading.get_ident() != self.context.thread:
            self.driver.leaked += 1


class FakeDriver:
    """The part of `pycuda.driver` a `CudaDevice`'s timing uses, with PyCUDA's rules."""

    class Error(Exception):
        pass

    def __init__(self) -> None:
        self._local = threading.local()
        self.calls: list[str] = []
        self.leaked = 0
        driver = self

        class Context:
            @staticmethod
            def pop() -> None:
                driver.stack().pop()

        self.Context = Context

    def stack(self) -> list[FakeContext]:
        return self._local.__dict__.setdefault("stack", [])

    def current(self) -> FakeContext | None:
        stack = self.stack()
        return stack[-1] if stack else None

    def Event(self) -> FakeEvent:  # (PyCUDA's name)
        return FakeEvent(self)


def _fake_device(driver: FakeDriver) -> CudaDevice:
    device = CudaDevice.__new__(CudaDevice)  # no GPU: the fake's context, made on this thread
    device.id, device._cuda, device._context = "cuda:0", driver, FakeContext(driver)
    return device


def _in_thread(work: Any) -> list[type[BaseException]]:
    """The types of what `work` raised on a thread of its own (the exception itself, and the
    frames its traceback holds, let go there)."""
    errors: list[type[BaseException]] = []

    def body() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(type(exc))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return errors


def test_timing_on_another_thread_frees_its_events_in_the_context() -> None:
    """A tune measured on a thread other than the one that opened the device (a serving
    thread, a workload's worker) timed each sample with two CUDA events that outlived the
    context's span: PyCUDA then could not free them there (it pushes an event's context only
    on the retaining thread), warned and leaked two events a sample. Failed before the fix
    (4 leaked: 2 a timing, the one that raised too), 0 now, the events dropped before the pop."""
    driver = FakeDriver()
    device = _fake_device(driver)
    stream = Stream("cuda:0")
    seconds: list[float] = []
    assert _in_thread(lambda: seconds.append(device.time(stream, lambda: None))) == []
    assert seconds == [0.0025]
    assert driver.calls == ["record", "record", "synchronize"]

    def fails() -> None:
        raise ValueError("a candidate failed")

    assert _in_thread(lambda: device.time(stream, fails)) == [ValueError]
    assert driver.leaked == 0
    assert driver.stack() == []  # nothing left pushed on this thread either


@pytest.mark.gpu
def test_a_timed_call_builds_its_kernel_before_its_clock_starts() -> None:
    """PyCUDA builds and loads a module at `SourceModule(...)`, so `prepared_timed_call` and
    `f(..., time_kernel=True)` time the launch alone. warm builds at the first launch, and
    that launch ran inside `device.time`: the first timed call's events spanned nvcc (or the
    bundle's module load), seconds where PyCUDA says microseconds, and a script picking a
    variant by its time picked by compile time. The kernel is now obtained first: no module is
    loaded while a clock runs (before the fix, the one load happened inside it)."""
    if not list_cuda_devices():
        pytest.skip("no CUDA GPU: list_cuda_devices() is empty (pycuda, driver or GPU missing)")
    import pycuda.driver as drv

    rt = Runtime(CudaDevice(0))
    device: Any = rt.device
    timing, loading = device.time, device.load_module
    inside: list[bool] = []
    loads: list[bool] = []

    def timed(stream: Any, run: Any) -> float:
        inside.append(True)
        try:
            return timing(stream, run)
        finally:
            inside.pop()

    def load(binary: bytes, sha256: str | None = None) -> Any:
        loads.append(bool(inside))
        return loading(binary, sha256)

    device.time, device.load_module = timed, load
    module = SourceModule("__global__ void t61b_fill(float *x, int n) { x[threadIdx.x % n] = 1; }")
    fill = module.get_function("t61b_fill")
    fill.prepare("Pi")
    try:
        with bound_runtime(rt):
            x = drv.mem_alloc(4 * 64)
            seconds = fill.prepared_timed_call((1, 1), (64, 1, 1), x, 64)()
            again = fill(x, np.int32(64), block=(64, 1, 1), time_kernel=True)
            x.free()
    finally:
        rt.close()
    assert loads == [False]
    assert isinstance(seconds, float) and isinstance(again, float)


def _words(pattern: str, text: str) -> list[str]:
    found = re.search(pattern, text, re.DOTALL)
    assert found is not None, pattern
    return found.group(1).replace("\\\n", " ").split()


def test_gpu_check_installs_every_carried_wheel_its_python_lacks() -> None:
    """scripts/fetch-gpu-carry carries setuptools for pycuda's build, but gpu-check never
    installed it: its list of what the machine's python may lack had `wheel` and not
    `setuptools`, and `pip wheel --no-build-isolation` imports the build backend from that
    python. On a Python 3.12 venv, or a bare distribution python3 (no setuptools), the build
    failed ("pycuda did not build") with the wheel carried beside it. Failed before
    (setuptools missing from gpu-check's list); every carried package is in it now."""
    scripts = ROOT / "scripts"
    carried = set(_words(r"PACKAGES=\((.*?)\)", (scripts / "fetch-gpu-carry").read_text()))
    pairs = _words(r"for pair in (.*?); do", (scripts / "gpu-check").read_text())
    installed = {pair.partition(":")[2] for pair in pairs}
    assert "setuptools" in carried
    assert carried - installed == set()


class FakeManagedAllocation(bytearray):
    """Stands in for PyCUDA's `ManagedAllocation` (a `DeviceAllocation` whose memory the host
    maps too), recognised by its class name as warm recognises PyCUDA's classes: host bytes
    here, with the address `int()` gives PyCUDA's."""

    def __int__(self) -> int:
        return 0x7F00_0000


FakeManagedAllocation.__name__ = "ManagedAllocation"


def test_a_managed_array_is_passed_by_its_pointer_as_pycudas_call_passes_it() -> None:
    """PyCUDA's call passes a numpy array over a `ManagedAllocation` (`drv.managed_zeros`,
    its unified-memory example: `doublify(a, block=..., grid=...)`) by that allocation's
    pointer (`_build_arg_buf`: `isinstance(arg.base, ManagedAllocationOrStub)`). warm refused
    it as host memory ("wrap it in drv.In/Out/InOut"): that unmodified script failed under
    warm. Failed before (ArgumentError); passed as a buffer of the allocation now, and a plain
    array, or a view of a managed one (PyCUDA packs those by value), is still refused."""
    from warmcli.pycuda.args import ArgumentError, call_letter, convert

    array = np.ndarray((4, 4), np.float32, buffer=FakeManagedAllocation(64))
    assert call_letter(array, 1) == "P"
    values, handlers = convert("P", [array], "cuda:0", "doublify")
    assert handlers == {}
    [buffer] = values
    assert (buffer.handle, buffer.shape, buffer.dtype) == (0x7F00_0000, (16,), "float32")
    for host in (np.zeros((4, 4), np.float32), array[1:]):
        with pytest.raises(ArgumentError, match="host memory"):
            call_letter(host, 1)


@pytest.mark.gpu
def test_a_managed_array_doubled_through_warm_on_a_gpu() -> None:
    """PyCUDA's unified-memory example, through warm's `SourceModule` on a real GPU."""
    if not list_cuda_devices():
        pytest.skip("no CUDA GPU: list_cuda_devices() is empty (pycuda, driver or GPU missing)")
    import pycuda.driver as drv

    rt = Runtime(CudaDevice(0))
    module = SourceModule("__global__ void t61b_doublify(float *a) { a[threadIdx.x] *= 2; }")
    doublify = module.get_function("t61b_doublify")
    try:
        with bound_runtime(rt):
            a = drv.managed_zeros(16, np.float32, mem_flags=drv.mem_attach_flags.GLOBAL)
            a[:] = np.arange(16, dtype=np.float32)
            doublify(a, block=(16, 1, 1), grid=(1, 1))
            drv.Context.synchronize()
            assert np.array_equal(a, 2 * np.arange(16, dtype=np.float32))
    finally:
        rt.close()


def _wheel(folder: Path, name: str, requires: tuple[str, ...] = ()) -> None:
    """A wheel of one empty module `name` (pure Python, any version), needing `requires`."""
    info = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: 0.1\n{}".format(
            name, "".join(f"Requires-Dist: {r}\n" for r in requires)
        ),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-0.1-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def _gpu_check_bare(tmp_path: Path, *carried: str) -> tuple[str, Path]:
    """gpu-check run here with a python of pip and a stand-in numpy alone (`-S`) and hand-made
    carried wheels of each package it lists (typer's needing `click`, carried too), and of
    `carried` (wheel file names): its output, and the folder it installs into."""
    if shutil.which("nvcc") is None:
        pytest.skip("gpu-check looks for nvcc before it installs anything")
    base, wheels, home = tmp_path / "base", tmp_path / "wheels", tmp_path / "home"
    for folder in (base / "numpy", wheels, home):
        folder.mkdir(parents=True)
    (base / "numpy" / "__init__.py").write_text("__version__ = '0 (a stand-in)'\n")
    (base / "pip").symlink_to(Path(pip.__file__).parent)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    pairs = _words(r"for pair in (.*?); do", (ROOT / "scripts" / "gpu-check").read_text())
    for pair in pairs:
        name = pair.partition(":")[2]
        _wheel(wheels, name, ("click",) if name == "typer" else ())
    _wheel(wheels, "click")
    for name in carried:
        shutil.copy(wheels / "click-0.1-py3-none-any.whl", wheels / name)
    env = dict(os.environ, HOME=str(home), OUT=str(tmp_path / "out"), WHEELS=str(wheels))
    env.update(GPU_WORK=str(tmp_path / "work"), PYTHON=str(python), PYTHONPATH=str(base))
    proc = subprocess.run(
        ["bash", ROOT / "scripts" / "gpu-check"], capture_output=True, text=True, env=env,
        timeout=240,
    )  # fmt: skip
    assert "missing: pytools" in proc.stdout, proc.stdout[-2000:]
    return proc.stdout, tmp_path / "work" / "site"


def test_gpu_check_installs_what_a_missing_package_needs_too(tmp_path: Path) -> None:
    """On a GPU machine whose python has numpy and pip alone, gpu-check installed each missing
    package with --no-deps: typer without click (or pydantic), rich without pygments, pytest
    without pluggy, though fetch-gpu-carry carries them; `python -m warmcli` and pytest then
    failed to import. Failed before (no click in its folder); installed now (the run stops
    later, at pycuda: none here)."""
    out, site = _gpu_check_bare(tmp_path)
    assert (site / "typer").is_dir(), out[-2000:]
    assert (site / "click").is_dir()
    assert "gpu-check: carried wheels did not install" not in out


def test_gpu_check_builds_pycuda_where_the_carried_wheel_is_another_pythons(
    tmp_path: Path,
) -> None:
    """gpu-check took the first carried `pycuda-*-linux_x86_64.whl`, the wheel an earlier run
    built and handed back, whatever Python it was built for: on a machine of another Python
    (the other device kind's image) pip refused it and gpu-check stopped ("the pycuda wheel
    did not install") instead of building its own. It takes this Python's wheel only now, and
    builds where there is none. Failed before (that line); the build is tried now (and fails
    here: no pycuda sdist, maybe no libcuda)."""
    out, _ = _gpu_check_bare(tmp_path, "pycuda-2025.1-cp27-cp27mu-linux_x86_64.whl")
    assert "the pycuda wheel did not install" not in out, out[-2000:]
    assert "libcuda" in out


FAKE_FOUR_GPUS = '''"""FakeDriver: `pycuda.driver` with four GPUs and no hardware; it counts
the primary contexts retained (on a GPU, each a context made there)."""
retained = []
Error = type("Error", (Exception,), {})
_stack = []


def init(flags=0):
    pass


def get_driver_version():
    return 13000


class Context:
    def __init__(self, index):
        self.index = index

    def push(self):
        _stack.append(self)

    @staticmethod
    def pop():
        _stack.pop()

    @staticmethod
    def synchronize():
        pass


class Device:
    def __init__(self, index):
        self.index = index

    @staticmethod
    def count():
        return 4

    def compute_capability(self):
        return (9, 0)

    def name(self):
        return "FakeGPU"

    def total_memory(self):
        return 1 << 30

    def retain_primary_context(self):
        retained.append(self.index)
        return Context(self.index)


class Stream:
    pass
'''


def _with_fake_gpus(tmp_path: Path, code: str, **variables: str) -> subprocess.CompletedProcess:
    """`code` run by this Python with a fake pycuda package of four GPUs (`FAKE_FOUR_GPUS`)
    first on its path, no `WARM_*` variable but a home of its own, and `variables` set."""
    fake = tmp_path / "fake" / "pycuda"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "tools.py").write_text("def clear_context_caches():\n    pass\n")
    (fake / "driver.py").write_text(FAKE_FOUR_GPUS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_") and k != "CUDA_DEVICE"}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{fake.parent}", WARM_HOME=str(tmp_path / "h"))
    env.update({"HOME": str(tmp_path), **variables})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip


AUTOINIT = (
    "import warmcli.pycuda.autoinit as autoinit, pycuda.driver as fake\n"
    "from warmcli.pycuda.context import current_runtime\n"
    "print(current_runtime().device.id, autoinit.context.index, sorted(set(fake.retained)))\n"
)


def test_production_opens_the_first_gpu_alone(tmp_path: Path) -> None:
    """`warmcli.runtime("cuda")` (and `auto` on a GPU machine, and every PyCUDA-style launch
    with no runtime bound) serves the first GPU, but opened every GPU to do so, retaining each
    one's primary context, then closed all but the first: a context made on every GPU of the
    node by every production process (its memory there, its start-up time; refused on a GPU
    another process holds in exclusive-process mode). Failed before (retained 0, 1, 2, 3);
    GPU 0 alone now. A fake pycuda package (`FakeDriver`, four GPUs): the rest is warm's."""
    code = (
        "import warmcli, pycuda.driver as fake\n"
        "print(warmcli.runtime('cuda').device.id, warmcli.runtime('auto').device.id)\n"
        "print(sorted(set(fake.retained)))\n"
    )
    proc = _with_fake_gpus(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["cuda:0 cuda:0", "[0]"]


def test_pycuda_autoinit_takes_the_gpu_pycudas_takes(tmp_path: Path) -> None:
    """PyCUDA's `autoinit` makes its context on the GPU `CUDA_DEVICE` names, else the one in
    `~/.cuda_device` (`make_default_device`): one process per GPU, each told its own. warm's
    (`warmcli.pycuda.autoinit`, the README's drop-in) and every PyCUDA-style launch with no
    runtime bound took the first GPU whatever they said: every such process ran on GPU 0.
    Failed before (cuda:0 under CUDA_DEVICE=2); the GPU named now, and a value that names
    none a one-line DeviceError, as PyCUDA refuses it (its ValueError)."""
    told = _with_fake_gpus(tmp_path, AUTOINIT, CUDA_DEVICE="2")
    assert told.returncode == 0, told.stderr
    assert told.stdout.split() == ["cuda:2", "2", "[2]"]
    (tmp_path / ".cuda_device").write_text("3\n")
    filed = _with_fake_gpus(tmp_path / "f", AUTOINIT, HOME=str(tmp_path))
    assert filed.stdout.split() == ["cuda:3", "3", "[3]"], filed.stderr
    unset = _with_fake_gpus(tmp_path / "u", AUTOINIT)
    assert unset.stdout.split() == ["cuda:0", "0", "[0]"], unset.stderr
    wrong = _with_fake_gpus(tmp_path / "w", AUTOINIT, CUDA_DEVICE="two")
    assert wrong.returncode != 0
    assert "DeviceError: CUDA_DEVICE (or ~/.cuda_device) is 'two'" in wrong.stderr
