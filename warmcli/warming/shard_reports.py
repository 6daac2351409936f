"""What a shard's `warm run --json` report says, read by the caller of `warm run --dask`.

`shard_passes` sums the shards' passes into the passes of one run, so `warm run --dask` shows
the statistics a local run shows; `said_done` says whether a report is a finished run's (where
a shard's exit status is lost, as in a Dask worker that ignores SIGCHLD, the only success
there is). A report is untrusted: a field missing or of another type is read as absent. This
module owns no state, starts nothing and never prints.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from warmcli.execution.snapshots import (
    AutotuneStatistics,
    CompilationStatistics,
    DeviceStatistics,
    ExecutionStatistics,
)
from warmcli.records import CompilerCommand, field_types
from warmcli.warming.passes import PassReport

_VIEWS: dict[str, Any] = dict(
    compilation=CompilationStatistics, autotune=AutotuneStatistics, execution=ExecutionStatistics
)


def said_done(report: Any) -> bool:
    """Whether a shard's `--json` report is a finished run's (its passes, verified or not
    checked; no `error`): where its exit status is lost, the only success there is."""
    fields = report if isinstance(report, dict) else {}
    return (
        "error" not in fields
        and isinstance(fields.get("passes"), list)
        and (fields.get("verified") is not False)
    )


def shard_passes(reports: Sequence[dict[str, Any]]) -> list[PassReport]:
    """The shards' passes (from their `--json` reports), summed pass by pass into those of
    one run: counts added per device and in total, the wall time the slowest shard's,
    the notes and compiler commands of all of them."""
    passes: list[PassReport] = []
    for docs in zip(*(r.get("passes", []) for r in reports), strict=False):
        summed = PassReport(docs[0]["mode"], 0.0, DeviceStatistics(), {})
        for doc in docs:
            summed.seconds = max(summed.seconds, float(doc.get("seconds", 0.0)))
            summed.total = summed.total + _statistics(doc)
            for device, stats in doc.get("devices", {}).items():
                before = summed.per_device.get(device, DeviceStatistics())
                summed.per_device[device] = before + _statistics(stats)
            summed.notes += [n for n in doc.get("notes", []) if n not in summed.notes]
            summed.commands += [CompilerCommand("", tuple(shlex.split(c))) for c in doc["commands"]]
        passes.append(summed)
    return passes


def _statistics(doc: dict[str, Any]) -> DeviceStatistics:
    """A `DeviceStatistics` from its JSON (`stats_json`'s, derived fields left out)."""
    views = []
    for name, view in _VIEWS.items():
        known = field_types(view)
        views.append(view(**{k: v for k, v in doc.get(name, {}).items() if k in known}))
    return DeviceStatistics(*views)
