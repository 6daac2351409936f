"""The kernel cache's reads of the bundle: which key a kernel has here, which build serves it.

A kernel's key on a device is its arch and its compiler's identity (with this CPU's, for a
host kernel tuned for it: `warmcli.backends.native`), or the key of the bundle's build that
`warmcli.backends.serving` serves here instead (another toolchain's build that runs here,
outside warming; while warming only where there is no compiler). A build the bundle holds
under a key is served only if it was made for this device and toolchain by that rule, its
blob's sha256 matches, it is of its row's kind (a cubin row's no PTX) and it loads here
(counted `loaded`), by an open runtime (`use_bundle` closed it: none, compiled cold); else it is
noted, handed to the miss policy as not served (`corrupt` for a malformed row, `binary` for a
blob that cannot be served, the differing part for another device's or toolchain's build) and
rebuilt. PTX served to a CUDA device newer than every cubin (under CompileOnly, where nothing
loads, held as served), PTX kept beside a held cubin while warming, and a cubin row's kind are a
CUDA device's only: `warmcli.runtime.lookup_ptx.CudaLookup`'s. A plain miss is explained
(`warmcli.runtime.explain`) only when the miss policy asks (`warmcli.runtime.misses`). This
device's kernel rows are prefetched in the order they were stored, in chunks that grow with the
kernels asked for (by half of them: a workload serves in a few queries what it launches in the
order it was warmed). It owns the keys it gave (and by which toolchain), the keys found served,
the records read while keying, the rows prefetched, and what it asks once (the compiler's
identity per language, the serving target per toolchain and its verdict on the builds of that
toolchain, arch and backend whose components name its own: one `why_not` per target, the (arch,
toolchain) pairs an entry's builds name: `_builds_of`); it says whether a tune's pick measured
on another build is measured again (`measured_otherwise`); it never compiles, never writes the
bundle and never prints. Loading is the cache's (its `load`, handed in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warmcli.backends import toolchain
from warmcli.backends.base import Device, DeviceError
from warmcli.backends.serving import Target, choose, of_kernel, why_not
from warmcli.backends.toolchain import ToolchainError
from warmcli.errors import BundleError
from warmcli.execution.process_mode import note_reported
from warmcli.execution.statistics import Registrations, StatisticsCollector
from warmcli.forking import new_lock
from warmcli.kernel import Kernel, kernel_key, key_components
from warmcli.kernel_parts import kept_by
from warmcli.records import KernelRecord, MissExplanation
from warmcli.runtime.misses import Misses

if TYPE_CHECKING:  # the storage seam, named in annotations only
    from warmcli.runtime.store import Store

# The first chunk of this device's kernel rows prefetched (the least any chunk is).
PREFETCH_AFTER = 8
_UNJUDGED: Any = object()  # no verdict kept yet (`BundleLookup._own_builds`)
Load = Callable[[str, Kernel, KernelRecord, bytes], Any]  # the kernel cache's loader


class BundleLookup:
    """See the module doc; one per kernel cache."""

    def __init__(
        self,
        device: Device,
        bundle: Store | None,
        misses: Misses,
        any_toolchain: bool,
        registrations: Registrations,
    ) -> None:
        self.device = device
        self.registrations = registrations  # the kernel cache's: a served kernel settles
        self.bundle = bundle
        self.misses = misses
        self.any_toolchain = any_toolchain  # serve another toolchain's build that runs here
        self._lock = new_lock(self)
        self._keys: dict[object, str] = {}  # by `kept_by`: content hash (and options)
        self._in_bundle: set[str] = set()  # keys the bundle was found to serve here
        self._identities: dict[str, str] = {}  # key -> the toolchain it was keyed with
        self._found: dict[str, KernelRecord] = {}  # bundle records read while keying
        self._rows: dict[str, tuple[Any, ...]] = {}  # this device's prefetched, not yet read
        self._fetched = 0  # rows of this device's asked for so far, in the order stored
        self._more = True  # the last chunk was full: the bundle may hold more
        self._lookups = 0
        self._targets: dict[str | None, Target] = {}
        # `why_not` of a build by a target's own toolchain, arch and backend, whose components
        # name its own toolchain, arch, entry (or none: `unkeyed`), by the target's identity
        # (`_targets`): it reads nothing else of such a record, so one verdict holds for all.
        self._own_builds: dict[str | None, tuple[str, str] | None] = {}
        self._identities_by_language: dict[str, str] = {}  # a compiler's, once probed
        self._entry_builds: dict[str, frozenset[tuple[str, str]]] = {}  # `_builds_of`'s

    # -- keys ------------------------------------------------------------------------------

    def key(self, kernel: Kernel) -> str:
        """The kernel's key on this device: its arch and its compiler's identity, or the
        key of the bundle's build that `warmcli.backends.serving` serves here instead."""
        content = kept_by(kernel.content_hash, kernel.options)  # (the hash: no folder's path)
        key = self._keys.get(content)
        if key is None:
            identity: str | None = self._identities_by_language.get(kernel.language)
            try:  # probed once per language (a dict read after that)
                if identity is None:
                    identity = self._identity(kernel.language)
            except ToolchainError:
                # A serving machine may have no compiler at all: serve what the bundle holds.
                key = self._served_key(kernel, None)
                if key is None:
                    raise
            else:
                assert identity is not None
                if kernel.options and kernel.tunes_native:  # tuned for this CPU: keyed with it
                    from warmcli.backends.native import keyed_identity  # (only then imported)

                    identity = keyed_identity(identity)
                own = kernel_key(kernel, self.device.arch, identity)  # keyed once
                key = None
                if self.any_toolchain and self.bundle is not None:
                    try:  # our own build, read once: `record` takes it from here
                        found = self._kernel(own)
                    except BundleError:  # a malformed row: `record` explains it as corrupt
                        found = None
                    else:
                        if found is None:  # none of ours: another toolchain's, if it runs here
                            key = self._served_key(kernel, identity)
                        else:
                            self._found[own] = found
                if key is None:
                    key = own
                    self._identities[own] = identity  # keyed here
            self._keys[content] = key
        return key

    def _identity(self, language: str) -> str:
        """This device's compiler identity for `language` (probed once; ToolchainError: none)."""
        identity = self._identities_by_language.get(language)
        if identity is None:
            identity = self.device.compiler(language).toolchain.identity
            self._identities_by_language[language] = identity
        return identity

    def own_key(self, kernel: Kernel) -> str:
        """Key `kernel` by this device's compiler from now on (ToolchainError: none here)."""
        identity = self._identity(kernel.language)
        if kernel.tunes_native:
            from warmcli.backends.native import keyed_identity

            identity = keyed_identity(identity)
        key = kernel_key(kernel, self.device.arch, identity)
        self._identities[key] = identity  # keyed here
        self._keys[kept_by(kernel.content_hash, kernel.options)] = key
        return key

    def keyed_here(self, key: str) -> bool:
        """Whether `key` was keyed by this device's own toolchain (not a served build's)."""
        return key in self._identities

    def _target(self, identity: str | None) -> Target:
        target = self._targets.get(identity)
        if target is None:  # one per toolchain: the device does not change under a process
            backend = self.device.backend
            # Only a CUDA driver is judged (`Target`): no other device's fingerprint is read
            # to serve (a host's reads /proc/cpuinfo).
            driver = self.device.fingerprint.driver if backend == "cuda" else ""
            target = Target(backend, self.device.arch, driver, identity)
            self._targets[identity] = target
        return target

    def _served_key(self, kernel: Kernel, identity: str | None) -> str | None:
        """The key of the bundle's build of this kernel that another toolchain made and
        that runs here, when the bundle holds none of this device's toolchain (`key` read
        its own first): served outside warming, and while warming only where there is no
        compiler (`identity` None). With no compiler and only PTX for an older arch, the
        key its cubin would have."""
        if self.bundle is None:
            return None
        arch = self.device.arch
        try:
            found = choose(self._builds_of(kernel), self._target(identity), of_kernel(kernel))
        except BundleError:  # unreadable (closed by `use_bundle` meanwhile): ours, a miss
            return None
        if found is None:
            return None
        if found.arch != arch:  # PTX the driver JITs: served by `serve_ptx`, keyed as its cubin
            return None if identity is not None else kernel_key(kernel, arch, found.toolchain)
        return found.key

    # -- the bundle's builds ---------------------------------------------------------------

    def measured_otherwise(self, recorded: str, here: str, *, warming: bool) -> bool:
        """Whether a tune's pick measured on the bundle's build `recorded` is measured again
        where its kernel is keyed `here`: that build does not run here as this device's
        toolchain's would (`why_not`: a wrapper's other options, a foreign `-march=native`),
        so its timing and check verdict are not this binary's. Another warm's build recipe
        is told apart: serving takes its pick, warming measures an older one's again (as a
        fresh warm does, so the bundle's tunes name builds this warm serves) and keeps a
        newer one's (two warms' re-warms never re-measure each other's). A build no longer
        in the bundle (not this process's: nothing says it would be served here, nor that
        a check judged this one) is measured again, serving too; a malformed row is kept.
        Where `here` is a build the bundle serves this process (another toolchain's, or any where no
        compiler is here), the recorded one is judged against that build's toolchain: the
        binary that runs here, not a process that would serve any build."""
        if self.bundle is None:  # (a record of this process's own: keyed alike)
            return False
        try:
            held = self.bundle.kernel(recorded)
            identity = self._identities.get(here)
            if identity is None and (served := self.bundle.kernel(here)) is not None:
                identity = served.toolchain  # the build that runs here
        except BundleError:  # malformed: `warm check` names it, not this
            return False
        if held is None:
            return True
        theirs = toolchain.recipe_of(held.toolchain)
        if theirs != toolchain.BUILD_RECIPE:
            return warming and theirs < toolchain.BUILD_RECIPE
        return why_not(held, self._target(identity)) is not None

    def record(self, kernel: Kernel, key: str) -> KernelRecord | None:
        """The bundle's build under `key`, if made for this device and toolchain (runtime open)."""
        if self.bundle is None or self.misses.closed:
            return None
        record = self._found.pop(key, None)  # read while keying
        if record is None:
            try:
                record = self._kernel(key)
            except BundleError as exc:  # a malformed row: a miss, explained as corrupt
                from warmcli.runtime.explain import corrupt_entry  # a miss: serving never explains

                why = corrupt_entry("kernel", key, kernel.label, exc.problem)
                self._not_served(kernel, key, why)
                return None
        if record is None:
            return None
        identity = self._identities.get(key)
        target = self._targets.get(identity) or self._target(identity)  # one per toolchain
        tool, arch, comps = record.toolchain, record.arch, record.components
        if (  # the target's own build (every row a hot start serves): judged once per target
            tool == target.toolchain == comps.get("toolchain", tool)  # (as its key names them:
            and arch == target.arch == comps.get("arch", arch)  # `serving.unkeyed` inline; a
            and record.backend == target.backend  # changed row's verdict is its own)
            and comps.get("entry", record.entry) == record.entry
        ):
            why = self._own_builds.get(identity, _UNJUDGED)
            if why is _UNJUDGED:
                why = self._own_builds[identity] = why_not(record, target)
        else:
            why = why_not(record, target)
        if why is None and target.toolchain not in (None, record.toolchain):
            theirs, ours = record.toolchain, target.toolchain
            why = ("toolchain", f"bundle's build is by {theirs!r}, not {ours!r}")
        if why is not None:
            explanation = MissExplanation("kernel", key, kernel.label, why[0], why[1], (why[0],))
            self._not_served(kernel, key, explanation)
            return None
        return record

    def _kernel(self, key: str) -> KernelRecord | None:
        """The bundle's record under `key`, its row prefetched if it can be: this device's
        kernel rows, in the order they were stored, a chunk at a time when a workload asks
        for a kernel not fetched yet: each chunk half as long as the lookups so far (at
        least `PREFETCH_AFTER`; rows fetched and never asked for stay under a third of
        those fetched, in a few more chunks than chunks as long as the lookups would take),
        and fetched only while the rows read are fewer than twice the lookups. What is read
        grows with what the workload asks for, never with what the bundle holds (a
        workload launching in another order than it was warmed reads the rest by key).
        The row under `key`, if prefetched, is used once (and dropped)."""
        bundle = self.bundle
        assert bundle is not None
        with self._lock:  # (not acquire() then `try:`: a Ctrl-C between would leave it held)
            self._lookups += 1
            rows = self._rows
            if key not in rows and self._more and self._fetched < 2 * self._lookups:
                count = max(PREFETCH_AFTER, self._lookups // 2)  # a third, at most, unused
                device = self.device
                got = bundle.kernel_rows(device.backend, device.arch, self._fetched, count)
                self._fetched += count
                self._more = len(got) == count  # short: the end, or the prefetch budget
                rows.update(got)
            row = rows.pop(key, None)
        return bundle.kernel(key, None if row is None else {key: row}, keyed=True)

    def held(self, kernel: Kernel, key: str) -> bool:
        """Whether the bundle holds a build under `key` that is served here, or (serving) PTX
        of it that `serve_ptx` would serve, its blob one this device's driver JITs (counted
        `ptx_jit`: a GPU-less verify replay agrees with `warm check` and a GPU's replay)."""
        with self._lock:
            if key in self._in_bundle:
                return True
        if not self._held(kernel, key, self.record(kernel, key)):
            return False
        self._in_bundle.add(key)  # a CompileOnly launch loop asks once (a set's add: atomic)
        return True

    def serve(
        self,
        kernel: Kernel,
        record: KernelRecord,
        load: Load,
        loaded: bool,
        collector: StatisticsCollector,
    ) -> bool:
        """Load the bundle's build with `load` (`loaded`: its module is loaded already),
        registered in `collector` and settled `loaded` at once; False (and a note, nothing
        registered) when its blob cannot be served."""
        assert self.bundle is not None
        try:
            # A blob is read and checked once per process: a module loaded from it serves the
            # other kernels it holds (their rows name the same sha256).
            binary = b"" if loaded else self.bundle.blob(record.sha256)
            if why := self._not_its_kind(record, binary):  # a cubin row holding PTX
                raise DeviceError(why)
            load(record.key, kernel, record, binary)
        except (BundleError, DeviceError) as exc:  # corrupt, or built for another machine
            from warmcli.runtime.explain import unusable_binary  # a miss: serving never explains

            self._not_served(kernel, record.key, unusable_binary(kernel, record.key, str(exc)))
            return False
        self.registrations.register_settled(collector, record.key, "loaded")
        return True

    # -- misses ----------------------------------------------------------------------------

    def _not_served(self, kernel: Kernel, key: str, why: MissExplanation) -> None:
        """The bundle holds a build it must not serve: noted and counted (by reason), rebuilt."""
        note_reported(f"{why.detail}; kernel {kernel.label} is rebuilt")
        if self.misses.policy is not None:
            self.miss(kernel, key, why)
        else:
            self.misses.not_served(why)

    def miss(self, kernel: Kernel, key: str, why: MissExplanation | None = None) -> None:
        """A kernel the loaded bundle cannot serve, handed to the miss policy: explained
        against the bundle's nearest build (unless `why` says already) on its first miss."""
        self.misses.note_foreign(self._identities.values(), self.any_toolchain, kernel)

        def explain() -> MissExplanation:
            if why is not None:
                return why
            assert self.bundle is not None
            from warmcli.backends.native import keyed_identity  # (a miss only, as these)
            from warmcli.runtime.explain import explain_kernel, listed_kernels

            try:
                identity = self.device.compiler(kernel.language).toolchain.identity
            except ToolchainError:
                identity = "none"
            if kernel.tunes_native:
                identity = keyed_identity(identity)
            wanted = key_components(kernel, self.device.arch, identity)
            bundle, entry, misses = self.bundle, kernel.entry, self.misses
            listed = lambda: misses.listing("kernel", entry, lambda: listed_kernels(bundle, entry))  # noqa: E731
            refused = lambda: self._refusal(kernel, key)  # noqa: E731
            return explain_kernel(bundle, kernel, key, wanted, self.any_toolchain, refused, listed)

        self.misses.miss("kernel", key, kernel.label, explain)

    def _refusal(self, kernel: Kernel, key: str) -> tuple[str, str] | None:
        """Why `warmcli.backends.serving` serves none of the bundle's builds of `kernel`
        for this arch here (a CUDA release the driver does not support), None if it would."""
        target, mine = self._target(self._identities.get(key)), of_kernel(kernel)
        for record in self._builds_of(kernel):
            why = why_not(record, target) if record.arch == target.arch and mine(record) else None
            if why is not None:
                return why
        return None

    def _builds_of(self, kernel: Kernel) -> list[KernelRecord]:
        """The bundle's builds that may be `kernel`'s (`of_kernel` to judge), as `each_kernel`
        lists its entry's (by device, arch, label and key, as `warm check` reads them: never
        by a set's order, which differs by process; malformed rows skipped): only the rows
        under the key of each (arch, toolchain) pair the entry's builds name are read."""
        bundle = self.bundle
        assert bundle is not None
        listed = lambda: bundle.each_kernel(kernel.entry, on_error=lambda *_: None)  # noqa: E731
        pairs = self._entry_builds.get(kernel.entry)
        if pairs is None:  # once per entry (a fleet's: thousands of rows; one written since unseen)
            pairs = frozenset((r.arch, r.toolchain) for r in listed())
            self._entry_builds[kernel.entry] = pairs
        found: dict[str, KernelRecord] = {}
        for arch, identity in pairs:
            key = kernel_key(kernel, arch, identity)
            try:
                record = bundle.kernel(key)
                if record is None and bundle.refused(key):  # held, no trusted key signed
                    # it: the listing lists it all the same (a miss says `unsigned`), so here
                    record = next((r for r in listed() if r.key == key), None)
            except BundleError:  # malformed: skipped, as the listing skips it
                continue
            if record is not None and record.entry == kernel.entry:
                found[key] = record
        return sorted(found.values(), key=lambda r: (r.device, r.arch, r.label, r.key))

    # -- a CUDA device's only: PTX served and kept, a cubin row's kind (`lookup_ptx.CudaLookup`)

    def _held(self, kernel: Kernel, key: str, record: KernelRecord | None) -> bool:
        return record is not None  # (`held`'s verdict on a build served here, None: none)

    def _not_its_kind(self, record: KernelRecord, binary: bytes) -> str | None:
        return None  # (why a cubin row is not served: its blob is PTX)

    def serve_ptx(self, kernel: Kernel, key: str, load: Load) -> bool:
        return False  # (PTX of an older arch, which the driver JITs)
