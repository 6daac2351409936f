"""Progress bars for `warm run`: kernels compiled of those queued, candidates measured.

`RunProgress` is the `Observer` a run hands to the passes: each pass announces
its `StatisticsReader`, and a thread of the CLI polls it a few times a second to
move two Rich bars (the compile batch: kernels compiled / queued; tuning:
candidates measured / registered). A bar is shown only while a pass can advance
it: none in CompileOnly (it only queues), the compile bar only when there is a
batch to compile, the tuning bar only when there are candidates to measure. The
bars are transient and drawn only on a terminal; the command hides them under
`--json` and `--quiet`. It reads counts and draws; it never changes what a pass does.

`ShardProgress` is `warm run --dask`'s: one line per shard as it finishes on its
worker (what it stored, in how long) and, on a terminal, a transient bar of the
shards finished with the kernels compiled and candidates measured so far, summed
over the finished shards.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from warmcli.execution.snapshots import DeviceStatistics
from warmcli.execution.statistics import StatisticsReader

if TYPE_CHECKING:
    from warmcli.warming.fanout import ShardResult


def bar_counts(
    first: DeviceStatistics | None, current: DeviceStatistics
) -> tuple[int, int, int, int]:
    """(kernels compiled, to compile, candidates measured, to measure) for the bars: a kernel
    that failed to compile is done, as a candidate that failed is measured (a bar ends full).

    `first` is the CompileOnly pass's totals when `current` is a later pass: what it
    queued is what the CompileAndAutotune pass's batch compiles.
    """
    queued = current.compilation.queued + (first.compilation.queued if first else 0)
    compiled = current.compilation.compiled + current.compilation.failed  # done, as a candidate
    registered = max(
        current.autotune.candidates_registered,
        first.autotune.candidates_registered if first else 0,
    )
    measured = current.autotune.candidates_measured + current.autotune.candidates_failed
    return compiled, max(queued, compiled), measured, max(registered, measured)


class RunProgress:
    """Two transient bars fed by polling the running pass's reader; see the module doc."""

    def __init__(self, console: Console, interval: float = 0.1) -> None:
        self.interval = interval
        self._progress = _bars(console, "{task.description:<34}")
        self._compile = self._progress.add_task("kernels compiled", total=None, visible=False)
        self._tune = self._progress.add_task("candidates measured", total=None, visible=False)
        self._lock = threading.Lock()
        self._label = ""
        self._first: StatisticsReader | None = None
        self._reader: StatisticsReader | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="warm-progress", daemon=True)

    def __call__(self, label: str, reader: StatisticsReader) -> None:
        """The passes' observer: a new pass started, counting into `reader`."""
        with self._lock:
            if self._first is None:
                self._first = reader
            self._label, self._reader = label, reader
        self.refresh()

    def refresh(self) -> None:
        with self._lock:
            label, first, reader = self._label, self._first, self._reader
        if reader is None:
            return
        if label.startswith("Verify"):  # it compiles and measures nothing: no bar is shown
            for task in (self._compile, self._tune):  # (hidden now: the workload's next print
                self._progress.update(task, visible=False)  # redraws what was last drawn)
            self._progress.refresh()
            return
        compiled, to_compile, measured, to_measure = bar_counts(
            first.total() if first is not None and first is not reader else None, reader.total()
        )
        advances = label != "CompileOnly"  # it only queues: it compiles and measures nothing
        for task, done, total, what in (
            (self._compile, compiled, to_compile, "kernels compiled"),
            (self._tune, measured, to_measure, "candidates measured"),
        ):
            self._progress.update(
                task,
                completed=done,
                total=total or None,
                visible=advances and total > 0,
                description=f"{label}: {what}",
            )

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def __enter__(self) -> RunProgress:
        self._progress.start()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._progress.stop()


class ShardProgress:
    """`fan_out`'s `on_shard`: a line per finished shard, a bar on a terminal."""

    def __init__(self, console: Console) -> None:
        self._progress = _bars(console, "{task.description}", disable=not console.is_terminal)
        self._task = self._progress.add_task("shards finished", total=None)
        self._kernels = self._candidates = 0

    def __call__(self, result: ShardResult | None, count: int) -> None:
        if result is None:  # submitted: how many there are
            self._progress.update(self._task, total=count)
            return
        stored = result.report.get("stored") or {}
        for doc in result.report.get("passes", []):
            self._kernels += doc.get("compilation", {}).get("compiled", 0)
            self._candidates += doc.get("autotune", {}).get("candidates_measured", 0)
        self._progress.console.print(
            f"shard {result.shard} on {result.worker}: stored {stored.get('kernels', 0)} "
            f"kernel(s) and {stored.get('tunes', 0)} tune(s) in {result.seconds:.1f} s",
            markup=False,
            highlight=False,
        )
        self._progress.update(
            self._task,
            advance=1,
            description=f"shards finished ({self._kernels} kernels compiled, "
            f"{self._candidates} candidates measured)",
        )

    def __enter__(self) -> ShardProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()


def _bars(console: Console, text: str, disable: bool = False) -> Progress:
    """Transient bars: a description (`text`), the bar, done of total, time elapsed."""
    columns = (TextColumn(text), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True, disable=disable)
