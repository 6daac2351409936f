"""The kernel cache of one device: its compile queue, its loaded kernels, what it built.

A kernel is obtained for a launch under the `LaunchMode` verdict its runtime decided
(`obtain(kernel, mode)`; the cache never derives a verdict itself): under `Queue` it is only put
on the compile queue; otherwise it is obtained in this order: already loaded in this process;
built by this process earlier; served from the bundle (`warmcli.runtime.lookup`: which key and
which build, the blob read on demand and checked; a CUDA device's, `lookup_ptx.CudaLookup`,
serves PTX for a newer GPU when serving; a build it must not serve is rebuilt, and one queued
while warming, which lacks the PTX the run keeps, is built with the queue); else compiled
(`loaded`: whether it is loaded already); a launch's arguments (`get(kernel, args)`) are checked
against the kernel's letters before any of these, where it is not loaded yet (a loaded kernel's
hit path checks nothing: the device checks its launch). The first `get` that needs a compile
takes *the whole queue* into one batch (`warmcli.backends.batch`), so a pass that queued
everything first compiles it in a few parallel compiler processes. A kernel not yet obtained
registers with the active collector, and `registrations` settles it there (compiled, loaded,
failed; abandoned when its batch raises, a Ctrl-C: `missed` names it so, as one no compiler here
could build, nor the bundle serve) and counts what follows (refused by the device at load,
stored into the bundle). A kernel the loaded bundle lacks is handed to the runtime's miss policy
(`warmcli.runtime.misses`), which may refuse the compile (strict mode) before it starts.
`module` hands out the loaded module holding a kernel, with its binary, for module-level lookups
(a global variable). The cache owns the queue, the loaded handles and the binaries built here
(`unpersisted` hands them to `warmcli.runtime.persist`, whose `Ledger` keeps what was stored and
served; what it keeps of each build is `warmcli.runtime.built`'s, imported where a miss
compiles); it never writes the bundle itself. A build whose key is this process's own
(`warmcli.unkeyed`: no other process can be served it) is never handed to be stored:
`never_stored` names those built or queued here, and why, and `missed` says so of each. A
pass's first kernel no compiler here keys or builds is kept (`refused`): it fails the pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from warmcli.backends.base import Device, DeviceError
from warmcli.backends.launch_args import check_before_load
from warmcli.backends.toolchain import Toolchain
from warmcli.errors import KernelCompileError, ToolchainError, headline
from warmcli.execution.base import LaunchMode
from warmcli.execution.process_mode import active_collector, default_collector, note_reported
from warmcli.execution.statistics import Registrations
from warmcli.forking import new_rlock
from warmcli.kernel import Kernel
from warmcli.records import KernelRecord
from warmcli.runtime import tune_clock
from warmcli.runtime.hits import Hits, put_hit
from warmcli.runtime.lookup import BundleLookup
from warmcli.runtime.misses import Misses
from warmcli.runtime.persist import Ledger

if TYPE_CHECKING:  # a compile's records: imported where a miss compiles
    from warmcli.backends.compiler import CompiledGroup, CompileFailure, CompileUnit
    from warmcli.runtime.built import Built
    from warmcli.runtime.store import Store


class KernelCache:
    """See the module doc; one per device and runtime."""

    def __init__(
        self,
        device: Device,
        bundle: Store | None = None,
        *,
        jobs: int | None = None,
        timeout: float | None = None,
        misses: Misses | None = None,
        any_toolchain: bool = False,
    ) -> None:
        self.device, self.bundle, self.jobs, self.timeout = device, bundle, jobs, timeout
        self.misses = misses if misses is not None else Misses(device, bundle)  # None: warming
        self.registrations = Registrations(device.id, "compilation")  # by key: settled anywhere
        lookup: type[BundleLookup] = BundleLookup
        if device.backend == "cuda":  # PTX served and kept, a cubin row's kind: a CUDA device's
            from warmcli.runtime.lookup_ptx import CudaLookup

            lookup = CudaLookup
        self.lookup = lookup(device, bundle, self.misses, any_toolchain, self.registrations)
        self.ledger = Ledger()
        self._lock = new_rlock(self)
        self._queue: dict[str, CompileUnit] = {}
        self._loaded: dict[str, Any] = {}
        self._hits: Hits = {}  # the hit path, read unlocked: kernel id -> function, collector
        self._modules: dict[str, Any] = {}
        self._module_of: dict[str, str] = {}  # key -> the sha256 of the binary it was loaded from
        self._built: dict[str, Built] = {}
        self._ptx_of: dict[str, str] = {}  # a PTX build's key -> the key of the cubin beside it
        self._failed: dict[str, CompileFailure] = {}
        self._interrupted: dict[str, str] = {}  # key -> label: its batch raised (a Ctrl-C)
        self._uncompiled: dict[str, str] = {}  # content hash -> label: no compiler, no build
        self.refused: list[ToolchainError] = []  # a pass's first such error (the module doc)

    def key(self, kernel: Kernel) -> str:
        """The kernel's key on this device (`warmcli.runtime.lookup`)."""
        return self.lookup.key(kernel)

    def _count(self, name: str, amount: float = 1) -> None:
        active_collector().count(self.device.id, "compilation", name, amount)

    def _refuse(self, exc: ToolchainError) -> None:  # where lookup.key raised it
        if not self.refused and active_collector() is not default_collector():  # a pass's
            self.refused.append(exc)  # (though the workload caught it: pytest's tests)

    def _register(self, kernel: Kernel) -> str:
        try:
            key = self.lookup.key(kernel)
        except ToolchainError as exc:  # no compiler here, nor a build of it the bundle serves
            self._refuse(exc)
            raise
        if key not in self._loaded and key not in self._built and key not in self._failed:
            self.registrations.register(active_collector(), key)  # obtained: counts nowhere
        return key

    # -- queue and compile -----------------------------------------------------------------

    def loaded(self, kernel: Kernel) -> bool:  # (nothing looked up, nothing compiled)
        return self.key(kernel) in self._loaded

    def available(self, kernel: Kernel) -> bool:
        """Whether `get` would need no compile."""
        key = self.key(kernel)
        with self._lock:
            if key in self._loaded or key in self._built:
                return True
        return self.lookup.held(kernel, key)

    def queue(self, kernel: Kernel) -> bool:
        """Put the kernel on the compile queue unless it is already obtainable; True if queued."""
        key = self._register(kernel)
        with self._lock:
            if key in self._queue or key in self._failed:
                return False
        if self.available(kernel):
            self.registrations.settle(key, "loaded")  # the bundle serves it: nothing to compile
            return False
        self.lookup.miss(kernel, key)
        with self._lock:
            if key in self._queue:
                return False
            from warmcli.backends.compiler import CompileUnit  # a miss: serving never compiles

            self._queue[key] = CompileUnit.queued(key, kernel, self.device.arch)
        self._count("queued")
        return True

    def flush(self) -> None:
        """Compile the whole queue in one batch."""
        with self._lock:
            units = [u for u in self._queue.values() if not u.folder_gone]  # (queued again)
            self._queue.clear()
            if not units:
                return
            by_language: dict[str, list[CompileUnit]] = {}
            for unit in units:
                by_language.setdefault(unit.kernel.language, []).append(unit)
                self.registrations.register(active_collector(), unit.key)  # obtained by this batch
            try:
                self._compile(by_language)
            except BaseException:  # the batch raised: what it had not settled is abandoned
                self.registrations.settle((u.key for u in units), "abandoned")
                self._interrupted.update((u.key, u.kernel.label) for u in units)
                raise

    def _compile(self, by_language: dict[str, list[CompileUnit]]) -> None:
        """Compile each language's units in one batch (under the cache's lock)."""
        for language, group in by_language.items():
            self._batch(language, group)

    def _batch(self, language: str, group: list[CompileUnit]) -> None:
        """One language's units in one batch: what each built kernel keeps is made in the
        thread that compiled its group, beside the other groups' compiles, and filed here
        after the batch in queue order."""
        from warmcli.backends.batch import compile_batch
        from warmcli.runtime.built import kept_of

        compiler = self.device.compiler(language)
        self.ledger.built_by(compiler.toolchain)
        kept: dict[str, list[tuple[str, Built]]] = {}
        identities: dict[int, str] = {}  # the compiler's, by the environment units were queued in

        def built(units: list[CompileUnit], done: CompiledGroup) -> None:
            self.registrations.settle((u.key for u in units), "compiled")
            for unit in units:
                kept[unit.key] = kept_of(self.device, unit, done, compiler, identities)

        result = compile_batch(
            compiler, group, jobs=self.jobs, timeout=self.timeout, on_built=built
        )
        self._count("batches")
        self._count("compiler_processes", result.processes)
        self._count("seconds", result.seconds)
        for built_group in result.groups:
            active_collector().command(self.device.id, built_group.command)
        for unit in group:
            for key, entry in kept.get(unit.key, ()):
                self._built[key] = entry
                if key != unit.key:  # its PTX: stored as a row of its own, counted with it
                    self._ptx_of[key] = unit.key
        for key, failure in result.failures.items():
            self._failed[key] = failure
            self.registrations.settle(key, "failed")
            note_reported(f"{str(failure).splitlines()[0]} {headline(failure.log)}")

    # -- obtaining -------------------------------------------------------------------------

    def obtain(self, kernel: Kernel, mode: LaunchMode, args: Sequence[Any] | None = None) -> Any:
        """What a launch under the verdict `mode` needs of `kernel`: under `Queue` it is
        only queued (None); under `Compile` and `Execute` the loaded kernel (`get`, which
        checks the launch's `args` first where the kernel is not loaded yet)."""
        if mode is LaunchMode.QUEUE:
            self.queue(kernel)
            return None
        return self.get(kernel, args)

    def get(self, kernel: Kernel, args: Sequence[Any] | None = None) -> Any:
        """The loaded kernel, compiling the whole queue first if it must be compiled.

        A kernel the bundle serves takes one path: its key, its (prefetched) record checked, its
        module (loaded once per blob) and function, registered and settled `loaded` at once;
        anything else (a record it must not serve, PTX, a miss, a build) is registered as it was
        obtained and goes on to `_obtain`. `args`, an executed launch's arguments, are checked
        against the kernel's letters where it is not loaded yet, before anything is keyed, looked up
        or compiled (a loaded kernel's launch is checked by the device alone); past the hit path,
        while a tune measures, its time is clocked (`tune_clock`)."""
        hit = self._hits.get(id(kernel))
        collector = active_collector()
        if hit is not None and hit() is kernel:  # not a gone one's left at its id (`hits`)
            if hit.collector is not collector:  # a new pass: registered once in it too
                self._register(kernel)
                put_hit(self._hits, kernel, hit.function, collector)
            return hit.function
        begun = tune_clock.enter() if tune_clock.measuring else None  # a compile or a load
        try:
            if args is not None:
                check_before_load(kernel, self.device.id, args)
            lookup = self.lookup
            try:  # (lookup's own key: a launch pays no frame of this cache's for a refusal)
                key = lookup.key(kernel)
            except ToolchainError as exc:  # no compiler here, nor a build the bundle serves
                self._refuse(exc)
                with self._lock:
                    self._uncompiled[kernel.content_hash] = kernel.label
                raise
            with self._lock:
                if key in self._loaded:
                    function = self._loaded[key]
                    put_hit(self._hits, kernel, function, collector)
                    return function
                if key in self._built or key in self._failed:
                    return self._from_build(kernel, key)
                try:  # registered and settled at once when served (`lookup.serve`)
                    record = lookup.record(kernel, key)
                    # queued: built with the queue (the PTX it keeps is not held: `lookup.held`)
                    served = (
                        record is not None
                        and key not in self._queue
                        and lookup.serve(
                            kernel, record, self._load, record.sha256 in self._modules, collector
                        )
                    )
                except BaseException:  # a strict miss: registered as it was obtained, unsettled
                    self.registrations.register(collector, key)
                    raise
                if served:
                    self.ledger.served(key)
                    function = self._loaded[key]
                else:
                    self.registrations.register(collector, key)
                    function = self._obtain(kernel, key, record)
                put_hit(self._hits, kernel, function, collector)  # registered in it: a hit next
                return function
        finally:
            if begun is not None:
                tune_clock.leave(begun)

    def _obtain(self, kernel: Kernel, key: str, record: KernelRecord | None = None) -> Any:
        """`get` past the bundle's build (under the lock): the bundle's PTX, else built here
        (`record`: the bundle's build under `key` that was not served, if any)."""
        if self.lookup.serve_ptx(kernel, key, self._load):
            self.ledger.served(key)
            return self._loaded[key]
        if record is None:
            self.lookup.miss(kernel, key)
        elif not self.lookup.keyed_here(key):  # another toolchain's build failed to load
            key = self.lookup.own_key(kernel)  # what is built here is keyed as ours
            if key in self._built or key in self._failed:
                return self.get(kernel)
        from warmcli.backends.compiler import CompileUnit  # a miss: serving never compiles

        self._queue[key] = CompileUnit.queued(key, kernel, self.device.arch)  # keyed here, now
        self.flush()
        return self._from_build(kernel, key)

    def _from_build(self, kernel: Kernel, key: str) -> Any:
        """The kernel built here under `key` (under the lock), loaded; or its compile error."""
        if key in self._failed:
            raise KernelCompileError(kernel, self._failed[key])
        built = self._built[key]
        return self._load(key, kernel, built.record, built.binary)

    def _load(self, key: str, kernel: Kernel, record: KernelRecord, binary: bytes) -> Any:
        module = self._modules.get(record.sha256)
        try:
            if module is None:
                module = self.device.load_module(binary, record.sha256)  # checked: not rehashed
                self._modules[record.sha256] = module
            function = self.device.get_function(module, record.symbol, kernel)
        except DeviceError:  # the device would not load this build (registered first)
            self.registrations.register(active_collector(), key)
            self.registrations.record(key, "refused")
            raise
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

    # -- what persist reads (`warmcli.runtime.persist`) -------------------------------------

    def unpersisted(self) -> list[tuple[KernelRecord, bytes]]:
        """Kernels built here that the bundle does not hold yet, but those it never serves
        (`never_stored`): what a store writes, a write-back waits for and a report counts."""
        with self._lock:
            built = [(b.record, b.binary) for b in self._built.values() if not b.never_served]
        return self.ledger.unpersisted(built)

    def never_stored(self, queued: bool = False) -> list[tuple[str, str, str]]:
        """(label, key, why) of each kernel built here (or, `queued`, on the queue) whose key
        holds this process's token (`warmcli.unkeyed`): no bundle ever serves it, so none is
        stored (nor its PTX)."""
        if not queued:
            return self._never_built()
        with self._lock:
            units = list(self._queue.values())
        never: list[tuple[str, str, str]] = []
        if units:  # (a compile-only pass: keyed again to tell why)
            from warmcli.runtime.built import unkeyed_reason

            for unit in units:
                try:
                    identity = self.device.compiler(unit.kernel.language).toolchain.identity
                except ToolchainError:
                    continue
                if why := unkeyed_reason(unit.kernel, identity):
                    never.append((unit.kernel.label, unit.key, why))
        return never

    def _never_built(self) -> list[tuple[str, str, str]]:
        """`never_stored`'s of the kernels built here (their PTX not again)."""
        with self._lock:
            built = [(b.record.label, k, b.never_served) for k, b in self._built.items()]
            return [(n, k, why) for n, k, why in built if why and k not in self._ptx_of]

    def missed(self) -> list[tuple[str, str]]:
        """(label, key) of each kernel compiled here that the bundle does not hold yet, and of
        each whose compile failed or was interrupted here, or that no compiler here could
        build, or built here that no bundle serves (`never_stored`) (its label says so; its
        key then its content hash): what a miss cost."""
        built = [(record.label, record.key) for record, _ in self.unpersisted()]
        with self._lock:
            failed = [(f.units[0].kernel.label, k) for k, f in self._failed.items() if f.units]
            done = self._built.keys() | self._failed.keys()  # compiled since, or failed
            cut = [(n, k) for k, n in self._interrupted.items() if k not in done]
            none = [(n, h) for h, n in self._uncompiled.items()]
        failed = [(f"{name} (failed to compile: nothing stored)", k) for name, k in failed]
        none = [(f"{n} (no compiler here: nothing compiled)", h) for n, h in none]
        cut = [(f"{n} (compile interrupted: nothing stored)", k) for n, k in cut]
        never = self._never_built()  # (`production_report.NEVER_SERVED`: how its name tells it)
        unkeyed = [(f"{n} (never served: {why}: nothing stored)", k) for n, k, why in never]
        return built + unkeyed + failed + cut + none

    def mark_persisted(
        self, keys: list[str], held: set[str] | frozenset[str] = frozenset()
    ) -> None:
        """`keys` are in the bundle now: stored by this cache, but those in `held` (a PTX
        build counted `ptx_stored` with the kernel it was built with)."""
        self.ledger.mark_persisted(keys)
        stored = [k for k in keys if k not in held]
        self.registrations.record([k for k in stored if k not in self._ptx_of], "stored")
        ptx = [self._ptx_of[k] for k in stored if k in self._ptx_of]
        self.registrations.record(ptx, "ptx_stored")

    def loaded_from_bundle(self) -> list[str]:
        """Keys of the kernels this cache served from the bundle."""
        return self.ledger.loaded_from_bundle()

    def toolchains(self) -> list[Toolchain]:
        """The toolchains that built what this cache holds."""
        return self.ledger.toolchains()
