"""The GPU-less CUDA device: compile-only for one named architecture (`--arch sm_90`).

An `ArchDevice` is what a CI machine without a GPU or a driver runs a workload
on: it compiles (NVRTC or nvcc) for its architecture and checks what it loads is a
cubin for it, but its buffers are shape-only (no memory behind them) and it
refuses to launch, read back or time: there is nothing to run on (it answers its
architecture's compute `capability`, as a GPU of it does). It owns only
its compiler (made on first use); it never imports `pycuda`. It accepts PTX its
architecture can JIT beside cubins for it. The checks any CUDA device makes
before touching a binary or a buffer, and the compiler slot both kinds share,
live here too, as does why no GPU looks up an arch-specific device's builds (`sm_90a`: a
GPU keys the arch of its compute capability, `no_gpu_keys`), and what a GPU's number is
(`gpu_number`: `cuda:N`'s, `CUDA_DEVICE`'s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import (
    COMPILE_ONLY,
    Buffer,
    DeviceError,
    DeviceFingerprint,
    LaunchConfig,
    Stream,
)
from warmcli.backends.cuda.choose import (
    CompilerChoice,
    CudaCompiler,
    check_builds,
    check_name,
    check_ptx_target,
    choose,
    make_compiler,
    why_this_nvcc,
)
from warmcli.backends.cuda.cubin import CubinError, check_cubin
from warmcli.backends.cuda.nvcc import NvccCompiler, parse_arch
from warmcli.backends.cuda.ptx import PtxError, check_ptx, is_ptx
from warmcli.errors import ToolchainError
from warmcli.forking import new_lock
from warmcli.kernel import Kernel

MAX_GPU_DIGITS = 9  # far above any GPU count, far below the 4,300 digits `int(str)` reads


def gpu_number(text: str) -> int | None:
    """The GPU number `text` is (`cuda:N`'s, `CUDA_DEVICE`'s): ASCII digits alone (`int`
    refuses "²", which `isdigit` takes), `MAX_GPU_DIGITS` at most, leading zeros counted (`int`
    refuses 5,000 digits, zeros or not, with a ValueError); None for anything else."""
    if text.isascii() and text.isdigit() and len(text) <= MAX_GPU_DIGITS:
        return int(text)
    return None


def no_gpu_keys(arch: str) -> str:
    """Why no GPU process is served the cubins of `arch`, an arch- or family-specific target
    (`sm_90a`, `sm_100f`): a GPU keys its kernels for the arch of its compute capability
    (`CudaDevice.arch`: `sm_90` on an H100 or H200), never a suffixed one, so such a
    pre-build's cubins are looked up by none, and its PTX (`compute_90`) is served only
    by the driver's JIT; "" for a plain `sm_XX` (or a host's arch)."""
    if not arch.startswith("sm_") or arch[-1] not in "af":
        return ""
    sm = parse_arch(arch)
    return (
        f"no GPU looks up {arch} builds: a GPU of compute capability {sm // 10}.{sm % 10} "
        f"keys its kernels for sm_{sm} (pre-build --arch sm_{sm} for it), so these cubins "
        "are served to none, their PTX only by the driver's JIT"
    )


def require_cubin(device_id: str, binary: bytes, arch: str) -> bytes:
    """`binary` if it is a cubin for `arch`, else a DeviceError saying what it is."""
    try:
        check_cubin(binary, arch)
    except CubinError as exc:
        raise DeviceError(f"{device_id} cannot load this binary: {exc}") from exc
    return binary


def require_upload(buffer: Buffer, array: np.ndarray) -> np.ndarray:
    """`array` as the buffer's dtype, contiguous; its element count must match."""
    if array.size != buffer.size:
        raise DeviceError(
            f"upload of {array.size} elements {array.shape} into {buffer}: sizes differ"
        )
    return np.ascontiguousarray(array, dtype=buffer.dtype)


def require_loadable(device_id: str, binary: bytes, arch: str, driver: str) -> bytes:
    """`binary` if it is a cubin for `arch` or PTX that a device of `arch` with `driver`
    can JIT, else a DeviceError saying what it is."""
    if is_ptx(binary):
        try:
            check_ptx(binary, arch, driver)
        except PtxError as exc:
            raise DeviceError(f"{device_id} cannot load this PTX: {exc}") from exc
        return binary
    return require_cubin(device_id, binary, arch)


class CompilerSlot:
    """A CUDA device's one compiler (NVRTC or nvcc, see `warmcli.backends.cuda.choose`), made (and
    its arch checked) on first use. `ptx` is what PTX it keeps: None, `auto`, `compute_XX`;
    `builds`: True (a run's `--arch` device): asked then whether it builds the arch, NVRTC too;
    False (a replay's or check's, which serve): the arch only parsed; None (a GPU's): checked
    as the compiler checks it."""

    def __init__(
        self,
        device_id: str,
        arch: str,
        nvcc: str | None,
        compiler: str | None = None,
        ptx: str | None = None,
        *,
        builds: bool | None = None,
    ) -> None:
        check_name(compiler)  # a wrong name fails at once, not only when a compile is needed
        self.builds = builds
        self.device_id = device_id
        self.arch = arch
        self.nvcc = nvcc
        self.requested = compiler
        self.ptx = ptx
        self.choice: CompilerChoice | None = None
        self._compiler: CudaCompiler | None = None
        self._lock = new_lock(self)

    def get(self, language: str) -> CudaCompiler:
        if language != "cuda":
            where = (
                '(`DEVICE = "host"` in the workload, or --device host)'
                if self.device_id.startswith("cuda:")
                else "(run it without --arch, which stands in for a GPU whatever DEVICE says)"
            )
            raise DeviceError(
                f"{self.device_id} compiles CUDA kernels only, not {language!r}: a C kernel "
                f"runs on the host {where}"
            )
        with self._lock:
            if self._compiler is None:
                choice = choose(self.requested, self.nvcc)
                compiler = make_compiler(choice, self.nvcc, self.ptx)
                if self.builds:
                    check_builds(compiler, self.arch)
                elif self.builds is None:
                    compiler.check_arch(self.arch)
                else:
                    parse_arch(self.arch)
                self._compiler, self.choice = compiler, choice
            return self._compiler

    def check_builds(self) -> None:
        """ArchError at once when this device's compiler does not build its arch: what a run
        checks before its first pass. No compiler here is left to the first compile it fails:
        a run over a bundle that holds all it reaches compiles nothing and needs none."""
        try:
            self.get("cuda")
        except ToolchainError:
            return

    def check_ptx(self) -> None:
        """ArchError at once when this device's compiler cannot build the PTX it keeps
        (a `compute_XX`): what a run checks before its first pass."""
        if self.ptx and self.ptx != "auto":
            check_ptx_target(self.get("cuda"), self.ptx)

    def why(self) -> str:
        """Why this device's compiler was chosen (and, for nvcc, where it was found)."""
        compiler = self.get("cuda")
        assert self.choice is not None
        if isinstance(compiler, NvccCompiler):
            return f"{self.choice.why}; {why_this_nvcc(compiler)}"
        return self.choice.why


class ArchDevice:
    """A compile-only CUDA device for one architecture; see the module doc."""

    backend = "cuda"
    can_execute = False

    def __init__(
        self,
        arch: str,
        nvcc: str | None = None,
        *,
        compiler: str | None = None,
        ptx: str | None = None,
        builds: bool = False,
    ) -> None:
        self.capability: tuple[int, int] = divmod(parse_arch(arch), 10)  # a GPU of it's: (9, 0)
        self.arch = arch
        self.id = arch
        self.compilers = CompilerSlot(self.id, arch, nvcc, compiler, ptx, builds=builds)

    @property
    def fingerprint(self) -> DeviceFingerprint:
        return DeviceFingerprint("cuda", COMPILE_ONLY, self.arch, "none")

    def compiler(self, language: str) -> CudaCompiler:
        return self.compilers.get(language)

    def _no_gpu(self, what: str) -> DeviceError:
        return DeviceError(f"cannot {what}: {self.id} has no GPU: compile-only for {self.arch}")

    def load_module(self, binary: bytes, sha256: str | None = None) -> bytes:
        return require_loadable(self.id, binary, self.arch, "none")

    def get_function(self, module: Any, symbol: str, kernel: Kernel) -> None:
        return None

    def launch(
        self,
        function: Any,
        kernel: Kernel,
        args: Sequence[Any],
        config: LaunchConfig,
        stream: Stream,
    ) -> None:
        raise self._no_gpu(f"launch {kernel.label}")

    def allocate(self, shape: Sequence[int], dtype: str) -> Buffer:
        return Buffer(self.id, shape, dtype)

    def upload(self, buffer: Buffer, array: np.ndarray) -> None:
        require_upload(buffer, array)

    def download(self, buffer: Buffer) -> np.ndarray:
        raise self._no_gpu(f"read back {buffer}")

    def copy(self, dst: Buffer, src: Buffer, stream: Stream) -> None:
        return None  # shape-only buffers: nothing to copy

    def free(self, buffer: Buffer) -> None:
        return None

    def new_stream(self) -> Stream:
        return Stream(self.id)

    def synchronize(self) -> None:
        return None  # nothing runs

    def time(self, stream: Stream, run: Callable[[], None]) -> float:
        raise self._no_gpu("time a measurement")

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"ArchDevice({self.arch}, compile-only)"
