"""Opening devices by name: `host`, `cuda`, `cuda:N`, `auto`, or GPU-less architectures.

`auto` is the workload's own `DEVICE` if it names one, else every CUDA device when
one is present, else the host. `--arch sm_90` opens a compile-only CUDA device per
architecture, with no driver and no GPU. CUDA modules are imported only when a
CUDA device is asked for, so this works on a machine with no driver. The module
opens devices; it keeps none.
"""

from __future__ import annotations

from collections.abc import Sequence

from warmcli.device import Device, DeviceError
from warmcli.host import HostDevice


def cuda_available() -> bool:
    try:
        from warmcli.cuda.device import list_cuda_devices
    except ImportError:
        return False
    return bool(list_cuda_devices())


def open_devices(
    spec: str = "auto",
    archs: Sequence[str] = (),
    *,
    hint: str | None = None,
    cc: str | None = None,
    nvcc: str | None = None,
) -> list[Device]:
    """The devices a run uses; raises `DeviceError` or `ToolchainError` with one line."""
    if archs:
        from warmcli.cuda.arch import ArchDevice

        return [ArchDevice(arch, nvcc=nvcc) for arch in dict.fromkeys(archs)]
    if spec == "auto":
        spec = hint or ("cuda" if cuda_available() else "host")
    if spec == "host":
        return [HostDevice(cc)]
    if spec == "cuda" and not cuda_available():
        raise DeviceError(
            "no CUDA device found (pycuda, an NVIDIA driver and a GPU needed); to compile "
            "without a GPU, give the architecture: --arch sm_90 (repeat for several)"
        )
    if spec == "cuda" or spec.startswith("cuda:"):
        from warmcli.cuda.device import open_cuda_devices

        return list(open_cuda_devices(spec, nvcc=nvcc))
    raise DeviceError(f"unknown device {spec!r}: use host, cuda, cuda:N or --arch sm_XX")
