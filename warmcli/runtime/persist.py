"""Persistence bookkeeping: what a runtime built, stored and served, and the write of it.

A `Ledger` is one kernel cache's record of what it has stored into the bundle
(keys), what it served from the bundle (keys, whose LRU time a writer moves) and
the toolchains that built what it holds (their fingerprints go beside the kernels).
`persist` writes a runtime's unstored kernels and tunes, with the device's and the
toolchains' fingerprints (not one's no bundle holds: `built.unstorable`), into the bundle it
is handed, touches what was served at the time it stored them (a touch the disk refuses
after a store only loses those times), marks what it wrote and counts the tunes
`persisted`. The ledger owns those sets only; the builds themselves stay in the kernel
cache, the tunes in the tune cache; nothing here compiles, loads or prints, and the bundle
is written only by `persist`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from warmcli.backends.base import DeviceFingerprint
from warmcli.backends.toolchain import Toolchain
from warmcli.errors import BundleError
from warmcli.forking import new_lock
from warmcli.records import KernelRecord, TuneRecord

if TYPE_CHECKING:  # the storage seam, named in annotations only
    from warmcli.runtime.store import Store


class Ledger:
    """See the module doc; one per kernel cache."""

    def __init__(self) -> None:
        self._lock = new_lock(self)
        self._persisted: set[str] = set()
        self._from_bundle: set[str] = set()
        self._toolchains: dict[str, Toolchain] = {}
        # The kernel under a key was loaded from the bundle: one call per kernel served,
        # so the set's own `add`, whole under the GIL as every read of the set here is.
        self.served: Callable[[str], None] = self._from_bundle.add

    def built_by(self, toolchain: Toolchain) -> None:
        with self._lock:
            self._toolchains[toolchain.identity] = toolchain

    def unpersisted(
        self, built: Iterable[tuple[KernelRecord, bytes]]
    ) -> list[tuple[KernelRecord, bytes]]:
        """Those of `built` the bundle does not hold yet."""
        with self._lock:
            return [(r, b) for r, b in built if r.key not in self._persisted]

    def mark_persisted(self, keys: list[str]) -> None:
        with self._lock:
            self._persisted.update(keys)

    def loaded_from_bundle(self) -> list[str]:
        """Keys of the kernels served from the bundle."""
        with self._lock:
            return sorted(self._from_bundle)

    def toolchains(self) -> list[Toolchain]:
        """The toolchains that built what the cache holds."""
        with self._lock:
            return list(self._toolchains.values())


if TYPE_CHECKING:  # structural types, for annotations only: no Protocol made at import

    class _Kernels(Protocol):
        def unpersisted(self) -> list[tuple[KernelRecord, bytes]]: ...
        def mark_persisted(self, keys: list[str], held: set[str]) -> None: ...
        def loaded_from_bundle(self) -> list[str]: ...
        def toolchains(self) -> list[Toolchain]: ...

    class _Tunes(Protocol):
        def unpersisted(self) -> list[TuneRecord]: ...
        def mark_persisted(self, keys: list[str]) -> None: ...


def persist(
    fp: DeviceFingerprint, kernels: _Kernels, tunes: _Tunes, bundle: Store
) -> tuple[int, int, list[str]]:
    """Write what `kernels` built and `tunes` measured into `bundle`: (kernels written,
    tunes written, the keys of the tunes handed over, for the caller to count). A kernel
    another writer stored alike meanwhile is held, not written by this one, nor counted."""
    built: list[tuple[KernelRecord, bytes]] = kernels.unpersisted()
    measured: list[TuneRecord] = tunes.unpersisted()
    fingerprints: list[tuple[str, str, dict[str, object]]] = [
        ("device:" + fp.identity, "device", fp.as_dict())
    ]
    for toolchain in kernels.toolchains():  # built here: `built` is imported
        from warmcli.runtime.built import FINGERPRINT, unstorable

        if not unstorable(toolchain.identity):  # (no bundle holds it, nor any of its builds)
            fingerprints.append(
                (FINGERPRINT + toolchain.identity, "toolchain", toolchain.as_dict())
            )
    n_kernels = n_tunes = 0
    held: set[str] = set()  # built here, and stored alike by another writer meanwhile
    # One process's kernels are used at one time: what it built is stored (once) at the time
    # what it was served is touched at, so `warm clean --max-size` never takes those it
    # compiled as older than those it was served.
    now = time.time()
    if built or measured:
        n_kernels, n_tunes = bundle.put(built, measured, fingerprints, held, now)
    kernels.mark_persisted([r.key for r, _ in built], held)  # stored: marked before the
    tunes.mark_persisted([t.key for t in measured])  # touch, which an exit may cut short
    # What was served from the bundle was used: its LRU time moves (writers only), to that
    # time, as does a row another writer stored alike of one built here (its time is that
    # writer's), served or not. Once the store above committed, a disk refusing this second
    # write costs only those times (as in production's write-back): the store stands, never
    # said to be "nothing was written".
    used = [*kernels.loaded_from_bundle(), *sorted(held)]  # none: no second transaction
    try:
        bundle.touch(dict.fromkeys(used, now))
    except BundleError as exc:
        if not (built or measured) or exc.disk_refusal is None:
            raise
    return n_kernels, n_tunes, [t.key for t in measured]
