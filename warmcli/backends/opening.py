"""Opening devices by name: `host`, `cuda`, `cuda:N`, `auto`, or GPU-less architectures.

`auto` is the workload's own `DEVICE` if it names one, else every CUDA device when
one is present (`cuda_available`), else the host. `--arch sm_90` opens a compile-only
CUDA device per architecture, with no driver and no GPU; the highest of them (or of
the GPUs) keeps PTX beside its cubins when asked. CUDA modules are imported only when
a CUDA device is asked for, so this works on a machine with no driver, and a process
that opens the host imports no more than the host backend (not the machine inventory,
`warmcli.backends.machine`, which uses this module to open what it lists); nor does `auto`
where no `pycuda` can be imported (~10 ms of CUDA modules that would find no device). The
module opens devices and keeps none; it never prints.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from warmcli.backends.base import Device, DeviceError
from warmcli.backends.host import HostDevice


def cuda_available() -> bool:
    if not pycuda_installed():  # (warm's CUDA backend, ~10 ms of imports, would find none)
        return False
    try:
        from warmcli.backends.cuda.device import list_cuda_devices
    except ImportError:
        return False
    return bool(list_cuda_devices())


def pycuda_installed() -> bool:
    """Whether a `pycuda` is imported here, or a finder finds one (without importing it):
    where none is, no CUDA device can be opened (`list_cuda_devices` would find none)."""
    if "pycuda" in sys.modules:
        return True
    import importlib.util

    try:
        return importlib.util.find_spec("pycuda") is not None
    except (ImportError, ValueError):  # a finder that fails: the import says what it does
        return True


def open_devices(
    spec: str = "auto",
    archs: Sequence[str] = (),
    *,
    hint: str | None = None,
    cc: str | None = None,
    nvcc: str | None = None,
    compiler: str | None = None,
    ptx: str | None = None,
    builds: bool = False,
    first: bool = False,
) -> list[Device]:
    """The devices a run uses; raises `DeviceError` or `ToolchainError` with one line.

    `compiler` names the CUDA compiler (`nvrtc`, `nvcc`; default: see
    `warmcli.backends.cuda.choose`). `ptx` (`auto` or a `compute_XX`) has the CUDA device of the
    highest architecture keep PTX beside its cubins; None keeps none. `builds` (`warm run`'s):
    an `--arch` device's compiler, where one is here, must build its architecture, checked
    now (a replay's or check's need not). `first`: `cuda` (or `auto` on a GPU) opens the first
    GPU alone, not every one (opening a GPU retains its primary context: a context made there).
    """
    if archs and spec != "auto":
        raise DeviceError(f"--arch {archs[0]} stands in for a GPU: leave out --device {spec}")
    if archs:
        from warmcli.backends.cuda.arch import ArchDevice

        devices: list[Device] = [
            ArchDevice(arch, nvcc=nvcc, compiler=compiler, builds=builds)
            for arch in dict.fromkeys(archs)
        ]
        devices = _keep_ptx(devices, ptx)  # first: a compiler is made with the PTX it keeps
        for device in devices if builds else ():
            device.compilers.check_builds()  # type: ignore[attr-defined]
        return devices
    given = spec
    if spec == "auto":
        spec = hint or ("cuda" if cuda_available() else "host")
    if spec == "host":
        return [HostDevice(cc)]
    number = spec[len("cuda:") :]
    indexed = spec.startswith("cuda:") and number.isascii() and number.isdigit()  # not "²"
    if (spec == "cuda" or indexed) and not cuda_available():
        _refuse_stand_in()
        raise DeviceError(
            f"no CUDA device found: {_why_no_cuda()}; to compile without a GPU, give "
            "`warm run` (or `warm verify --workload`) the architecture: --arch sm_90 (repeat "
            "for several)"
        )
    if spec == "cuda" or spec.startswith("cuda:"):
        from warmcli.backends.cuda.device import open_cuda_devices

        opened = open_cuda_devices(spec, nvcc=nvcc, compiler=compiler, first=first)
        return _keep_ptx(list(opened), ptx)
    named = " (the workload's DEVICE)" if given == "auto" else ""
    raise DeviceError(f"unknown device {spec!r}{named}: use host, cuda, cuda:N or --arch sm_XX")


def _why_no_cuda() -> str:
    try:
        from warmcli.backends.cuda.device import why_no_cuda_device
    except ImportError as exc:
        return f"warm's CUDA backend did not import ({exc})"
    return why_no_cuda_device()


def _refuse_stand_in() -> None:
    """Raise naming the pre-build when `pycuda` is the GPU-less stand-in: a PyCUDA
    script's GPU work ran where no pass had bound a runtime."""
    from warmcli.backends.cuda.device import pycuda_stands_in

    if pycuda_stands_in():
        raise DeviceError(
            "no GPU in a GPU-less pre-build (--arch): GPU work ran at import; warm runs a "
            "PyCUDA script's GPU work in its entry function (main() or workload(runtime))"
        )


def _keep_ptx(devices: list[Device], ptx: str | None) -> list[Device]:
    """Have the device of the highest architecture keep PTX (one PTX per kernel)."""
    if ptx and devices:
        from warmcli.backends.cuda.ptx import PtxError, check_ptx_arch

        try:
            check_ptx_arch(ptx)
        except PtxError as exc:
            raise DeviceError(str(exc)) from None
        highest = max(devices, key=lambda d: int(d.arch.removeprefix("sm_").rstrip("af")))
        highest.compilers.ptx = ptx  # type: ignore[attr-defined]
        highest.compilers.check_ptx()  # type: ignore[attr-defined]
    return devices
