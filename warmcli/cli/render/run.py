"""How `warm run` and `warm verify` look: each pass's counts per device, notes, the
compiler commands (`records.CompilerCommand`, shown under `--verbose`), misses, and the
run's JSON document (a note said again in a pass is shown once, with its count; the notes
before a failed run's line, one said of several kernels alike once: `folded_notes`). Pure
presentation over a `RunReport`; it owns no state and never
prints (the CLI does). Rich is imported by the renderables only: `warm run --json`
builds its document without it.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from warmcli.bundle.schema import FORMAT_VERSION
from warmcli.cli.render import add_row, line, listing
from warmcli.execution.snapshots import DeviceStatistics
from warmcli.execution.statistics import (
    KERNEL_LATER,
    KERNEL_OUTCOMES,
    TUNE_LATER,
    TUNE_OUTCOMES,
)
from warmcli.printable import printable
from warmcli.records import Record
from warmcli.warming.passes import PassReport, RunReport, did_something

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from warmcli.runtime.explain import MissExplanation

COMPILATION_KEYS = (
    *("registered", "queued", "compiled", "loaded", "failed"),
    *("abandoned", "refused", "stored", "batches"),
)
AUTOTUNE_KEYS = ("registered", "measured", "failed", "abandoned", "hits", "persisted")
EXECUTION_KEYS = ("executed", "discarded", "queued")
LABELS = {
    "compiler_processes": "processes",
    "candidates_measured": "candidates",
    "discarded_reads": "reads discarded",
    "stored": "into bundle",  # JSON: `stored`
}

# Why a workload may seem to launch nothing: its work done in processes it started
_RAISED = " raised during "  # a thread's note: `thread w raised during CompileOnly, and ...`
NOT_SEEN = (
    " in this process (what a process it starts launches, `pytest -n`'s workers, a "
    "subprocess's, a multiprocessing pool's, is not seen)"
)

# A run into a bundle this process may not write, which held all it reached
READ_ONLY = (
    "it is read-only here and held all the run reached: nothing written, the times of use "
    "of what it served not stamped"
)


def stats_json(stats: DeviceStatistics) -> dict[str, dict[str, Any]]:
    return {
        "compilation": {**_fields(stats.compilation), "settled": stats.compilation.settled},
        "autotune": {**_fields(stats.autotune), "settled": stats.autotune.settled},
        "execution": _fields(stats.execution),
    }


def _fields(record: Record) -> dict[str, Any]:
    """A statistics record's fields, each mapping (`misses`) a copy: `dataclasses.asdict`'s
    document, without the dataclass code it makes for a record's class on first use."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in record.as_fields().items()}


def settled_json(report: PassReport) -> dict[str, dict[str, int]]:
    """What the pass registered and how it has settled by the end of the run: work a pass
    registers settles to it even when a later pass does it (its queue, its gathered tunes)."""
    total = report.reader.total() if report.reader is not None else report.total
    c, a = total.compilation, total.autotune
    return {
        "compilation": {"registered": c.registered, "settled": c.settled}
        | {k: getattr(c, k) for k in (*KERNEL_OUTCOMES, *KERNEL_LATER)},
        "autotune": {"registered": a.registered, "settled": a.settled}
        | {k: getattr(a, k) for k in (*TUNE_OUTCOMES, *TUNE_LATER)},
    }


def run_json(report: RunReport) -> dict[str, Any]:
    return {
        "passes": [
            {
                "mode": p.mode,
                "seconds": round(p.seconds, 6),
                **stats_json(p.total),
                "devices": {d: stats_json(s) for d, s in p.per_device.items()},
                "settled_by_end": settled_json(p),
                "notes": p.notes,
                "commands": commands(p),
            }
            for p in report.passes
        ],
        "bundle": str(report.bundle),
        "devices": report.devices,
        "stored": {"kernels": report.stored_kernels, "tunes": report.stored_tunes},
        "read_only": report.unwritten or None,  # why it could not be written; it needed not
        "format": {"before": report.format_before, "after": FORMAT_VERSION},
        "verified": report.verified,
        "missing": report.missing,
        "signature": report.signature,
        "shard": report.shard or None,
        "explanations": [m.as_dict() for m in verify_misses(report)],
        "never_served": never_served(report),
        "launched_nothing": launched_nothing(report) and not report.shard,
    }


def verify_misses(report: RunReport) -> list[MissExplanation]:
    """Every kernel and tune the verify pass(es) missed, each with its reason."""
    return [m for p in report.passes if p.mode.startswith("Verify") for m in p.misses]


def never_served(report: RunReport) -> list[str]:
    """The kernels the verify pass(es) built that no bundle serves (`warmcli.unkeyed`)."""
    return [n for p in report.passes if p.mode.startswith("Verify") for n in p.never_served]


def miss_lines(misses: list[MissExplanation]) -> list[Text]:
    """One line per miss: the device it is on where the misses are on several (a replay
    of several `--arch`), what was missed, the part of its key that differs, both values;
    lines that would read alike (one label, two kernels) each end with their key's start."""
    from collections import Counter

    from rich.text import Text

    several = len({m.device for m in misses}) > 1
    lines = [(f"{printable(m.device)}: " if several else "") + m.line() for m in misses]
    seen = Counter(lines)
    return [
        Text(f"miss: {line}" + (f" (key {m.key[:16]})" if seen[line] > 1 else ""), style="red")
        for m, line in zip(misses, lines, strict=True)
    ]


def commands(report: PassReport) -> list[str]:
    """The compiler command lines a pass ran (one per compiler process)."""
    return [shlex.join(c.argv) for c in report.commands]


def _fmt(value: float) -> str:
    return f"{value:.3f} s" if isinstance(value, float) else str(value)


def _cell(values: object, key: str) -> str:
    """One count of a pass's table: `into bundle` with the PTX stored beside (`1 + 1 PTX`),
    the candidates measured with those that failed beside (`1 + 2 failed`)."""
    ptx = getattr(values, "ptx_stored", 0) if key == "stored" else 0
    failed = getattr(values, "candidates_failed", 0) if key == "candidates_measured" else 0
    return (
        _fmt(getattr(values, key))
        + (f" + {ptx} PTX" if ptx else "")
        + (f" + {failed} failed" if failed else "")
    )


def pass_table(index: int, report: PassReport, device: str, stats: DeviceStatistics) -> Table:
    """One pass on one device: compilation, autotune and execution side by side."""
    title = f"Pass {index} · {report.mode} · {device} · {report.seconds:.2f} s"
    table = listing(title, stacked=True)  # narrow: one list per view, not interleaved records
    columns = []
    for view, keys in (
        ("compilation", (*COMPILATION_KEYS, "compiler_processes", "seconds")),
        ("autotune", (*AUTOTUNE_KEYS, "pending", "candidates_measured", "seconds")),
        ("execution", (*EXECUTION_KEYS, "discarded_reads")),
    ):
        values = getattr(stats, view)
        table.add_column(view.capitalize(), style="bold")
        table.add_column("", justify="right")
        columns.append([(LABELS.get(k, k.replace("_", " ")), _cell(values, k)) for k in keys])
    for i in range(max(len(c) for c in columns)):
        row: list[str] = []
        for column in columns:
            row += list(column[i]) if i < len(column) else ["", ""]
        add_row(table, *row)
    return table


def launched_nothing(report: RunReport) -> bool:
    """Whether no pass registered, tuned or launched anything: under `--shard`, that this
    shard's part is empty (a shard sees only its part), not that the workload did nothing."""
    return bool(report.passes) and not any(did_something(p.total) for p in report.passes)


def run_renderable(report: RunReport, *, verbose: bool = False, tables: bool = True) -> Group:
    """The passes' tables (unless not `tables`), notes, compiler commands when `verbose`.
    Under the tables, a pass's commands and notes end with a blank line, as a table does."""
    from rich.console import Group

    parts: list[Any] = []
    for i, p in enumerate(report.passes, start=1):
        if tables:
            for device, stats in sorted(p.per_device.items()) or [("no device", p.total)]:
                parts.append(pass_table(i, p, device, stats))
        below: list[Any] = []
        if verbose:
            below += [line(f"  $ {c}", style="dim") for c in commands(p)]
        times = Counter(p.notes)  # a note said again in the pass: once, with its count
        below += [
            line(f"  note: {n}" + (f" ({times[n]} times)" if times[n] > 1 else ""), style="yellow")
            for n in times
        ]
        parts += below + ([line("")] if below and tables else [])
    if launched_nothing(report) and report.shard:
        said = f"shard {report.shard}: nothing of this workload falls in this shard"
        parts.append(line(said, style="yellow"))
    elif launched_nothing(report):
        said = "the workload launched nothing and tuned nothing" + NOT_SEEN
        if any(n.startswith("thread ") and _RAISED in n for p in report.passes for n in p.notes):
            said += "; a thread of it raised before, as the notes above say"
        parts.append(line(said, style="yellow"))
    if any(not p.mode.startswith("Verify") for p in report.passes):  # a replay stores nothing
        parts.append(
            line(
                f"bundle {report.bundle}: stored {report.stored_kernels} new kernel(s) "
                f"and {report.stored_tunes} new tune(s)"
                + (f" ({READ_ONLY})" if report.unwritten else "")
            )
        )
    if report.format_before not in (None, FORMAT_VERSION):
        before = report.format_before
        parts.append(
            line(
                f"bundle {report.bundle}: migrated from format {before} to {FORMAT_VERSION}: "
                f"a warm that reads only format {before} cannot read it now",
                style="yellow",
            )
        )
    if report.signature:
        parts.append(line(f"bundle {report.bundle}: {report.signature}", style="yellow"))
    if report.shard:
        parts.append(line(f"shard {report.shard}: this shard's part only; warm merge joins them"))
    never = never_served(report)  # not misses: said as such, whatever the verdict
    parts += [line(f"verify: {printable(n)}", style="yellow") for n in never]
    tunes = sum(TUNE_NEVER in n for n in never)  # (`warming.passes.verify_pass`'s words)
    none = "0 kernels" + (
        f" a bundle can serve ({n} never served)" if (n := len(never) - tunes) else ""
    )
    none += ", measured 0 tunes" + (f" a bundle can serve ({tunes} never served)" if tunes else "")
    if report.verified is True and report.children_launched:  # theirs is not in it
        said = "the bundle is complete for what this process launched, not for what the"
        parts.append(line(f"verify: compiled {none}: {said} {CHILDREN}"))
    elif report.verified is True:
        said = f"verify: compiled {none}: the bundle is complete{_pending(report)}"
        parts.append(line(said, style="green"))
    elif report.verified is False:
        parts += [line(f"verify: {m}", style="red") for m in report.missing]
        parts += miss_lines(verify_misses(report))
    return Group(*parts)


def _pending(report: RunReport) -> str:
    """What the verify line adds where its pass left tunes pending (a GPU-less `--arch`
    pre-build's): who measures them, since production on the GPU would, each at its first
    call (a slower start), until a `warm run` there does."""
    pending = sum(p.total.autotune.pending for p in report.passes if p.mode.startswith("Verify"))
    if not pending:
        return ""
    return (
        f", but for its {pending} tune(s) pending: no GPU here measures them; `warm run` "
        "into it on the GPU does (production there measures each at its first call)"
    )


TUNE_NEVER = " is measured in each process, never served ("  # a tune's, not a kernel's
ALIKE_NAMED = 5  # labels the line folding several kernels' notes names (`folded_notes`)


def folded_notes(notes: Iterable[str]) -> list[str]:
    """`notes` (a failed pass's, said before its error line) each once, and the compile notes
    that say one text of several kernels (`compile of L (key K) timed out: NVRTC did not
    finish within 0.1 s; ...`, one per kernel of a batch past `--compile-timeout`) as the
    first whole, then one line counting the others and naming the first `ALIKE_NAMED`."""
    alike: dict[str, list[tuple[str, str]]] = {}  # what is said: (note, label) of each
    for note in dict.fromkeys(notes):
        label, keyed, rest = note.removeprefix("compile of ").partition(" (key ")
        said = rest.partition(") ")[2] if note.startswith("compile of ") and keyed else ""
        alike.setdefault(said or note, []).append((note, label))
    lines: list[str] = []
    for said, group in alike.items():
        lines.append(group[0][0])
        others = [label for _, label in group[1:]]
        if others:
            named = ", ".join(others[:ALIKE_NAMED])
            named += f", and {len(others) - ALIKE_NAMED} more" * (len(others) > ALIKE_NAMED)
            what = said.partition(":")[0]  # `timed out`, `failed`
            lines.append(f"compile of {len(others)} more kernel(s) {what} alike: {named}")
    return lines


CHILDREN = "children it forked launched (the note above)"  # (`RunReport.children_launched`)
