"""What is on this machine (one inventory).

`inventory()` is the one answer to "what is on this machine": every device as a
`DeviceInfo` (one spelling of id, name, arch, driver, memory and fingerprint), the
compiler each backend builds with (`compilers`), and this machine's toolchain identity
per compiler name (`toolchains`), honouring `--nvcc`/`--compiler` once. `warm devices`
shows it, `warm clean` judges a bundle against it, and `warm check` describes the
devices it opens (`machine_devices`) with the same `DeviceInfo`. `listed_cuda_device`
maps one entry of the CUDA listing to a `DeviceInfo` (pure).

Devices are opened by name in `warmcli.backends.opening` (`open_devices`,
`cuda_available`), which a serving process uses without importing this inventory;
`machine_devices` opens through it. `compiler_info` says which compiler a device
builds with, why, the driver its CUDA builds need, and why no GPU is served them (`unserved`: an
`sm_90a` pre-build's). The module lists devices and probes compilers; it keeps none, and never
prints.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from warmcli import config
from warmcli.backends.base import Device, DeviceError, DeviceFingerprint
from warmcli.backends.host import HostDevice
from warmcli.backends.opening import cuda_available, open_devices, pycuda_installed
from warmcli.backends.toolchain import ToolchainError
from warmcli.kernel_parts import cuda_release
from warmcli.records import Record

LANGUAGE = {"host": "c", "cuda": "cuda"}  # the language each backend's compiler builds


class DeviceInfo(Record):
    """One device here: what it is, and what it offers a bundle (its compiler's identity)."""

    id: str
    backend: str
    name: str
    arch: str
    driver: str = ""  # the fingerprint's driver: a CUDA version on a GPU, the OS on the host
    memory: int | None = None  # bytes; None where unknown (the host, a compile-only device)
    fingerprint: str = ""  # `DeviceFingerprint.identity`
    toolchain: str | None = None  # its compiler's identity; None: none here, or not probed
    problem: str = ""  # why it has no compiler

    @classmethod
    def of(cls, device: Device) -> DeviceInfo:
        """An opened device, with the identity of the compiler it builds with."""
        try:
            compiler = device.compiler(LANGUAGE.get(device.backend, "c"))
            identity: str | None = compiler.toolchain.identity
            problem = ""
        except (ToolchainError, DeviceError, ValueError) as exc:
            identity, problem = None, str(exc).splitlines()[0]
        fp = device.fingerprint
        return cls(
            device.id,
            device.backend,
            fp.name,
            device.arch,
            fp.driver,
            None,
            fp.identity,
            identity,
            problem,
        )


def listed_cuda_device(entry: Mapping[str, Any]) -> DeviceInfo:
    """One entry of `list_cuda_devices()` (`index`, `name`, `arch`, `total_memory`,
    `driver_version`) as a `DeviceInfo`; no GPU context is opened."""
    fp = DeviceFingerprint(
        "cuda", str(entry["name"]), str(entry["arch"]), str(entry["driver_version"])
    )
    memory = entry.get("total_memory")
    return DeviceInfo(
        f"cuda:{entry['index']}",
        "cuda",
        fp.name,
        fp.arch,
        fp.driver,
        int(memory) if memory is not None else None,
        fp.identity,
    )


class Inventory(Record):
    """What this machine offers: its devices (the host first), whether pycuda is here, and
    (probed on first use) each backend's compiler and every toolchain identity by name."""

    devices: tuple[DeviceInfo, ...]
    pycuda: bool
    nvcc: str | None = None
    compiler: str | None = None  # the CUDA compiler asked for (`nvrtc`, `nvcc`); None: any
    cc: str | None = None
    no_gpu: str = ""  # with pycuda installed and no GPU listed: why, pycuda's or the driver's

    @property
    def host_arch(self) -> str:
        return next(d.arch for d in self.devices if d.backend == "host")

    @property
    def backends(self) -> frozenset[str]:
        return frozenset(d.backend for d in self.devices)

    @property
    def fingerprints(self) -> frozenset[str]:
        return frozenset(d.fingerprint for d in self.devices)

    @property
    def gpus(self) -> frozenset[tuple[str, str]]:
        """(arch, driver) of every GPU here."""
        return frozenset((d.arch, d.driver) for d in self.devices if d.backend == "cuda")

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(sorted({d.arch for d in self.devices}))

    @functools.cached_property
    def compilers(self) -> list[dict[str, str]]:
        """`backend_compilers`: the host's compiler and the CUDA compiler, and why."""
        return backend_compilers(HostDevice(self.cc), nvcc=self.nvcc, compiler=self.compiler)

    @functools.cached_property
    def toolchains(self) -> dict[str, str]:
        """This machine's identity of `cc`, `nvcc` and NVRTC, where found (of the CUDA
        compiler asked for only, when one is), each as its builds name it (cc's with the
        `as` and `ld` it runs: `HostCompiler.toolchain`); `ToolchainError` for a `compiler`
        that is neither `nvrtc` nor `nvcc`."""
        from warmcli.backends.host.compiler import HostCompiler

        asked = (self.compiler or "").strip()
        if asked not in ("", "auto"):
            from warmcli.backends.cuda.choose import check_name

            check_name(asked)
        found: dict[str, str] = {}
        with contextlib.suppress(ToolchainError):
            found["cc"] = HostCompiler(self.cc).toolchain.identity
        if asked in ("", "auto", "nvcc"):
            try:
                from warmcli.backends.cuda.nvcc import NvccCompiler

                found["nvcc"] = NvccCompiler(self.nvcc).toolchain.identity
            except (ToolchainError, ImportError):
                pass
        if asked in ("", "auto", "nvrtc"):
            try:
                from warmcli.backends.cuda.nvrtc import NvrtcCompiler

                found["nvrtc"] = NvrtcCompiler().toolchain.identity
            except (ToolchainError, ImportError):
                pass
        return found


def inventory(
    *, nvcc: str | None = None, compiler: str | None = None, cc: str | None = None
) -> Inventory:
    """This machine: the host and every GPU the CUDA listing shows (none opened; where it
    shows none with pycuda installed, why), with the compilers `nvcc`/`compiler`/`cc` name
    (defaults: see `warmcli.backends.cuda.choose`)."""
    devices, no_gpu = [DeviceInfo.of(HostDevice(cc))], ""
    pycuda = pycuda_installed()
    if pycuda:
        with contextlib.suppress(ImportError):  # pycuda without a driver library
            from warmcli.backends.cuda.device import list_cuda_devices, why_no_cuda_device

            listed = list_cuda_devices()
            devices += [listed_cuda_device(d) for d in listed]
            no_gpu = "" if listed else why_no_cuda_device()  # libcuda missing: said so
    return Inventory(tuple(devices), pycuda, nvcc, compiler, cc, no_gpu=no_gpu)


def compiler_info(device: Device) -> dict[str, str]:
    """Which compiler `device` builds with: its name, path, version, why it was chosen
    (`compiler` is "none" and `why` the reason when it has none), and the CUDA release a
    driver must support to be served its cubins (`needs_driver`: any driver of the major
    release that builds them) and the PTX it keeps (`ptx_needs_driver`), "" where none is;
    `unserved`: why no GPU is served its cubins (an `--arch sm_90a` device's), else ""."""
    language = "cuda" if device.backend == "cuda" else "c"
    try:
        toolchain = device.compiler(language).toolchain
        slot = getattr(device, "compilers", None)
        if slot is not None:
            why = slot.why()
        else:
            why = "WARM_CC" if config.cc() else "cc on PATH (the default)"
    except (ToolchainError, DeviceError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return {
            "device": device.id,
            "compiler": "none",
            "path": "",
            "version": "",
            "why": why,
            "needs_driver": "",
            "ptx_needs_driver": "",
            "unserved": "",
        }
    release = cuda_release(toolchain.version) if device.backend == "cuda" else None
    keeps_ptx = bool(getattr(slot, "ptx", None))
    return {
        "device": device.id,
        "compiler": toolchain.name,
        "path": toolchain.path,
        "version": toolchain.version,
        "why": why,
        # the oldest driver its cubins are served on (`serving.why_not`: any of the CUDA
        # major release that built them), "" for none
        "needs_driver": f"{release[0]}.0" if release else "",
        # the oldest driver that JITs the PTX it keeps (`--ptx`): its own release
        "ptx_needs_driver": f"{release[0]}.{release[1]}" if release and keeps_ptx else "",
        # why no GPU is served its cubins (an `sm_90a` pre-build's: `arch.no_gpu_keys`)
        "unserved": _unserved(device),
    }


def _unserved(device: Device) -> str:
    """`compiler_info`'s `unserved`: why no GPU is served `device`'s cubins, "" for most."""
    if device.backend != "cuda" or device.can_execute:
        return ""
    from warmcli.backends.cuda.arch import no_gpu_keys  # (a CUDA device's module, loaded)

    return no_gpu_keys(device.arch)


def backend_compilers(
    host: Device, *, nvcc: str | None = None, compiler: str | None = None
) -> list[dict[str, str]]:
    """`compiler_info` of the host's compiler and of the CUDA compiler (`device` named
    `host` and `cuda`), whether or not a GPU is here: `--arch` builds with it, keeping
    PTX as `warm run` does by default (`ptx_needs_driver`)."""
    from warmcli.backends.cuda.arch import ArchDevice

    infos = [compiler_info(host)]
    cuda = ArchDevice("sm_90", nvcc, compiler=compiler, ptx="auto")
    infos.append({**compiler_info(cuda), "device": "cuda"})
    return infos


def machine_devices(
    spec: str = "auto",
    archs: Sequence[str] = (),
    nvcc: str | None = None,
    compiler: str | None = None,
) -> list[Device]:
    """The devices to check a bundle against: the host and every GPU here (`auto`), or
    those named. `--arch sm_90` stands for a GPU of that architecture, beside the host."""
    if archs:
        return [HostDevice(), *open_devices(archs=archs, nvcc=nvcc, compiler=compiler)]
    if spec == "auto":
        gpus = open_devices("cuda", nvcc=nvcc, compiler=compiler) if cuda_available() else []
        return [HostDevice(), *gpus]
    return open_devices(spec, nvcc=nvcc, compiler=compiler)
