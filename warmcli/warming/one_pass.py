"""One pass of a workload: `run_pass` runs it once on every runtime under a process mode (the
host runtime it asks for besides: `warmcli.warming.companions`), inside that mode's override and
a collector of its own, which an observer may read while it runs, and returns a `PassReport`
(its time, its statistics in all and per device, its notes, misses and compiler commands);
`did_something` says whether a pass registered or launched anything, `merged` makes several
passes' reports one. A kernel no compiler here could build fails the pass once its entry
returned, where the workload caught that error (`_refused`). What children the workload forked
launched is said in a note (`warmcli.warming.forked_launches`: not stored). Once its entry
returned, a pass waits for the launches and tunes a daemon thread has under way on its runtimes,
as retiring them does (`warmcli.warming.ended`), so what they build and measure is the pass's,
stored and judged. `warmcli.warming.passes` runs the warming passes and the verify pass with it.
A pass ended by warm's own error hands that error the notes the pass had made
(`WarmError.notes_before`). Each pass starts in the environment the first did (what the workload
set in `os.environ` is undone after it, as a fresh process would start: a variable a compiler reads,
left set, built the next pass's kernels otherwise), but for what a module's import set, never
imported again (`imported_environment`). It owns no state and never prints.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.errors import DiscardedReadWarning, WarmError, WorkloadError, message_of
from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride, note_reported
from warmcli.execution.snapshots import DeviceStatistics
from warmcli.execution.statistics import StatisticsCollector, StatisticsReader
from warmcli.records import CompilerCommand, Record, factory
from warmcli.runtime.runtime import Runtime
from warmcli.warming import imported_environment
from warmcli.warming.companions import Companions
from warmcli.warming.ended import wait_under_way
from warmcli.warming.forked_launches import note as forked_note
from warmcli.warming.forked_launches import watching
from warmcli.warming.leftovers import where
from warmcli.warming.worker_journal import note_pass
from warmcli.warming.workload import Workload

if TYPE_CHECKING:  # (a miss's, explained where one is: a run of stored kernels has none)
    from warmcli.runtime.explain import MissExplanation

Observer = Callable[[str, StatisticsReader], None]


class PassReport(Record, frozen=False):
    """One pass's report (a `Record`: no code generated at import, as a dataclass's was, ~0.5 ms
    of every `warm run`); its `reader` is in neither its repr nor its equality."""

    mode: str
    seconds: float
    total: DeviceStatistics
    per_device: dict[str, DeviceStatistics]
    notes: list[str] = factory(list)
    misses: list[MissExplanation] = factory(list)
    commands: list[CompilerCommand] = factory(list)  # compiler processes run
    # The pass's collector, read later: what it registered settles there even after it ends.
    reader: StatisticsReader | None = None
    forked: list[int] = factory(list)  # the children that launched (their note)
    # a verify pass's kernels built in each process, never served (`warmcli.unkeyed`): no miss
    never_served: list[str] = factory(list)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._names if name != "reader")

    def __repr__(self) -> str:
        shown = (f"{name}={getattr(self, name)!r}" for name in self._names if name != "reader")
        return f"{type(self).__qualname__}({', '.join(shown)})"


def did_something(stats: DeviceStatistics) -> bool:
    """Whether a pass registered a kernel or a tune, or launched anything."""
    e, c = stats.execution, stats.compilation
    return bool(c.registered or stats.autotune.registered or e.executed + e.discarded + e.queued)


def run_pass(
    mode: ProcessMode,
    label: str,
    workload: Workload,
    runtimes: Sequence[Runtime],
    observer: Observer | None = None,
    finish: Callable[[bool], None] | None = None,
    extra: Companions | None = None,
) -> PassReport:
    """Run the workload once on every runtime under `mode` (the host runtime it asks for
    besides: `extra`'s); `finish` runs inside the override even when the workload fails
    (persisting what was obtained so far), told whether the workload ran to its end."""
    from warmcli.runtime.binding import companions

    note_pass(label)
    collector = StatisticsCollector()
    if observer is not None:
        observer(label, collector.reader())
    started, environ = time.perf_counter(), config.environment()  # restored after it
    imported_environment.watch()
    with ProcessModeOverride(mode, collector), warnings.catch_warnings():
        # An allowed discarded read is noted (the report's notes say it); not warned again.
        warnings.simplefilter("ignore", DiscardedReadWarning)
        completed = False
        try:
            with (
                companions(extra.provide) if extra else contextlib.nullcontext(),
                watching(runtimes, extra) as children,
            ):
                for runtime in runtimes:
                    workload.run(runtime, label)
                    runtime.synchronize()
                # a daemon thread's launch or tune under way as the entry returned: the pass's
                wait_under_way([*runtimes, *(extra.runtimes if extra else ())])
                for runtime in extra.runtimes if extra else ():
                    runtime.synchronize()
                _refused([*runtimes, *(extra.runtimes if extra else ())], workload, label)
            if children:  # what a child it forked launched: said, as nothing of it is stored
                note_reported(forked_note(label, children))
            completed = True
        except WarmError as exc:  # the notes made before it: said with its line
            exc.notes_before = tuple(collector.reader().notes())
            raise
        finally:  # a variable the workload set builds no kernel of the next pass: it starts anew
            config.restore_environment(imported_environment.over(environ))
            if finish is not None:
                finish(completed)
    seconds = time.perf_counter() - started
    reader = collector.reader()
    return PassReport(
        label,
        seconds,
        reader.total(),
        reader.per_device(),
        reader.notes(),
        reader.misses(),
        reader.commands(),
        reader,
        children,
    )


def _refused(runtimes: Sequence[Runtime], workload: Workload, label: str) -> None:
    """A kernel the pass had to build that no compiler here could (`WARM_CC` not found), its
    error caught by the workload (pytest's test): the run fails as where it was let out."""
    for runtime in runtimes:
        if refused := runtime.kernels.refused:
            exc = refused.pop()
            at = where(exc, workload.path).rstrip(": ")
            raise WorkloadError(f"{message_of(exc).strip()}; needed at {at} during {label}")


def merged(reports: list[PassReport]) -> PassReport:
    """Several passes' reports as one (the verify pass's, on devices that execute and on those
    that only compile)."""
    total = DeviceStatistics()
    per_device: dict[str, DeviceStatistics] = {}
    for r in reports:
        total = total + r.total
        per_device.update(r.per_device)
    return PassReport(
        " + ".join(r.mode for r in reports),
        sum(r.seconds for r in reports),
        total,
        per_device,
        [n for r in reports for n in r.notes],
        [m for r in reports for m in r.misses],
        [c for r in reports for c in r.commands],
        forked=[pid for r in reports for pid in r.forked],
        never_served=[n for r in reports for n in r.never_served],
    )
