"""PTX kept beside cubins: reading its header, and whether a device's driver can JIT it.

A bundle keeps, beside each kernel's cubins, the PTX of the highest architecture built (arch
`compute_XX`), so a GPU newer than every cubin is served by the driver's JIT instead of
missing. PTX is text: its header names the PTX ISA version (`.version 9.5`) and the target
(`.target sm_90`). The driver JITs PTX for its own GPU when the target's SM is at most the
GPU's (an arch-specific `sm_90a` target is not forward compatible) and when it knows the ISA
version, which a driver older than the toolkit does not
(`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`): `check_ptx` refuses both with the reason;
`not_ptx_of` and `not_cubin_of` say why a row's blob is not of its kind (PTX of a
`compute_XX` row's arch, a cubin of an `sm_XX` row's) from its first `KIND_BYTES` and its
length alone (they give the verdict its whole gives: a cubin's header tables must lie
within its length, so one cut short is no cubin). Which PTX record a device is served
is `warmcli.backends.serving`'s rule (`choose`, `virtual_sm`), with the cubins'. Pure
functions over bytes and records; nothing here loads, compiles or keeps state. PTX can come
from an untrusted bundle: only its first lines are read, and anything unexpected is a
`PtxError`. A kernel whose default PTX has a program of its own (beside an arch-specific
cubin) and does not build keeps its cubin without it (`ptx_not_kept`; a group of several is
split first, so no other kernel loses its PTX).
"""

from __future__ import annotations

import re

from warmcli.backends.cuda.cubin import check_cubin
from warmcli.backends.serving import driver_release, virtual_sm
from warmcli.errors import CompileFailure, CubinError, PtxError
from warmcli.printable import Pattern

_HEADER_BYTES = 4096  # the directives come first, after a comment banner
KIND_BYTES = _HEADER_BYTES  # what of a blob `not_ptx_of` and `not_cubin_of` read (an ELF header)
_VERSION = Pattern(rb"^\s*\.version\s+(\d+)\.(\d+)\s*$", re.MULTILINE)
_TARGET = Pattern(rb"^\s*\.target\s+sm_(\d{2,3})([af]?)\b", re.MULTILINE)


def is_ptx(data: bytes) -> bool:
    """Whether `data` looks like PTX text (and not an ELF cubin or a fatbin)."""
    return not data.startswith(b"\x7fELF") and _VERSION.search(data[:_HEADER_BYTES]) is not None


def ptx_arch_for(arch: str) -> str:
    """The virtual architecture whose PTX goes with cubins for `arch` (`sm_90a` → `compute_90`)."""
    m = re.match(r"^sm_(\d{2,3})[af]?$", arch)
    if not m:
        raise PtxError(f"{arch!r} is not an sm_XX architecture")
    return f"compute_{m.group(1)}"


def kept_ptx_arch(arch: str, ptx: str | None) -> str | None:
    """The virtual architecture whose PTX a build for `arch` keeps under `--ptx`: "auto" (the
    default) `ptx_arch_for(arch)`, else the one asked for (None or "" under `--no-ptx`)."""
    return ptx_arch_for(arch) if ptx == "auto" else ptx


def ptx_in_program(arch: str, ptx_arch: str | None) -> bool:
    """Whether the cubin's own program writes the PTX of `ptx_arch`: its plain `compute_XX`
    for an `sm_XX`. An arch-specific one's (`sm_90a`) writes `.target sm_90a` PTX, not the
    `compute_90` its key names (an `sm_90` build's): that comes from a program of its own."""
    return ptx_arch == ptx_arch_for(arch) and arch[-1].isdigit()


def ptx_not_kept(failure: CompileFailure, ptx: str | None, ptx_arch: str) -> str:
    """The compile log's note when the PTX kept by default (`ptx` "auto") has a program of
    its own (`compute_90` beside an `sm_90a` cubin) that fails (code for that arch only):
    the group keeps its cubin without it. Raises `failure` when that PTX was asked for
    (`--ptx compute_XX`), its program timed out, or it holds more than one kernel (the batch
    splits it: the others' PTX is kept, whatever `--jobs` grouped them with)."""
    if ptx != "auto" or failure.timed_out or len(failure.units) > 1:
        raise failure
    return f"\nno {ptx_arch} PTX kept: it does not build for {ptx_arch}:\n{failure.log.strip()}"


def check_ptx_arch(ptx: str) -> None:
    """PtxError unless `ptx` is `auto` or a virtual architecture (`compute_90`)."""
    if ptx != "auto" and virtual_sm(ptx) is None:
        raise PtxError(f"--ptx {ptx!r} is not a virtual architecture: expected compute_XX")


def ptx_header(data: bytes) -> tuple[tuple[int, int], int, str]:
    """((ISA major, minor), target SM, suffix) of PTX text; PtxError if it has none."""
    head = data[:_HEADER_BYTES]
    version, target = _VERSION.search(head), _TARGET.search(head)
    if version is None or target is None or data.startswith(b"\x7fELF"):
        raise PtxError("not PTX: no .version and .target directives")
    isa = (int(version.group(1)), int(version.group(2)))
    return isa, int(target.group(1)), target.group(2).decode()


def not_ptx_of(data: bytes, arch: str) -> str | None:
    """Why `data` is not PTX of the virtual architecture `arch` (`compute_90`: `.target
    sm_90`), as a PTX row's blob must be; None when it is (what `warm verify` checks)."""
    try:
        _, target, suffix = ptx_header(data)
    except PtxError as exc:
        return str(exc)
    if f"compute_{target}{suffix}" != arch:
        return f"PTX for sm_{target}{suffix}, not {arch}"
    return None


def not_cubin_of(data: bytes, arch: str, length: int | None = None) -> str | None:
    """Why `data` is not a cubin for `arch` (`sm_90`), as a cubin row's blob must be (PTX, a
    cubin of another SM, one cut short); None when it is (what `warm verify` checks, `warm
    check`, `warm clean` and a re-warm). `data` may be a blob's first `KIND_BYTES` where
    `length` gives the whole's (`len(data)` unless given)."""
    if is_ptx(data):
        return f"PTX, not a cubin for {arch}: its row's kind is wrong"
    try:
        check_cubin(data, arch, length)
    except CubinError as exc:
        return str(exc)
    return None


def cuda_for_isa(isa: tuple[int, int]) -> tuple[int, int]:
    """The first CUDA release (so the oldest driver) that knows PTX ISA `isa`.

    ISA 7.y came with CUDA 11.y, 8.0-8.5 with 12.0-12.5, 8.6-8.8 with 12.7-12.9,
    9.y with 13.y (NVRTC 13.5 writes ISA 9.5).
    """
    major, minor = isa
    if major >= 9:
        return 13 + (major - 9), minor
    if major == 8:
        return (12, minor) if minor <= 5 else (12, minor + 1)
    if major == 7:
        return 11, minor
    return 10, 2  # older ISAs: any driver a CUDA 11+ toolkit supports


def check_ptx(data: bytes, arch: str, driver: str) -> None:
    """Raise PtxError unless a device of `arch` with driver `driver` can JIT this PTX."""
    isa, target, suffix = ptx_header(data)
    sm = re.match(r"^sm_(\d{2,3})", arch)
    if sm is None:
        raise PtxError(f"{arch!r} is not an sm_XX architecture")
    if target > int(sm.group(1)):
        raise PtxError(f"PTX is for sm_{target}, newer than {arch}: the driver cannot JIT it")
    if suffix:
        raise PtxError(f"PTX targets sm_{target}{suffix}, which runs on sm_{target} only")
    need, have = cuda_for_isa(isa), driver_release(driver)
    if have is not None and have < need:
        raise PtxError(
            f"PTX ISA {isa[0]}.{isa[1]} needs a driver for CUDA {need[0]}.{need[1]} or newer; "
            f"this driver supports CUDA {driver} (loading it would fail with "
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION): rebuild with an older toolkit or "
            "update the driver"
        )
