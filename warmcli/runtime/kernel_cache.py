"""The kernel cache of one device: its compile queue, its loaded kernels, what it built.

A kernel is obtained in this order: already loaded in this process; built by this
process earlier; held by the bundle (its blob read on demand, served only if its
sha256 matches, it runs here by `warmcli.backends.serving`'s rule (while warming: built by
this device's toolchain, unless there is none), and it loads here, counted
`loaded`; else noted, counted by reason (`corrupt` for a malformed row) and
rebuilt); when serving, the bundle's PTX of it for an older `compute_XX` (a GPU
newer than every cubin, JIT-compiled by the driver, chosen by the same rule,
counted `loaded` and `ptx_jit`); else compiled.
Under `Queue` a kernel is only put on the compile queue; the first `get` that needs
a compile takes *the whole queue* into one batch (`warmcli.backends.batch`), so a pass that
queued everything first compiles it in a few parallel compiler processes. Everything
obtained is counted into the active collector, by device. A kernel the loaded bundle
lacks is explained (`warmcli.runtime.explain`) and handed to the cache's `MissPolicy`, which
may refuse the compile (strict mode) before it starts. `module` hands out the loaded
module holding a kernel, with its binary, for module-level lookups (a global
variable). The cache owns the queue, the loaded handles and the binaries built here
(which `records` hands to the bundle); it never writes the bundle itself.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, replace
from typing import Any

from warmcli.backends.base import Device, DeviceError
from warmcli.backends.compiler import CompiledGroup, CompileFailure, CompileUnit
from warmcli.backends.cuda.ptx import of_kernel, virtual_sm
from warmcli.backends.serving import Target, choose, why_not
from warmcli.backends.toolchain import Toolchain, ToolchainError
from warmcli.bundle.store import Bundle, BundleError
from warmcli.errors import KernelCompileError
from warmcli.execution.process_mode import active_collector
from warmcli.execution.statistics import StatisticsCollector
from warmcli.kernel import Kernel, kernel_key, key_components
from warmcli.records import KernelRecord
from warmcli.runtime.explain import (
    MissExplanation,
    MissPolicy,
    corrupt_entry,
    explain_kernel,
    unusable_binary,
    warn,
)

# Kernel lookups in the bundle one query each before this device's rows are fetched at once.
PREFETCH_AFTER = 8
# A note that records one compiler process's command line (`warm run --verbose` shows them).
COMMAND_NOTE = "compiler command: "


@dataclass
class _Built:
    record: KernelRecord
    binary: bytes


class KernelCache:
    """See the module doc; one per device and runtime."""

    def __init__(
        self,
        device: Device,
        bundle: Bundle | None = None,
        *,
        jobs: int | None = None,
        timeout: float | None = None,
        misses: MissPolicy | None = None,
        any_toolchain: bool = False,
    ) -> None:
        self.device = device
        self.any_toolchain = any_toolchain  # serve another toolchain's build that runs here
        self.bundle = bundle
        self.jobs = jobs
        self.timeout = timeout
        self.misses = misses
        self._explained: dict[str, MissExplanation] = {}  # key -> its miss, explained once
        self._lock = threading.RLock()
        self._keys: dict[str, str] = {}
        self._queue: dict[str, CompileUnit] = {}
        self._loaded: dict[str, Any] = {}
        # The hit path of a launch: kernel object id -> (kernel, function, collector it
        # was registered in). Read without the lock; the kernel is kept, so its id stays its own.
        self._hits: dict[int, tuple[Kernel, Any, StatisticsCollector]] = {}
        self._modules: dict[str, Any] = {}
        self._module_of: dict[str, str] = {}  # key -> the sha256 of the binary it was loaded from
        self._built: dict[str, _Built] = {}
        self._failed: dict[str, CompileFailure] = {}
        self._persisted: set[str] = set()
        self._from_bundle: set[str] = set()
        self._in_bundle: set[str] = set()  # keys the bundle was found to serve here
        self._toolchains: dict[str, Toolchain] = {}
        self._identities: dict[str, str] = {}  # key -> the toolchain it was keyed with
        self._foreign_noted = False
        self._found: dict[str, KernelRecord] = {}  # bundle records read while keying
        self._rows: dict[str, tuple[Any, ...]] | None = None  # this device's, once fetched
        self._lookups = 0

    # -- keys ------------------------------------------------------------------------------

    def key(self, kernel: Kernel) -> str:
        """The kernel's key on this device: its arch and its compiler's identity, or the
        key of the bundle's build that `warmcli.backends.serving` serves here instead."""
        content = kernel.content_hash
        key = self._keys.get(content)
        if key is None:
            try:
                identity: str | None = self.device.compiler(kernel.language).toolchain.identity
            except ToolchainError:
                # A serving machine may have no compiler at all: serve what the bundle holds.
                key = self._served_key(kernel, None)
                if key is None:
                    raise
            else:
                assert identity is not None
                key = self._served_key(kernel, identity)
                if key is None:
                    key = kernel_key(kernel, self.device.arch, identity)
                    self._identities[key] = identity
            self._keys[content] = key
        return key

    def _own_key(self, kernel: Kernel) -> str:
        """Key `kernel` by this device's compiler from now on (ToolchainError: none here)."""
        identity = self.device.compiler(kernel.language).toolchain.identity
        key = kernel_key(kernel, self.device.arch, identity)
        self._identities[key] = identity
        self._keys[kernel.content_hash] = key
        return key

    def _target(self, identity: str | None) -> Target:
        fp = self.device.fingerprint
        return Target(self.device.backend, self.device.arch, fp.driver, identity)

    def _served_key(self, kernel: Kernel, identity: str | None) -> str | None:
        """The key of the bundle's build of this kernel that another toolchain made and
        that runs here, when the bundle holds none of this device's toolchain: served
        outside warming, and while warming only where there is no compiler. With no
        compiler and only PTX for an older arch, the key its cubin would have."""
        if self.bundle is None or (identity is not None and not self.any_toolchain):
            return None
        arch = self.device.arch
        if identity is not None:
            own = kernel_key(kernel, arch, identity)
            try:
                record = self.bundle.kernel(own, self._bundle_rows())
            except BundleError:  # a malformed row: `_bundle_record` explains it as corrupt
                return None
            if record is not None:
                self._found[own] = record  # read once: `_bundle_record` takes it from here
                return None
        found = choose(
            self.bundle.each_kernel(kernel.entry, on_error=lambda *_: None),
            self._target(identity),
            of_kernel(kernel),
        )
        if found is None:
            return None
        if found.arch != arch:  # PTX the driver JITs: served by `_load_ptx`, keyed as its cubin
            return None if identity is not None else kernel_key(kernel, arch, found.toolchain)
        return found.key

    def _count(self, name: str, amount: float = 1) -> None:
        active_collector().count(self.device.id, "compilation", name, amount)

    def _register(self, kernel: Kernel) -> str:
        key = self.key(kernel)
        active_collector().count_once(self.device.id, "compilation", "registered", key)
        return key

    # -- queue and compile -----------------------------------------------------------------

    def _bundle_record(self, kernel: Kernel, key: str) -> KernelRecord | None:
        """The bundle's build under `key`, unless it was made for another device or toolchain."""
        if self.bundle is None:
            return None
        record = self._found.pop(key, None)  # read while keying
        if record is None:
            try:
                record = self.bundle.kernel(key, self._bundle_rows())
            except BundleError as exc:  # a malformed row: a miss, explained as corrupt
                why = corrupt_entry("kernel", key, kernel.label, exc.problem)
                self._not_served(kernel, key, why)
                return None
        if record is None:
            return None
        target = self._target(self._identities.get(key))
        why = why_not(record, target)
        if why is None and target.toolchain not in (None, record.toolchain):
            theirs, ours = record.toolchain, target.toolchain
            why = ("toolchain", f"bundle's build is by {theirs!r}, not {ours!r}")
        if why is not None:
            explanation = MissExplanation("kernel", key, kernel.label, why[0], why[1], (why[0],))
            self._not_served(kernel, key, explanation)
            return None
        return record

    def _bundle_rows(self) -> dict[str, tuple[Any, ...]] | None:
        """This device's kernel rows, fetched in one query once a workload has asked for a
        few kernels (a small workload never reads a big bundle's whole table)."""
        assert self.bundle is not None
        with self._lock:
            self._lookups += 1
            if self._rows is None and self._lookups > PREFETCH_AFTER:
                self._rows = self.bundle.kernel_rows(self.device.backend, self.device.arch)
            return self._rows

    def available(self, kernel: Kernel) -> bool:
        """Whether `get` would need no compile."""
        key = self.key(kernel)
        with self._lock:
            if key in self._loaded or key in self._built or key in self._in_bundle:
                return True
        if self._bundle_record(kernel, key) is None:
            return False
        with self._lock:
            self._in_bundle.add(key)  # a launch loop under CompileOnly asks once, not per launch
        return True

    def queue(self, kernel: Kernel) -> bool:
        """Put the kernel on the compile queue unless it is already obtainable; True if queued."""
        key = self._register(kernel)
        with self._lock:
            if key in self._queue or key in self._failed:
                return False
        if self.available(kernel):
            return False
        self._miss(kernel, key)
        with self._lock:
            if key in self._queue:
                return False
            self._queue[key] = CompileUnit(key, kernel, self.device.arch)
        self._count("queued")
        return True

    def flush(self) -> None:
        """Compile the whole queue in one batch."""
        import shlex  # imported on first use, as the batch compiler: a hot start compiles nothing

        from warmcli.backends.batch import compile_batch

        with self._lock:
            units = list(self._queue.values())
            self._queue.clear()
            if not units:
                return
            by_language: dict[str, list[CompileUnit]] = {}
            for unit in units:
                by_language.setdefault(unit.kernel.language, []).append(unit)
            for language, group in by_language.items():
                compiler = self.device.compiler(language)
                self._toolchains[compiler.toolchain.identity] = compiler.toolchain
                result = compile_batch(
                    compiler,
                    group,
                    jobs=self.jobs,
                    timeout=self.timeout,
                    on_built=lambda n: self._count("compiled", n),
                )
                self._count("batches")
                self._count("compiler_processes", result.processes)
                self._count("seconds", result.seconds)
                for built_group in result.groups:
                    active_collector().note(COMMAND_NOTE + shlex.join(built_group.command))
                for unit in group:
                    built = result.built.get(unit.key)
                    if built is not None:
                        self._keep(unit, built, compiler.toolchain.identity)
                for key, failure in result.failures.items():
                    self._failed[key] = failure
                    self._count("failed")
                    active_collector().note(" ".join(str(failure).splitlines()[:2]))

    def _keep(self, unit: CompileUnit, built: CompiledGroup, identity: str) -> None:
        kernel = unit.kernel
        record = KernelRecord(
            key=unit.key,
            device=self.device.id,
            backend=self.device.backend,
            arch=unit.arch,
            entry=kernel.entry,
            label=kernel.label,
            symbol=built.symbols[unit.key],
            sha256=hashlib.sha256(built.binary).hexdigest(),
            toolchain=identity,
            components=key_components(kernel, unit.arch, identity),
            compile_log=built.log,
            seconds=built.seconds / max(1, len(built.symbols)),
            size=len(built.binary),
        )
        self._built[unit.key] = _Built(record, built.binary)
        if built.ptx:  # the group's PTX, kept as the same kernel built for `compute_XX`
            key = kernel_key(kernel, built.ptx_arch, identity)
            ptx = replace(
                record,
                key=key,
                arch=built.ptx_arch,
                sha256=hashlib.sha256(built.ptx).hexdigest(),
                components=key_components(kernel, built.ptx_arch, identity),
                size=len(built.ptx),
            )
            self._built[key] = _Built(ptx, built.ptx)

    # -- obtaining -------------------------------------------------------------------------

    def get(self, kernel: Kernel) -> Any:
        """The loaded kernel, compiling the whole queue first if it must be compiled."""
        hit = self._hits.get(id(kernel))
        if hit is not None and hit[0] is kernel:
            collector = active_collector()
            if hit[2] is not collector:  # a new pass: registered once in its collector too
                self._register(kernel)
                self._hits[id(kernel)] = (kernel, hit[1], collector)
            return hit[1]
        key = self._register(kernel)
        with self._lock:
            if key in self._loaded:
                function = self._loaded[key]
                self._hits[id(kernel)] = (kernel, function, active_collector())
                return function
            if key not in self._built and key not in self._failed:
                record = self._bundle_record(kernel, key)
                if record is not None and self._load_from_bundle(kernel, record):
                    return self._loaded[key]
                if self._load_ptx(kernel, key):
                    return self._loaded[key]
                if record is None:
                    self._miss(kernel, key)
                elif key not in self._identities:  # another toolchain's build failed to load
                    key = self._own_key(kernel)  # what is built here is keyed as this toolchain's
                    if key in self._built or key in self._failed:
                        return self.get(kernel)
                self._queue.setdefault(key, CompileUnit(key, kernel, self.device.arch))
                self.flush()
            if key in self._failed:
                raise KernelCompileError(kernel, self._failed[key])
            built = self._built[key]
            return self._load(key, kernel, built.record, built.binary)

    def _load_from_bundle(self, kernel: Kernel, record: KernelRecord) -> bool:
        """Load the bundle's build; False (and a note) when its blob cannot be served."""
        assert self.bundle is not None
        try:
            # A blob is read and checked once per process: a module loaded from it serves the
            # other kernels it holds (their rows name the same sha256).
            loaded = record.sha256 in self._modules
            binary = b"" if loaded else self.bundle.blob(record.sha256)
            self._load(record.key, kernel, record, binary)
        except (BundleError, DeviceError) as exc:  # corrupt, or built for another machine
            self._not_served(kernel, record.key, unusable_binary(kernel, record.key, str(exc)))
            return False
        self._from_bundle.add(record.key)
        self._count("loaded")
        return True

    def _load_ptx(self, kernel: Kernel, key: str) -> bool:
        """Serve the bundle's PTX of this kernel to a CUDA device newer than every cubin of
        it (the driver JITs it as it loads): when serving (not warming, which builds cubins)."""
        if self.bundle is None or self.misses is None or self.device.backend != "cuda":
            return False
        identity = self._identities.get(key)
        ptx = (
            r
            for r in self.bundle.each_kernel(kernel.entry, on_error=lambda *_: None)
            if virtual_sm(r.arch) is not None
            and (self.any_toolchain or identity is None or r.toolchain == identity)
        )
        record = choose(ptx, self._target(identity), of_kernel(kernel))
        if record is None:
            return False
        try:
            self._load(key, kernel, record, self.bundle.blob(record.sha256))
        except (BundleError, DeviceError) as exc:
            active_collector().note(f"kernel {kernel.label}: PTX not served: {exc}")
            return False
        self._from_bundle.add(key)
        self._count("loaded")
        self._count("ptx_jit")
        line = (
            f"kernel {kernel.label} served by PTX JIT ({record.arch} on {self.device.arch}): "
            "slower first load, no compile by warm"
        )
        active_collector().note(line)
        if self.misses.log:
            warn("warm: ptx: %s", line)
        return True

    def _note_foreign(self) -> None:
        """On the first miss: note once what the bundle holds from other toolchains or devices."""
        if self.bundle is None or self._foreign_noted:
            return
        self._foreign_noted = True
        toolchains = set(self._identities.values())
        fingerprint = self.device.fingerprint.identity
        try:
            lines = self.bundle.foreign(
                self.device.backend, self.device.arch, toolchains, fingerprint
            )
        except BundleError:  # a malformed row: served as a miss where it is needed
            lines = []
        for line in lines:
            if self.any_toolchain and " kernel(s) for " in line:
                continue  # builds of other toolchains are served here when they run here
            active_collector().note(f"bundle holds {line}: not served on {self.device.id}")

    def _not_served(self, kernel: Kernel, key: str, why: MissExplanation) -> None:
        """The bundle holds a build it must not serve: noted and counted (by reason), rebuilt."""
        active_collector().note(f"{why.detail}; kernel {kernel.label} is rebuilt")
        if self.misses is not None:
            self._miss(kernel, key, why)
        elif self.bundle is not None and key not in self._explained:
            self._explained[key] = why  # warming explains no plain miss, but counts these
            active_collector().miss(self.device.id, "compilation", why)

    def _miss(self, kernel: Kernel, key: str, why: MissExplanation | None = None) -> None:
        """A kernel the loaded bundle cannot serve: explain and count it once, then apply the
        policy (strict mode refuses every attempt, not only the first)."""
        self._note_foreign()
        if self.misses is None:
            return
        if self.bundle is None:
            self.misses.without_bundle(self.device.id, "kernel", key, kernel.label)
            return
        known = self._explained.get(key)
        if known is not None:
            self.misses.refuse(known)
            return
        if why is None:
            try:
                identity = self.device.compiler(kernel.language).toolchain.identity
            except ToolchainError:
                identity = "none"
            wanted = key_components(kernel, self.device.arch, identity)
            why = explain_kernel(self.bundle, kernel, key, wanted, self.any_toolchain)
        self._explained[key] = why
        self.misses.report(self.device.id, why)

    def _load(self, key: str, kernel: Kernel, record: KernelRecord, binary: bytes) -> Any:
        module = self._modules.get(record.sha256)
        if module is None:
            module = self.device.load_module(binary)
            self._modules[record.sha256] = module
        function = self.device.get_function(module, record.symbol, kernel)
        self._loaded[key] = function
        self._module_of[key] = record.sha256
        return function

    def module(self, kernel: Kernel) -> tuple[Any, bytes]:
        """The loaded module that holds `kernel` (obtained first, as `get` does) and its
        binary: what a module-level lookup (a global variable) reads."""
        self.get(kernel)
        key = self.key(kernel)
        with self._lock:
            sha = self._module_of[key]
            built = self._built.get(key)
        if built is not None:
            return self._modules[sha], built.binary
        assert self.bundle is not None  # loaded, not built here: the bundle served it
        return self._modules[sha], self.bundle.blob(sha)

    # -- persistence -----------------------------------------------------------------------

    def unpersisted(self) -> list[tuple[KernelRecord, bytes]]:
        """Kernels built here that the bundle does not hold yet."""
        with self._lock:
            return [
                (b.record, b.binary) for k, b in self._built.items() if k not in self._persisted
            ]

    def mark_persisted(self, keys: list[str]) -> None:
        with self._lock:
            self._persisted.update(keys)

    def loaded_from_bundle(self) -> list[str]:
        """Keys of the kernels this cache served from the bundle."""
        with self._lock:
            return sorted(self._from_bundle)

    def toolchains(self) -> list[Toolchain]:
        """The toolchains that built what this cache holds."""
        with self._lock:
            return list(self._toolchains.values())
