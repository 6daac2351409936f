"""A tune the loaded bundle lacks, handed to the runtime's miss policy as a kernel's miss is
(`warmcli.runtime.misses`): explained by `warmcli.runtime.explain` (imported only then: a
serving process never explains) on the first miss of its key only. It owns no state and never
prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmcli.records import MissExplanation, TuneRecord
from warmcli.runtime.misses import Misses
from warmcli.runtime.tune import Tunable, TuneCache

if TYPE_CHECKING:
    from warmcli.runtime.store import Store


def tune_miss(
    misses: Misses,
    tunes: TuneCache,
    bundle: Store | None,
    device_identity: str,
    tunable: Tunable,
    key: str,
    shape_key: str,
    record: TuneRecord | None,
) -> None:
    """`tunable`'s tune under `key` (of `shape_key`), which `bundle` lacks (holding `record`
    under it, if any), to `misses`: explained over `tunes` on the device `device_identity`."""

    def explain() -> MissExplanation:
        from warmcli.runtime.explain import corrupt_entry, explain_tune, listed_tunes

        corrupt = tunes.corrupt(key)
        if corrupt is not None:
            return corrupt_entry("tune", key, label, corrupt)
        name = tunable.name
        assert bundle is not None
        listed = lambda: misses.listing("tune", name, lambda: listed_tunes(bundle, name))  # noqa: E731
        return explain_tune(
            bundle,
            tunable.name,
            tunable.checksum,
            tunable.candidates,
            key,
            shape_key,
            device_identity,
            record,
            listed,
        )

    label = f"{tunable.name} {shape_key}"
    misses.miss("tune", key, label, explain)
