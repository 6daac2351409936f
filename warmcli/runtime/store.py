"""The runtime's seam to storage: `Store`, the few reads and writes its caches make.

The kernel cache, the tune cache, the explanation of a miss and `Runtime.persist`
hold a `Store`, never a concrete bundle: an open `warmcli.bundle.store.Bundle` is
one (it satisfies this protocol by its shape, without importing the runtime; a serving
process's `warmcli.bundle.core.BundleCore` is one to read: what it persists goes to a
`Bundle`), and a remote or in-memory store can stand in without touching the runtime.
A malformed entry is reported as `warmcli.errors.BundleError`, which the runtime
catches without importing the bundle package. This module owns no state and does nothing: it names
what the runtime needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from warmcli.records import HeldElsewhere, KernelRecord, TuneRecord

OnError = Callable[[str, str], None]  # (an entry's key, what is wrong with it)


class Store(Protocol):
    """Kernels, their binaries and tune picks, by key; see the module doc."""

    def kernel(
        self, key: str, fetched: Mapping[str, tuple[Any, ...]] | None = None
    ) -> KernelRecord | None:
        """The kernel under `key` (None if absent or not to be served); its row is taken
        from `fetched` (`kernel_rows`) when there. `BundleError` if it is malformed."""
        ...

    def kernel_rows(
        self, backend: str, arch: str, start: int = 0, count: int = -1
    ) -> dict[str, tuple[Any, ...]]:
        """Unchecked rows a device may serve, prefetched for `kernel` (bounded): `count`
        of them (-1: all) from the `start`th, in the order they were stored."""
        ...

    def kernels(
        self, entry: str | None = None, on_error: OnError | None = None
    ) -> list[KernelRecord]:
        """Every kernel of one entry name (nearest entries, to explain a miss)."""
        ...

    def each_kernel(
        self, entry: str | None = None, on_error: OnError | None = None, *, order: str = ""
    ) -> Iterator[KernelRecord]:
        """`kernels`, streamed."""
        ...

    def blob(self, sha256: str) -> bytes:
        """A binary by its sha256; `BundleError` if it is missing or does not match."""
        ...

    def tune(self, key: str, samples: bool = True) -> TuneRecord | None:
        """The tune under `key` (None if absent or not to be served); without `samples`, its
        candidates hold no samples and no reasons (what serving uses: names, kernels, status)."""
        ...

    def tunes(
        self, operation: str | None = None, on_error: OnError | None = None
    ) -> list[TuneRecord]:
        """Every tune of one operation (nearest entries, to explain a miss)."""
        ...

    def each_tune(
        self,
        operation: str | None = None,
        on_error: OnError | None = None,
        limit: int = -1,
        *,
        order: str = "",
        samples: bool = True,
    ) -> Iterator[TuneRecord]:
        """`tunes`, streamed (without `samples`: as `tune` reads one)."""
        ...

    def refused(self, key: str) -> bool:
        """Whether the store holds `key` but must not serve it (no trusted signature)."""
        ...

    def foreign(
        self, backend: str, arch: str, toolchains: Iterable[str], device: str
    ) -> list[HeldElsewhere]:
        """What is held for this backend that other toolchains built or other devices
        measured: never served here (noted once, on the first miss)."""
        ...

    def put(
        self,
        kernels: Iterable[tuple[KernelRecord, bytes]] = (),
        tunes: Iterable[TuneRecord] = (),
        fingerprints: Iterable[tuple[str, str, dict[str, object]]] = (),
        held: set[str] | None = None,
        now: float | None = None,
    ) -> tuple[int, int]:
        """Store kernels (with their binaries), tunes and fingerprints at once, as created and
        used at `now` (default: the time of the call): how many of each were stored (a kernel
        another writer stored alike is kept, its key in `held`)."""
        ...

    def touch(self, last_used: Mapping[str, float]) -> int:
        """Set kernels' last-used times (a load by a writing process)."""
        ...
