"""How reports look: Rich tables and JSON documents built from the library's reports.

Pure presentation: every function takes a report or a bundle's records and
returns a Rich renderable or a JSON-ready dict. Nothing here runs a pass, opens a
device or writes a file; the CLI decides where the output goes.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from warmcli.passes import PassReport, RunReport
from warmcli.records import KernelRecord, TuneRecord
from warmcli.statistics import DeviceStatistics

COMPILATION_KEYS = ("registered", "queued", "compiled", "loaded", "failed", "batches")
AUTOTUNE_KEYS = ("registered", "measured", "failed", "hits", "persisted")
EXECUTION_KEYS = ("executed", "discarded", "queued")
LABELS = {
    "compiler_processes": "processes",
    "candidates_measured": "candidates",
    "discarded_reads": "reads discarded",
}


def stats_json(stats: DeviceStatistics) -> dict[str, dict[str, Any]]:
    return {
        "compilation": dataclasses.asdict(stats.compilation),
        "autotune": dataclasses.asdict(stats.autotune),
        "execution": dataclasses.asdict(stats.execution),
    }


def run_json(report: RunReport) -> dict[str, Any]:
    return {
        "passes": [
            {
                "mode": p.mode,
                "seconds": round(p.seconds, 6),
                **stats_json(p.total),
                "devices": {d: stats_json(s) for d, s in p.per_device.items()},
                "notes": p.notes,
            }
            for p in report.passes
        ],
        "bundle": str(report.bundle),
        "devices": report.devices,
        "stored": {"kernels": report.stored_kernels, "tunes": report.stored_tunes},
        "verified": report.verified,
        "missing": report.missing,
    }


def _fmt(value: float) -> str:
    return f"{value:.3f} s" if isinstance(value, float) else str(value)


def pass_table(index: int, report: PassReport, device: str, stats: DeviceStatistics) -> Table:
    """One pass on one device: compilation, autotune and execution side by side."""
    table = Table(
        title=f"Pass {index} · {report.mode} · {device} · {report.seconds:.2f} s",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
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
        table.add_row(*row)
    return table


def run_renderable(report: RunReport) -> Group:
    parts: list[Any] = []
    for i, p in enumerate(report.passes, start=1):
        for device, stats in sorted(p.per_device.items()) or [("-", p.total)]:
            parts.append(pass_table(i, p, device, stats))
        parts += [Text(f"  note: {n}", style="yellow") for n in p.notes]
    parts.append(
        Text(
            f"bundle {report.bundle}: stored {report.stored_kernels} kernel(s) "
            f"and {report.stored_tunes} tune(s)"
        )
    )
    if report.verified is True:
        parts.append(
            Text(
                "verify: compiled 0 kernels, measured 0 tunes: the bundle is complete",
                style="green",
            )
        )
    elif report.verified is False:
        parts += [Text(f"verify: {m}", style="red") for m in report.missing]
    return Group(*parts)


def _when(stamp: str | None) -> str:
    try:
        return datetime.datetime.fromtimestamp(float(stamp or "")).isoformat(timespec="seconds")
    except ValueError:
        return str(stamp)


def kernel_json(k: KernelRecord) -> dict[str, Any]:
    return {
        "key": k.key,
        "device": k.device,
        "backend": k.backend,
        "arch": k.arch,
        "entry": k.entry,
        "label": k.label,
        "bytes": k.size,
        "sha256": k.sha256,
        "toolchain": k.toolchain,
        "seconds": k.seconds,
    }


def tune_json(t: TuneRecord) -> dict[str, Any]:
    picked = next((c for c in t.candidates if c.name == t.pick), None)
    best = picked.seconds if picked is not None else None
    return {
        "key": t.key,
        "operation": t.operation,
        "shape": t.shape_key,
        "device": t.device,
        "status": t.status,
        "pick": t.pick,
        "checksum": t.checksum,
        "measured_at": t.measured_at,
        "candidates": [
            {
                "name": c.name,
                "seconds": c.seconds,
                "status": c.status,
                "reason": c.reason,
                "samples": list(c.samples),
                "ratio": (c.seconds / best) if (best and c.seconds is not None) else None,
            }
            for c in t.candidates
        ],
    }


def stats_document(
    manifest: dict[str, str],
    fingerprints: list[dict[str, Any]],
    kernels: list[KernelRecord],
    tunes: list[TuneRecord],
) -> dict[str, Any]:
    return {
        "manifest": manifest,
        "fingerprints": fingerprints,
        "kernels": [kernel_json(k) for k in kernels],
        "tunes": [tune_json(t) for t in tunes],
    }


def stats_renderable(path: str, doc: dict[str, Any]) -> Group:
    m = doc["manifest"]
    head = Table.grid(padding=(0, 2))
    head.add_row("bundle", path)
    head.add_row("format", f"{m.get('format_version')} (warm {m.get('warm_version')})")
    head.add_row("created", _when(m.get("created")))
    head.add_row("updated", _when(m.get("updated")))
    for fp in doc["fingerprints"]:
        head.add_row(str(fp["kind"]), str(fp["identity"]).split(":", 1)[-1])

    kernels = Table(
        title=f"Kernels ({len(doc['kernels'])})", title_justify="left", box=box.SIMPLE_HEAD
    )
    for col in ("device", "arch", "kernel", "bytes", "compile s", "sha256"):
        kernels.add_column(col, justify="right" if col in ("bytes", "compile s") else "left")
    for k in doc["kernels"]:
        kernels.add_row(
            k["device"],
            k["arch"],
            k["label"],
            f"{k['bytes']:,}",
            f"{k['seconds']:.3f}",
            k["sha256"][:12],
        )

    parts: list[Any] = [head, kernels]
    for t in doc["tunes"]:
        parts.append(
            Text.assemble(
                (f"{t['operation']} ", "bold"),
                t["shape"],
                " → ",
                (t["pick"] or t["status"], "bold green"),
                (f"   on {t['device']}", "dim"),
            )
        )
        table = Table(box=box.SIMPLE_HEAD)
        for col in ("candidate", "median", "vs pick", "status"):
            table.add_column(col, justify="right" if col in ("median", "vs pick") else "left")
        for c in sorted(t["candidates"], key=lambda c: (c["seconds"] is None, c["seconds"] or 0)):
            median = f"{c['seconds'] * 1e6:,.1f} µs" if c["seconds"] is not None else "-"
            ratio = f"{c['ratio']:.2f}×" if c["ratio"] is not None else "-"
            status = (
                c["status"] if not c["reason"] else f"{c['status']}: {c['reason'].splitlines()[0]}"
            )
            style = "bold green" if c["name"] == t["pick"] else None
            table.add_row(c["name"], median, ratio, status, style=style)
        parts.append(table)
    return Group(*parts)
