"""The miss policy: what a runtime does with a kernel or a tune the loaded bundle lacks.

A `MissPolicy` says what to do with an explained miss (`warmcli.runtime.explain` explains
it): it always counts it (per reason) into the active collector, logs it on logger `warmcli`
when asked (`WARM_EXPLAIN=1`), and under strict mode (`WARM_STRICT`) warns or raises
`StrictMissError` instead of paying the cold cost. `Misses` applies one policy to one
runtime's misses, kernels and tunes alike (a tune's explanation made here, `tune`, from the
bundle's tunes of that operation, or a stale pick's, `launch`, from what its launch function
raised): each key is explained once (the explanation is only computed on the first miss, by
the first of the threads that meet it at once, under its lock) and counted once, and strict
mode refuses every attempt, not only the first; with no bundle loaded, strict mode refuses a
compile or tune as `no-bundle` (its key kept, for the report: `refused`). Without a policy
(the warming passes, where everything is a miss by design) nothing is explained, except a
build the bundle holds but must not serve, which is counted once by reason.
On a kernel's first miss it notes once the tunes the bundle holds from other devices,
and on each miss of a kernel whose build another toolchain made for this arch it notes that
toolchain's builds, once a toolchain (a run that rebuilds none of them notes nothing).
Once its runtime is closed (`closed`, set before its bundle is, by
`use_bundle`, `warmcli.production.close()` or at exit) a miss is nothing: neither explained,
counted nor refused, the bundle being gone. It owns the explanations it made (and the keys
refused with no bundle), those flags and the lock around them, and the last kernel
entry's and tunable operation's listing a miss made (`listing`: the next miss of that
name explains from it, not from a listing of its own), and the other toolchains whose builds
are not noted yet; it never prints (logging is the caller's to route) and reads no kernel's
bundle row but, on a miss, the missed kernel's under each of those toolchains' keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from warmcli import config
from warmcli.backends.base import Device
from warmcli.errors import BundleError, ConfigError, StrictMissError
from warmcli.execution.process_mode import active_collector, note_reported
from warmcli.forking import new_rlock
from warmcli.kernel import Kernel, kernel_key
from warmcli.printable import cut
from warmcli.records import HeldElsewhere, MissExplanation, Record

if TYPE_CHECKING:  # the storage seam, named in annotations only
    from warmcli.records import TuneRecord
    from warmcli.runtime.nearest import Listed
    from warmcli.runtime.store import Store
    from warmcli.runtime.tune import Tunable, TuneCache


def warn(message: str, *args: object) -> None:
    """Log a warning on logger `warmcli` (`logging` is imported on the first: most
    processes log nothing)."""
    import logging

    logging.getLogger("warmcli").warning(message, *args)


class Strictness:
    """What a miss does: `OFF` nothing, `WARN` log it, `RAISE` refuse it. Three constants,
    each itself wherever it goes (compared by `is`, copied and pickled as itself) with an
    enum member's `name`, `value` and repr, but no `enum.Enum` made at import (~0.2 ms)."""

    __slots__ = ("name", "value")
    OFF: ClassVar[Strictness]
    WARN: ClassVar[Strictness]
    RAISE: ClassVar[Strictness]

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def __repr__(self) -> str:
        return f"<Strictness.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"Strictness.{self.name}"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return getattr, (Strictness, self.name)

    @classmethod
    def parse(cls, value: bool | str | None, source: str = "WARM_STRICT") -> Strictness:
        """`True`/`"1"`/`"raise"` raise, `"warn"` logs, `False`/`""`/`"0"`/`"off"` neither;
        `source` is where the value came from, named by the error for any other."""
        if isinstance(value, bool) or value is None:
            return cls.RAISE if value else cls.OFF
        if not isinstance(value, str):
            raise TypeError(
                f"{source} must be True, False, 'warn' or None, not {type(value).__name__}"
            )
        text = value.strip().lower()
        if text in ("", "0", "off", "false", "no"):
            return cls.OFF
        if text == "warn":
            return cls.WARN
        if text in ("1", "raise", "true", "on", "yes"):
            return cls.RAISE
        raise ConfigError(
            f"{source} must be 1 (or true, yes, on, raise), warn, or 0 (or false, no, off, "
            f"empty), not {value!r}"
        )


Strictness.OFF, Strictness.WARN, Strictness.RAISE = (
    Strictness(name, name.lower()) for name in ("OFF", "WARN", "RAISE")
)


class MissPolicy(Record):
    """What a runtime does with an explained miss: count it always; log, warn or raise if told."""

    log: bool = False
    strict: Strictness = Strictness.OFF

    @classmethod
    def from_env(
        cls, strict: bool | str | None = None, environ: Mapping[str, str] | None = None
    ) -> MissPolicy:
        """`WARM_EXPLAIN` and `WARM_STRICT`; an explicit `strict` wins over the variable."""
        if strict is None:
            chosen = Strictness.parse(config.strict(environ))
        else:
            chosen = Strictness.parse(strict, "use_bundle: strict")
        return cls(log=config.explain(environ), strict=chosen)

    def report(self, device_id: str, explanation: MissExplanation) -> None:
        """Count the miss by reason, then log it, warn or raise as this policy says."""
        view = "compilation" if explanation.kind == "kernel" else "autotune"
        active_collector().miss(device_id, view, explanation.on(device_id))
        self.refuse(explanation)
        if self.strict is Strictness.WARN:
            warn("warm: strict: %s", explanation.line())
        elif self.log:
            warn("warm: miss: %s", explanation.line())

    def without_bundle(self, device_id: str, kind: str, key: str, label: str) -> None:
        """A compile or tune with no bundle loaded at all: refused (or warned) under strict
        mode, which cannot be kept without a bundle; nothing otherwise."""
        if self.strict is not Strictness.OFF:
            from warmcli.runtime.explain import NO_BUNDLE  # strict without a bundle: a miss only

            self.report(device_id, MissExplanation(kind, key, label, "no-bundle", NO_BUNDLE))

    def refuse(self, explanation: MissExplanation) -> None:
        """Raise `StrictMissError` under strict mode: also for a miss reported before, so
        a caller that caught the first error and tries again is refused again."""
        if self.strict is Strictness.RAISE:
            raise StrictMissError(explanation)


EXPLAIN = MissPolicy()  # the default: explain and count, never log or raise


class Misses:
    """One runtime's misses under one policy (`None`: warming); see the module doc."""

    def __init__(
        self, device: Device, bundle: Store | None, policy: MissPolicy | None = None
    ) -> None:
        self.device = device
        self.bundle = bundle
        self.policy = policy
        self._explained: dict[tuple[str, str], MissExplanation] = {}  # (kind, key) -> its miss
        self._unloaded: dict[tuple[str, str], str] = {}  # refused with no bundle: -> its label
        self._lock = new_rlock(self)  # around explaining a miss (an explanation may miss)
        self._foreign_noted = False
        self._foreign_kernels: list[HeldElsewhere] = []  # other toolchains' builds, not noted
        self._listings: dict[str, tuple[str, Listed[Any]]] = {}  # kind -> (name, listing)
        self.closed = False  # the runtime was closed: its misses are no one's to report

    @property
    def log(self) -> bool:
        """Whether misses (and PTX served instead) are logged on logger `warmcli`."""
        return self.policy is not None and self.policy.log

    def miss(self, kind: str, key: str, label: str, explain: Callable[[], MissExplanation]) -> None:
        """A kernel or tune the loaded bundle cannot serve: explain (`explain()`, called on
        the first miss of `key` only) and count it once, then apply the policy (strict mode
        refuses every attempt, not only the first)."""
        if self.policy is None or self.closed:
            return
        if self.bundle is None:
            if self.policy.strict is Strictness.RAISE:  # refused: the report names it
                with self._lock:
                    self._unloaded.setdefault((kind, key), label)
            self.policy.without_bundle(self.device.id, kind, key, label)
            return
        with self._lock:  # threads meeting one key's miss at once: the first explains it
            known = self._explained.get((kind, key))
            if known is None:
                why = explain()
                self._explained[(kind, key)] = why
                self.policy.report(self.device.id, why)
                return
        self.policy.refuse(known)

    def tune(
        self,
        tunes: TuneCache,
        tunable: Tunable,
        key: str,
        shape_key: str,
        seen: TuneRecord | None,
        stale: str | None = None,
    ) -> None:
        """A tune the loaded bundle lacks (`seen`: its record there, not served; `stale`: why
        the launch function refuses the pick of the bundle's, `warmcli.runtime.tune_served`),
        as a kernel's miss is: explained from the bundle (`warmcli.runtime.explain`) on its
        first miss."""

        def explain() -> MissExplanation:
            if stale is not None:
                return MissExplanation("tune", key, label, "launch", stale, ("launch",))
            from warmcli.runtime.built import unkeyed_tune  # (a candidate's key our own)
            from warmcli.runtime.explain import corrupt_entry, explain_tune, listed_tunes

            corrupt = tunes.corrupt(key)
            if corrupt is not None:
                return corrupt_entry("tune", key, label, corrupt)
            bundle, name = self.bundle, tunable.name
            assert bundle is not None
            listed = lambda: self.listing("tune", name, lambda: listed_tunes(bundle, name))  # noqa: E731
            spec = (name, tunable.checksum, tunable.candidates, key, shape_key)
            found = explain_tune(bundle, *spec, self.device.fingerprint.identity, seen, listed)
            return unkeyed_tune(tunable, found)

        label = f"{tunable.name} {shape_key}"
        self.miss("tune", key, label, explain)

    def refused(self) -> list[MissExplanation]:
        """The misses strict mode refused (`WARM_STRICT=1`: every one it explained, and each
        it refused with no bundle loaded, as `no-bundle`), each key once, for the production
        report; none under another policy."""
        if self.policy is None or self.policy.strict is not Strictness.RAISE:
            return []
        with self._lock:
            unloaded, explained = dict(self._unloaded), dict(self._explained)
        if not unloaded:
            return list(explained.values())
        from warmcli.runtime.explain import NO_BUNDLE

        refused = {
            k: MissExplanation(*k, label, "no-bundle", NO_BUNDLE) for k, label in unloaded.items()
        }
        return list((refused | {k: v for k, v in explained.items() if k not in refused}).values())

    def listing(self, kind: str, name: str, make: Callable[[], Listed[Any]]) -> Listed[Any]:
        """The bundle's entries of the kernel entry or tunable operation `name` as `make`
        lists them, kept for the next miss of that name (one a kind: the last one's)."""
        with self._lock:
            kept = self._listings.get(kind)
            if kept is None or kept[0] != name:
                kept = self._listings[kind] = (name, make())
            return kept[1]

    def not_served(self, why: MissExplanation) -> None:
        """The bundle holds an entry it must not serve: a miss under a policy; while warming
        (no policy, no plain miss explained) still counted once by its reason, but once its
        runtime is closed or retired (`closed`: a late thread's read of its closed bundle)."""
        if self.policy is not None:
            self.miss(why.kind, why.key, why.label, lambda: why)
        elif (
            self.bundle is not None
            and not self.closed
            and (why.kind, why.key) not in self._explained
        ):
            self._explained[(why.kind, why.key)] = why
            view = "compilation" if why.kind == "kernel" else "autotune"
            active_collector().miss(self.device.id, view, why)

    def note_foreign(self, toolchains: Iterable[str], any_toolchain: bool, kernel: Kernel) -> None:
        """On a kernel miss: note once what the bundle holds from other devices (tunes), and
        each other toolchain's builds for this arch once, on the first miss of a kernel that
        toolchain built (`kernel`, keyed by it: a run that rebuilds none of a toolchain's
        builds is told nothing of them). `any_toolchain`: other toolchains' builds are served
        here when they run here, not noted."""
        if self.bundle is None or self.closed:
            return
        with self._lock:  # (threads missing at once: one reads what the bundle holds)
            if not self._foreign_noted:
                self._first_foreign(toolchains, any_toolchain)
        for h in list(self._foreign_kernels):
            try:  # this kernel's build by that toolchain, under its key
                held = self.bundle.kernel(kernel_key(kernel, h.arch, h.by)) is not None
            except BundleError:  # a malformed row: served as a miss where it is needed
                held = False
            with self._lock:  # threads missing at once: noted by the first
                if not held or h not in self._foreign_kernels:
                    continue
                self._foreign_kernels.remove(h)
            note_reported(_foreign_kernels(kernel.label, h.arch, h.by, self.device.id))

    def _first_foreign(self, toolchains: Iterable[str], any_toolchain: bool) -> None:
        """`note_foreign`'s first: the tunes of other devices noted, other toolchains' kernel
        builds kept for the misses that rebuild them (those past the toolchains the bundle
        counts one by one, unnamed, are not)."""
        assert self.bundle is not None
        self._foreign_noted = True
        fingerprint = self.device.fingerprint.identity
        try:
            held = self.bundle.foreign(
                self.device.backend, self.device.arch, set(toolchains), fingerprint
            )
        except BundleError:  # a malformed row: served as a miss where it is needed
            held = []
        for h in held:
            if h.kind == "kernel":
                if h.by and not any_toolchain:
                    self._foreign_kernels.append(h)
                continue
            how = (
                "pending (recorded without a GPU) for"
                if "|compile-only|" in h.by
                else "measured on"
            )
            what = f"{h.count} tune(s) {how} {cut(h.by)!r}"
            what = what if h.by else f"{h.count} more tune(s) measured on other devices"
            note_reported(f"bundle holds {what}: not served on {self.device.id}")


def _foreign_kernels(label: str, arch: str, by: str, device_id: str) -> str:
    """The note on a bundle's builds of another toolchain of a kernel this run rebuilds
    (`label`, the first): production serves them where they run, but never a build of
    another warm's build recipe."""
    from warmcli.backends import toolchain
    from warmcli.backends.serving import other_recipe

    ours_too = "and maybe more of this run's kernels"
    held = f"bundle holds {label} ({ours_too}) for {arch} built by {cut(by)!r}"
    theirs, ours = toolchain.recipe_of(by), toolchain.BUILD_RECIPE
    if theirs != ours:
        return (
            f"{held}: {other_recipe(theirs, ours).partition(': ')[0]}: this run builds its "
            f"own on {device_id} (`warm clean` removes them: run it once no warm of recipe "
            f"{theirs} serves this bundle)"
        )
    return (
        f"{held}: this run builds its own on {device_id} (production serves either where it "
        "runs, as README's 'Where a build is served' says)"
    )
