"""How reports look: Rich tables and JSON documents built from the library's reports.

Pure presentation: every function takes a report or a bundle's records and
returns a Rich renderable or a JSON-ready dict. Every string shown goes through
`line` (or `add_row`): a Rich `Text`, never markup, with control characters escaped
(`warmcli.printable`), since a bundle's text is untrusted. Nothing here runs a pass, opens a
device or writes a file; the CLI decides where the output goes.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from warmcli.bundle.signing import SignatureReport
from warmcli.execution.statistics import (
    KERNEL_LATER,
    KERNEL_OUTCOMES,
    TUNE_LATER,
    TUNE_OUTCOMES,
    DeviceStatistics,
)
from warmcli.ops.clean import CleanReport, Removal, where
from warmcli.ops.diff import BundleDiff
from warmcli.ops.merge import MergeReport
from warmcli.ops.verify import IntegrityReport
from warmcli.printable import printable
from warmcli.records import KernelRecord, TuneRecord
from warmcli.runtime.explain import MissExplanation
from warmcli.runtime.kernel_cache import COMMAND_NOTE
from warmcli.warming.passes import PassReport, RunReport

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


def listing(title: str | None = None) -> Table:
    """The table every listing uses: a title on the left, a rule under the header."""
    shown = None if title is None else line(title)
    return Table(title=shown, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)


def line(text: object, style: str = "") -> Text:
    """`text` shown as it is: no markup, every control character visibly escaped."""
    return Text(printable(text), style=style)


def add_row(table: Table, *cells: object, style: str | None = None) -> None:
    """A table row of `line`s."""
    table.add_row(*(line(c) for c in cells), style=style)


def stats_json(stats: DeviceStatistics) -> dict[str, dict[str, Any]]:
    return {
        "compilation": {
            **dataclasses.asdict(stats.compilation),
            "settled": stats.compilation.settled,
        },
        "autotune": {**dataclasses.asdict(stats.autotune), "settled": stats.autotune.settled},
        "execution": dataclasses.asdict(stats.execution),
    }


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
                "notes": [n for n in p.notes if not n.startswith(COMMAND_NOTE)],
                "commands": commands(p),
            }
            for p in report.passes
        ],
        "bundle": str(report.bundle),
        "devices": report.devices,
        "stored": {"kernels": report.stored_kernels, "tunes": report.stored_tunes},
        "verified": report.verified,
        "missing": report.missing,
        "signature": report.signature,
        "shard": report.shard or None,
        "explanations": [m.as_dict() for m in verify_misses(report)],
        "launched_nothing": not any(did_something(p.total) for p in report.passes),
    }


def verify_misses(report: RunReport) -> list[MissExplanation]:
    """Every kernel and tune the verify pass(es) missed, each with its reason."""
    return [m for p in report.passes if p.mode.startswith("Verify") for m in p.misses]


def miss_lines(misses: list[MissExplanation]) -> list[Text]:
    """One line per miss: what was missed, the part of its key that differs, both values."""
    return [Text(f"miss: {m.line()}", style="red") for m in misses]


def commands(report: PassReport) -> list[str]:
    """The compiler command lines a pass ran (one per compiler process)."""
    return [n[len(COMMAND_NOTE) :] for n in report.notes if n.startswith(COMMAND_NOTE)]


def _fmt(value: float) -> str:
    return f"{value:.3f} s" if isinstance(value, float) else str(value)


def pass_table(index: int, report: PassReport, device: str, stats: DeviceStatistics) -> Table:
    """One pass on one device: compilation, autotune and execution side by side."""
    table = listing(f"Pass {index} · {report.mode} · {device} · {report.seconds:.2f} s")
    columns = []
    for view, keys in (
        ("compilation", (*COMPILATION_KEYS, "compiler_processes", "seconds")),
        ("autotune", (*AUTOTUNE_KEYS, "pending", "candidates_measured", "seconds")),
        ("execution", (*EXECUTION_KEYS, "discarded_reads")),
    ):
        values = getattr(stats, view)
        table.add_column(view.capitalize(), style="bold")
        table.add_column("", justify="right")
        columns.append(
            [(LABELS.get(k, k.replace("_", " ")), _fmt(getattr(values, k))) for k in keys]
        )
    for i in range(max(len(c) for c in columns)):
        row: list[str] = []
        for column in columns:
            row += list(column[i]) if i < len(column) else ["", ""]
        add_row(table, *row)
    return table


def did_something(stats: DeviceStatistics) -> bool:
    """Whether a pass registered a kernel or a tune, or launched anything."""
    e = stats.execution
    return bool(
        stats.compilation.registered
        or stats.autotune.registered
        or e.executed + e.discarded + e.queued
    )


def run_renderable(report: RunReport, *, verbose: bool = False, tables: bool = True) -> Group:
    """The passes' tables (unless not `tables`), notes, compiler commands when `verbose`."""
    parts: list[Any] = []
    for i, p in enumerate(report.passes, start=1):
        if tables:
            for device, stats in sorted(p.per_device.items()) or [("no device", p.total)]:
                parts.append(pass_table(i, p, device, stats))
        if verbose:
            parts += [line(f"  $ {c}", style="dim") for c in commands(p)]
        parts += [
            line(f"  note: {n}", style="yellow") for n in p.notes if not n.startswith(COMMAND_NOTE)
        ]
    if report.passes and not any(did_something(p.total) for p in report.passes):
        parts.append(line("the workload launched nothing and tuned nothing", style="yellow"))
    if any(not p.mode.startswith("Verify") for p in report.passes):  # a replay stores nothing
        parts.append(
            line(
                f"bundle {report.bundle}: stored {report.stored_kernels} new kernel(s) "
                f"and {report.stored_tunes} new tune(s)"
            )
        )
    if report.signature:
        parts.append(line(f"bundle {report.bundle}: {report.signature}", style="yellow"))
    if report.shard:
        parts.append(line(f"shard {report.shard}: this shard's part only; warm merge joins them"))
    if report.verified is True:
        parts.append(
            line(
                "verify: compiled 0 kernels, measured 0 tunes: the bundle is complete",
                style="green",
            )
        )
    elif report.verified is False:
        parts += [line(f"verify: {m}", style="red") for m in report.missing]
        parts += miss_lines(verify_misses(report))
    return Group(*parts)


def _when(stamp: str | float | None, timespec: str = "seconds") -> str:
    try:
        return datetime.datetime.fromtimestamp(float(stamp or "")).isoformat(timespec=timespec)
    except ValueError:
        return str(stamp)


def natural(text: object) -> list[Any]:
    """A sort key that orders numbers as numbers: `BLOCK=128` before `BLOCK=1024`, shape
    `64x64` before `200x200` (text and numbers alternate, so any two keys compare)."""
    return [int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(str(text)))]


_DIGITS = re.compile("([0-9]+)")


def kernel_json(
    k: KernelRecord,
    usage: tuple[float, float] | None = None,
    shared_by: int = 1,
    share: int | None = None,
    candidates: list[str] | None = None,
) -> dict[str, Any]:
    """One kernel. A batch compiles several kernels into one binary: `blob_bytes` and
    `batch_seconds` are that binary's, `bytes` and `seconds` this kernel's share of them
    (`share`: its bytes, so the shares of one binary add up to it exactly)."""
    created, last_used = usage or (None, None)
    shared_by = max(shared_by, 1)
    return {
        "key": k.key,
        "device": k.device,
        "backend": k.backend,
        "arch": k.arch,
        "entry": k.entry,
        "label": k.label,
        "candidates": candidates or [],
        "options": _json_field(k.components.get("options"), []),
        "defines": dict(_json_field(k.components.get("defines"), [])),
        "bytes": k.size // shared_by if share is None else share,
        "blob_bytes": k.size,
        "shared_by": shared_by,
        "sha256": k.sha256,
        "toolchain": k.toolchain,
        "seconds": k.seconds / shared_by,
        "batch_seconds": k.seconds,
        "created": created,
        "last_used": last_used,
    }


def _json_field(text: str | None, empty: Any) -> Any:
    """A key component kept as JSON text (options, defines), or `empty` if it is not."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return empty
    return value if isinstance(value, type(empty)) else empty


def kernel_order(k: KernelRecord) -> tuple[Any, ...]:
    """How kernels are listed: by device, arch and label, numbers as numbers."""
    return (k.device, k.arch, natural(k.label), k.key)


def kernels_json(
    kernels: list[KernelRecord],
    tunes: list[TuneRecord],
    usage: dict[str, tuple[float, float]],
) -> list[dict[str, Any]]:
    """Every kernel's `kernel_json`, by device, arch and label (numbers as numbers): each
    named by the tunable candidates it is, and given its share of a shared binary."""
    named: dict[str, set[str]] = {}
    for t in tunes:
        for c in t.candidates:
            named.setdefault(c.kernel_key, set()).add(f"{t.operation}/{c.name}")
    users = Counter(k.sha256 for k in kernels)
    given: Counter[str] = Counter()
    docs = []
    for k in sorted(kernels, key=kernel_order):
        n = users[k.sha256]
        share = k.size // n + (1 if given[k.sha256] < k.size % n else 0)
        given[k.sha256] += 1
        cands = sorted(named.get(k.key, ()), key=natural)
        docs.append(kernel_json(k, usage.get(k.key), n, share, cands))
    return docs


def kernel_name(k: dict[str, Any]) -> str:
    """How a table names a kernel (its `kernel_json`): the tunable candidates it is, else
    its label, then its compile options, so that two different kernels read differently."""
    name = ", ".join(k.get("candidates") or ()) or k["label"]
    if k.get("candidates") and k.get("defines"):
        name += f" [{','.join(f'{d}={v}' for d, v in k['defines'].items())}]"
    return " ".join([name, *map(str, k.get("options") or ())])


def _tune_brief(t: TuneRecord) -> dict[str, Any]:
    """What names a tune and its decision, without the evidence."""
    return {
        "key": t.key,
        "operation": t.operation,
        "shape": t.shape_key,
        "device": t.device,
        "status": t.status,
        "pick": t.pick,
        "pick_kernel": next((c.kernel_key for c in t.candidates if c.name == t.pick), None),
    }


def tune_json(t: TuneRecord) -> dict[str, Any]:
    picked = next((c for c in t.candidates if c.name == t.pick), None)
    best = picked.seconds if picked is not None else None
    return {
        **_tune_brief(t),
        "checksum": t.checksum,
        "measured_at": t.measured_at,
        "candidates": [
            {
                "name": c.name,
                "kernel": c.kernel_key,
                "seconds": c.seconds,
                "status": c.status,
                "reason": c.reason,
                "samples": list(c.samples),
                "ratio": (c.seconds / best) if (best and c.seconds is not None) else None,
            }
            for c in t.candidates
        ],
    }


def tune_order(t: TuneRecord) -> tuple[Any, ...]:
    """Tunes by operation, then shape (numbers as numbers), then device."""
    return (natural(t.operation), natural(t.shape_key), t.device, t.key)


MANIFEST_TYPES: dict[str, type] = {"format_version": int, "created": float, "updated": float}


def manifest_json(manifest: dict[str, str]) -> dict[str, Any]:
    """The manifest with its numbers as numbers (the bundle keeps text; a value that is
    not the number it should be is shown as it is)."""
    out: dict[str, Any] = {}
    for key, value in manifest.items():
        try:
            out[key] = MANIFEST_TYPES.get(key, str)(value)
        except ValueError:
            out[key] = value
    return out


def stats_document(
    manifest: dict[str, str],
    fingerprints: list[dict[str, Any]],
    kernels: Iterable[tuple[KernelRecord, tuple[float, float] | None]],
    tunes: Iterable[TuneRecord],
    shared: dict[str, int] | None = None,
    named: dict[str, set[str]] | None = None,
) -> dict[str, Any]:
    """The `warm stats --json` document; its "kernels" and "tunes" are iterators, each
    entry converted as it is read (stream them, or list them). `shared`: how many kernels
    use each binary used by more than one (so each gets its share of it); `named`: the
    tunable candidates each kernel key is."""
    shared = shared or {}
    named = named or {}
    given: Counter[str] = Counter()

    def one(k: KernelRecord, usage: tuple[float, float] | None) -> dict[str, Any]:
        n = shared.get(k.sha256, 1)
        share = k.size // n + (1 if given[k.sha256] < k.size % n else 0)
        if n > 1:
            given[k.sha256] += 1
        return kernel_json(k, usage, n, share, sorted(named.get(k.key, ()), key=natural))

    return {
        "manifest": manifest_json(manifest),
        "fingerprints": fingerprints,
        "kernels": (one(k, usage) for k, usage in kernels),
        "tunes": map(tune_json, tunes),
    }


TUNE_TABLES = 10  # more tunes than this are listed one line each (--explain: every candidate)


def kernels_table(title: str, kernels: list[dict[str, Any]]) -> Table:
    """One row per kernel (its `kernel_json`): where, what, its share of its binary's size
    and compile time (a batch's kernels share one binary), its key, its last use."""
    table = listing(title)
    table.add_column("device", no_wrap=True)
    table.add_column("kernel", overflow="fold")
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("compile", justify="right", no_wrap=True)
    table.add_column("key", no_wrap=True)
    table.add_column("last used", no_wrap=True)
    for k in kernels:
        used = _when(k.get("last_used"), "minutes").replace("T", " ") if k.get("last_used") else "-"
        add_row(
            table,
            where(k["device"], k["arch"]),
            kernel_name(k),
            f"{k['bytes']:,}",
            f"{k['seconds']:.3f}",
            k["key"][:8],
            used,
        )
    return table


def pick_figures(t: dict[str, Any]) -> tuple[str, str]:
    """A tune's (`tune_json`) pick median, and how much slower its runner-up is."""
    ok = [c for c in t["candidates"] if c["status"] == "ok" and c["seconds"] is not None]
    times = sorted(c["seconds"] for c in ok)
    picked = next((c["seconds"] for c in ok if c["name"] == t["pick"]), None)
    runner = f"{times[1] / times[0]:.2f}×" if len(times) > 1 and times[0] > 0 else "-"
    return _us(picked), runner


def tunes_table(title: str, tunes: list[dict[str, Any]]) -> Table:
    """One line per tune (its `tune_json`): the pick, its median, the runner-up's ratio."""
    table = listing(title)
    table.add_column("operation", overflow="fold")
    table.add_column("shape", overflow="fold")
    table.add_column("device", overflow="fold")
    table.add_column("pick", overflow="fold")
    table.add_column("median", justify="right", no_wrap=True)
    table.add_column("runner-up", justify="right", no_wrap=True)
    table.add_column("candidates", justify="right", no_wrap=True)
    for t in tunes:
        median, runner = pick_figures(t)
        pick = t["pick"] or t["status"]
        add_row(
            table,
            t["operation"],
            t["shape"],
            device_brief(t["device"]),
            pick,
            median,
            runner,
            str(len(t["candidates"])),
        )
    return table


def candidates_table(t: dict[str, Any]) -> list[Any]:
    """A tune's heading line and every candidate's median, ratio to the pick and status."""
    heading = Text.assemble(
        (f"{printable(t['operation'])} ", "bold"),
        printable(t["shape"]),
        " → ",
        (printable(t["pick"] or t["status"]), "bold green"),
        (f"   on {printable(t['device'])}", "dim"),
    )
    table = listing()
    for col in ("candidate", "median", "vs pick", "status"):
        table.add_column(col, justify="right" if col in ("median", "vs pick") else "left")
    for c in sorted(t["candidates"], key=lambda c: (c["seconds"] is None, c["seconds"] or 0)):
        ratio = f"{c['ratio']:.2f}×" if c["ratio"] is not None else "-"
        status = c["status"] if not c["reason"] else f"{c['status']}: {c['reason'].splitlines()[0]}"
        style = "bold green" if c["name"] == t["pick"] else None
        add_row(table, c["name"], _us(c["seconds"]), ratio, status, style=style)
    return [heading, table]


def manifest_grid(path: str, m: dict[str, Any], fingerprints: list[dict[str, Any]]) -> Table:
    """The bundle's path, format and times, and every toolchain and device that wrote it."""
    head = Table.grid(padding=(0, 2))
    head.add_column(no_wrap=True)
    head.add_column(overflow="fold")
    add_row(head, "bundle", path)
    add_row(head, "format", f"{m.get('format_version')} (warm {m.get('warm_version')})")
    add_row(head, "created", _when(m.get("created")))
    add_row(head, "updated", _when(m.get("updated")))
    for fp in fingerprints:
        add_row(head, str(fp["kind"]), str(fp["identity"]).split(":", 1)[-1])
    return head


def stats_renderable(path: str, doc: dict[str, Any], *, every_candidate: bool = False) -> Group:
    """The manifest, the contents, every kernel, and the tunes: each with its candidates
    when there are few (or `every_candidate`), else one line each."""
    parts: list[Any] = [
        manifest_grid(path, doc["manifest"], doc["fingerprints"]),
        summary_table(doc),
        kernels_table(f"Kernels ({len(doc['kernels'])})", doc["kernels"]),
    ]
    tunes = doc["tunes"]
    if every_candidate or len(tunes) <= TUNE_TABLES:
        for t in tunes:
            parts += candidates_table(t)
    else:
        parts.append(tunes_table(f"Tunes ({len(tunes)})", tunes))
        parts.append(line(EXPLAIN_HINT, style="dim"))
    return Group(*parts)


EXPLAIN_HINT = "every candidate of one operation: warm stats --explain OPERATION; all: --json"


def contents_table() -> Table:
    """The empty Contents table: a row per device and arch, then per tunable and device."""
    table = listing("Contents")
    table.add_column("device / tunable", overflow="fold")
    table.add_column("arch", no_wrap=True)
    for col in ("kernels", "binary bytes", "tunes", "pending"):
        table.add_column(col, justify="right", no_wrap=True)
    return table


def device_brief(device: str) -> str:
    """A device fingerprint (`backend|name|arch|driver`) as `name arch`."""
    parts = device.split("|")
    return f"{parts[1]} {parts[2]}" if len(parts) >= 4 else device


def tunable_arch(device: str) -> str:
    """The arch field of a device fingerprint (`backend|name|arch|driver`)."""
    return device.split("|")[2] if device.count("|") >= 3 else device


def summary_table(doc: dict[str, Any]) -> Table:
    """One row per device and arch (kernels, binary bytes), one per tunable and device."""
    table = contents_table()
    places: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for k in doc["kernels"]:
        places.setdefault((k["device"], k["arch"]), []).append(k)
    for (device, arch), ks in sorted(places.items()):
        size = sum({k["sha256"]: k["blob_bytes"] for k in ks}.values())
        add_row(table, device, arch, str(len(ks)), f"{size:,}", "", "")
    tunables: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in doc["tunes"]:
        tunables.setdefault((t["operation"], t["device"]), []).append(t)
    for (operation, device), ts in sorted(tunables.items()):
        pending = sum(1 for t in ts if t["status"] == "pending")
        add_row(
            table,
            f"{operation} on {device}",
            tunable_arch(device),
            "",
            "",
            str(len(ts)),
            str(pending),
        )
    return table


def _status_line(ok: bool, good: str, bad: str) -> Text:
    return line(good, style="green") if ok else line(bad, style="red")


def integrity_json(report: IntegrityReport) -> dict[str, Any]:
    return {**dataclasses.asdict(report), "ok": report.ok}


def integrity_renderable(report: IntegrityReport) -> Group:
    counts = f"{report.kernels} kernel(s), {report.blobs} blob(s), {report.tunes} tune(s)"
    parts: list[Any] = [
        _status_line(
            report.ok,
            f"integrity: {report.path}: format {report.format_version}, {counts}: sound",
            f"integrity: {report.path}: {len(report.problems) + report.unlisted} problem(s) "
            f"in {counts}",
        )
    ]
    parts += [line(f"  {p}", style="red") for p in report.problems]
    if report.unlisted:
        parts.append(line(f"  and {report.unlisted:,} more problem(s) not listed", style="red"))
    return Group(*parts, *signature_lines(report.signatures))


def signature_lines(report: SignatureReport) -> list[Text]:
    """One line per signature (which key, valid, trusted, what it covers), or "unsigned"."""
    if not report.signatures:
        return [line("signature: unsigned", style="yellow")]
    lines = []
    for s in report.signatures:
        state = "valid" if s.valid else "INVALID"
        if s.trusted is not None:
            state += ", trusted" if s.trusted else ", not trusted"
        lines.append(
            line(
                f"signature: key {s.key_id}, signed {_when(s.signed_at)}: {state}, "
                f"covers {s.covers} of {report.rows} row(s)",
                style="green" if s.valid and s.trusted is not False else "red",
            )
        )
    if report.uncovered and not report.trust_required:
        lines.append(line(f"  {report.uncovered} row(s) no valid signature covers", style="yellow"))
    return lines


def merge_json(report: MergeReport) -> dict[str, Any]:
    doc = dataclasses.asdict(report)
    doc["out"] = str(report.out)
    doc["contributed"] = {s: {"kernels": k, "tunes": t} for s, (k, t) in report.contributed.items()}
    return doc


def merge_renderable(report: MergeReport) -> Group:
    parts: list[Any] = [
        line(
            f"merged {len(report.sources)} bundle(s) into {report.out}: {report.kernels} "
            f"kernel(s), {report.tunes} tune(s), {report.fingerprints} fingerprint(s)"
        )
    ]
    for source, (k, t) in report.contributed.items():
        parts.append(line(f"  from {source}: {k} kernel(s), {t} tune(s)"))
    if report.signature:
        parts.append(line(f"  {report.out}: {report.signature}", style="yellow"))
    for c in report.choices:
        parts.append(
            line(
                f"  tune {c.operation} {c.shape} on {c.device}: kept {c.kept_pick or 'pending'} "
                f"measured {_when(str(c.kept_measured_at))} in {c.kept} (newer); dropped "
                f"{c.dropped_pick or 'pending'} measured {_when(str(c.dropped_measured_at))} "
                f"in {c.dropped}",
                style="yellow",
            )
        )
    return Group(*parts)


def diff_json(diff: BundleDiff) -> dict[str, Any]:
    return {
        "a": diff.a,
        "b": diff.b,
        "same": diff.same,
        "kernels": {
            "only_a": kernels_json(diff.kernels_only_a, diff.tunes_only_a, diff.usage_a),
            "only_b": kernels_json(diff.kernels_only_b, diff.tunes_only_b, diff.usage_b),
            "shared": diff.kernels_shared,
            "only_a_count": diff.count("kernels_only_a"),
            "only_b_count": diff.count("kernels_only_b"),
        },
        "tunes": {
            "only_a": [_tune_brief(t) for t in sorted(diff.tunes_only_a, key=tune_order)],
            "only_b": [_tune_brief(t) for t in sorted(diff.tunes_only_b, key=tune_order)],
            "shared": diff.tunes_shared,
            "picks_changed": [dataclasses.asdict(c) for c in diff.picks_changed],
            "only_a_count": diff.count("tunes_only_a"),
            "only_b_count": diff.count("tunes_only_b"),
            "picks_changed_count": diff.count("picks_changed"),
        },
    }


def _unlisted(diff: BundleDiff) -> list[Text]:
    """A line for each kind of difference with more entries than the diff keeps."""
    lines = []
    for name, listed in (
        ("kernels_only_a", diff.kernels_only_a),
        ("kernels_only_b", diff.kernels_only_b),
        ("tunes_only_a", diff.tunes_only_a),
        ("tunes_only_b", diff.tunes_only_b),
        ("picks_changed", diff.picks_changed),
    ):
        if diff.count(name) > len(listed):
            what = (
                name.replace("_", " ").replace("only a", "only in A").replace("only b", "only in B")
            )
            lines.append(
                Text(f"{what}: {diff.count(name):,} in all, the first {len(listed):,} listed")
            )
    return lines


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f} µs"


def diff_renderable(diff: BundleDiff) -> Group:
    parts: list[Any] = [
        line(f"A {diff.a}"),
        line(f"B {diff.b}"),
        line(f"{diff.kernels_shared} kernel(s) and {diff.tunes_shared} tune(s) in both"),
    ]
    doc = diff_json(diff)["kernels"]
    for side, kernels in (("A", doc["only_a"]), ("B", doc["only_b"])):
        by_toolchain: dict[str, list[dict[str, Any]]] = {}
        for k in kernels:  # one table per toolchain, not its long identity on every row
            by_toolchain.setdefault(k["toolchain"], []).append(k)
        for toolchain, built in by_toolchain.items():
            parts.append(line(f"Kernels only in {side} ({len(built)}), built by {toolchain}"))
            table = listing()
            for col in ("device", "kernel", "bytes"):
                table.add_column(
                    col, justify="right" if col == "bytes" else "left", overflow="fold"
                )
            for k in built:
                add_row(table, where(k["device"], k["arch"]), kernel_name(k), f"{k['bytes']:,}")
            parts.append(table)
    for side, tunes in (("A", diff.tunes_only_a), ("B", diff.tunes_only_b)):
        if tunes:
            table = listing(f"Tunes only in {side} ({len(tunes)})")
            for col in ("operation", "shape", "pick", "device"):
                table.add_column(col)
            for t in sorted(tunes, key=tune_order):
                add_row(table, t.operation, t.shape_key, t.pick or t.status, t.device)
            parts.append(table)
    if diff.picks_changed:
        table = listing(f"Picks that differ ({len(diff.picks_changed)})")
        for col in ("operation", "shape", "A pick", "A median", "B pick", "B median"):
            table.add_column(col, justify="right" if "median" in col else "left")
        for c in diff.picks_changed:
            add_row(
                table,
                c.operation,
                c.shape,
                c.a_pick or "pending",
                _us(c.a_seconds),
                c.b_pick or "pending",
                _us(c.b_seconds),
            )
        parts.append(table)
    parts += _unlisted(diff)
    if diff.same:
        parts.append(line("the bundles hold the same kernels and tunes, with the same picks"))
    return Group(*parts)


def clean_json(report: CleanReport) -> dict[str, Any]:
    plan = report.plan
    return {
        "bundle": str(report.path),
        "applied": report.applied,
        "dry_run": report.dry_run,
        "removed": [dataclasses.asdict(r) for r in plan.removals],
        "removed_count": {"kernels": plan.removed["kernel"], "tunes": plan.removed["tune"]},
        "removed_by_reason": dict(plan.by_reason),
        "kept_unjudged": plan.kept_unjudged,
        "binary_bytes": {"before": plan.binary_bytes_before, "after": plan.binary_bytes_after},
        "file_bytes": {"before": report.file_bytes_before, "after": report.file_bytes_after},
    }


def clean_renderable(report: CleanReport) -> Group:
    plan = report.plan
    verb = "would remove" if report.dry_run else "removed"
    parts: list[Any] = []
    by_reason: dict[str, list[Removal]] = {}
    for r in plan.removals:  # one table per reason, not the reason on every row
        by_reason.setdefault(r.reason, []).append(r)
    for reason, removals in by_reason.items():
        n = plan.by_reason.get(reason, len(removals))
        listed = f"{n:,}" if n == len(removals) else f"{n:,}, the first {len(removals):,} listed"
        parts.append(line(f"{verb.capitalize()} from {report.path} ({listed}): {reason}"))
        table = listing()
        for col in ("kind", "entry", "where", "bytes"):
            table.add_column(col, justify="right" if col == "bytes" else "left", overflow="fold")
        for r in removals:
            add_row(table, r.kind, r.label, r.where, f"{r.bytes:,}" if r.bytes else "")
        parts.append(table)
    parts.append(
        line(
            f"clean: {verb} {plan.removed['kernel']} kernel(s) and {plan.removed['tune']} "
            "tune(s); "
            f"binaries {plan.binary_bytes_before:,} → {plan.binary_bytes_after:,} bytes, "
            f"file {report.file_bytes_before:,} → {report.file_bytes_after:,} bytes"
        )
    )
    parts += [line(f"  {n}", style="dim") for n in plan.kept_unjudged]
    return Group(*parts)
