"""PTX served and kept, a cubin row's kind: `CudaLookup`, a CUDA device's
`warmcli.runtime.lookup.BundleLookup` (the kernel cache makes one for a CUDA device only: no
other device imports this module).

When serving (not warming), a CUDA device newer than every cubin of a kernel is served the
bundle's PTX of it for an older `compute_XX` (the driver JITs it; counted `loaded` and
`ptx_jit`). While warming, a CUDA kernel whose cubin the bundle holds is held only with the
PTX this run keeps (`--ptx`, or the highest `--arch`'s), so a run asking for PTX the bundle
lacks (or whose row's blob is no PTX of its arch) builds it; a cubin row whose blob is PTX
(the wrong kind, as `warm verify` names it) is never served, and one holding PTX or another
SM's cubin is built again while warming. It owns the blobs it served as PTX and whether a
blob is a cubin of an arch (read once); the rest it reads is `BundleLookup`'s. It never
compiles, never writes the bundle and never prints.
"""

from __future__ import annotations

from typing import Any

from warmcli.backends.base import DeviceError
from warmcli.backends.serving import choose, of_kernel, virtual_sm
from warmcli.backends.toolchain import ToolchainError
from warmcli.errors import BundleError, PtxError
from warmcli.execution.process_mode import active_collector, note_reported
from warmcli.kernel import Kernel, kernel_key
from warmcli.records import KernelRecord
from warmcli.runtime.lookup import BundleLookup, Load
from warmcli.runtime.misses import warn


class CudaLookup(BundleLookup):
    """A CUDA device's `BundleLookup`: its PTX and cubin-kind reads; see the module doc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # `BundleLookup`'s arguments
        super().__init__(*args, **kwargs)
        self._jit_blobs: set[str] = set()  # the sha256 of PTX `serve_ptx` loaded
        self._cubins: dict[tuple[str, str], bool] = {}  # `_cubin_held`'s, by (sha256, arch)

    def _count(self, name: str, amount: float = 1) -> None:
        active_collector().count(self.device.id, "compilation", name, amount)

    def _held(self, kernel: Kernel, key: str, record: KernelRecord | None) -> bool:
        """`held`'s verdict, `record` the bundle's build served here under `key` (None: none):
        else the PTX `serve_ptx` would serve (serving); a cubin of its SM, and beside it the
        PTX this run keeps (warming)."""
        if record is None and not self._ptx_held(kernel, key):
            return False
        if record is not None and not self._cubin_held(record):
            return False
        return self._kept_ptx_held(kernel)

    def _kept_ptx_held(self, kernel: Kernel) -> bool:
        """While warming a CUDA device that keeps PTX (`--ptx`, else the highest `--arch`'s):
        whether the bundle holds it beside the cubin (not after a `--no-ptx` run), its blob
        PTX of that arch (a row naming a cubin's blob, or another arch's PTX, is built again)."""
        if self.bundle is None or self.misses.policy is not None:
            return True
        try:
            compiler = self.device.compiler(kernel.language)
        except ToolchainError:  # none here: the cubin is served as it is
            return True
        if not (ptx := getattr(compiler, "ptx", None)):
            return True
        from warmcli.backends.cuda.ptx import kept_ptx_arch, ptx_header, ptx_in_program

        arch = self.device.arch
        ptx_arch = kept_ptx_arch(arch, ptx)
        if ptx == "auto" and not ptx_in_program(arch, ptx_arch):
            return True  # (an `sm_90a` cubin's: kept where it builds, its log says why not)
        try:
            held = self.bundle.kernel(kernel_key(kernel, ptx_arch, compiler.toolchain.identity))
            if held is None:
                return False
            _, target, suffix = ptx_header(self.bundle.blob(held.sha256))
        except (BundleError, PtxError):  # a malformed row, a blob that is no PTX: built again
            return False
        return f"compute_{target}{suffix}" == held.arch  # PTX of another arch: built again

    def _not_its_kind(self, record: KernelRecord, binary: bytes) -> str | None:
        """Why a CUDA cubin row (`sm_XX`) is not served: its blob is PTX (a row of the wrong
        kind, as `warm verify` names it, which a driver, or a GPU-less device, would take as
        PTX to JIT). `binary` is empty where its module is loaded already: then whether it
        was loaded from PTX (`serve_ptx`). None for every other row (the device checks the
        rest as it loads it)."""
        if record.backend != "cuda" or virtual_sm(record.arch) is not None:
            return None
        from warmcli.backends.cuda.ptx import is_ptx, not_cubin_of  # a CUDA device's only

        if binary:
            return not_cubin_of(binary, record.arch) if is_ptx(binary) else None
        if record.sha256 in self._jit_blobs:
            return f"PTX, not a cubin for {record.arch}: its row's kind is wrong"
        return None

    def _cubin_held(self, record: KernelRecord) -> bool:
        """While warming a CUDA device: whether the bundle's cubin row `record` holds a cubin
        of its SM (one holding PTX or another SM's cubin, as `warm verify` names it, is
        built again: under `--arch` nothing loads, and a GPU-less device takes PTX). A
        blob (a batch's, shared by its kernels) is read once an arch (`_cubins`)."""
        if self.bundle is None or self.misses.policy is not None or record.backend != "cuda":
            return True
        if virtual_sm(record.arch) is not None:
            return True
        if (held := self._cubins.get((record.sha256, record.arch))) is not None:
            return held
        from warmcli.backends.cuda.ptx import not_cubin_of  # a CUDA device's only

        try:
            held = not_cubin_of(self.bundle.blob(record.sha256), record.arch) is None
        except BundleError:  # missing or corrupt: built again (and read again if asked)
            return False
        self._cubins[record.sha256, record.arch] = held  # its content: its sha256 matched
        return held

    def _ptx(self, kernel: Kernel, key: str) -> KernelRecord | None:
        """The bundle's PTX of this kernel a CUDA device newer than every cubin of it is
        served (the driver JITs it): when serving (not warming, which builds cubins)."""
        if self.bundle is None or self.misses.policy is None:
            return None
        identity = self._identities.get(key)
        ptx = (
            r
            for r in self._builds_of(kernel)
            if virtual_sm(r.arch) is not None
            and (self.any_toolchain or identity is None or r.toolchain == identity)
        )
        return choose(ptx, self._target(identity), of_kernel(kernel))

    def _ptx_held(self, kernel: Kernel, key: str) -> bool:
        """Whether `serve_ptx` would serve this kernel's PTX here, its blob one this device's
        driver JITs (counted `ptx_jit`); nothing is loaded."""
        record = self._ptx(kernel, key)
        if record is None or self.bundle is None:
            return False
        from warmcli.backends.cuda.ptx import check_ptx  # PTX: a CUDA device's only

        driver = self._target(self._identities.get(key)).driver
        try:
            check_ptx(self.bundle.blob(record.sha256), self.device.arch, driver)
        except (BundleError, PtxError):
            return False
        self._count("ptx_jit")
        return True

    def serve_ptx(self, kernel: Kernel, key: str, load: Load) -> bool:
        """Serve the bundle's PTX of this kernel (`_ptx`): the driver JITs it as it loads."""
        record = self._ptx(kernel, key)
        if record is None or self.bundle is None:
            return False
        try:
            load(key, kernel, record, self.bundle.blob(record.sha256))
        except (BundleError, DeviceError) as exc:
            note_reported(f"kernel {kernel.label}: PTX not served: {exc}")
            return False
        self._jit_blobs.add(record.sha256)
        self.registrations.settle(key, "loaded")
        self._count("ptx_jit")
        line = (
            f"kernel {kernel.label} served by PTX JIT ({record.arch} on {self.device.arch}): "
            "slower first load, no compile by warm"
        )
        note_reported(line)
        if self.misses.log:
            warn("warm: ptx: %s", line)
        return True
