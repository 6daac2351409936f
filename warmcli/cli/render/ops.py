"""How `warm verify`'s integrity check, `warm merge`, `warm diff`, `warm clean` and
`warm devices` (this machine's `Inventory`) look: their JSON documents and Rich
renderables, signatures included. Pure presentation over
the ops' reports; it owns no state and never prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from warmcli.backends.machine import DeviceInfo, Inventory
from warmcli.bundle.signature_report import SignatureReport
from warmcli.cli.render import add_row, cell, line, listing, when
from warmcli.cli.render.kernel_columns import (
    SOURCE_SHOWN,
    kernel_headers,
    kernel_name,
    kernel_options,
    kernel_sources,
)
from warmcli.cli.render.shown import micros
from warmcli.cli.render.stats import (
    kernels_json,
    tune_brief,
    tune_order,
)
from warmcli.ops.clean import CleanReport, Removal
from warmcli.ops.diff import BundleDiff
from warmcli.ops.merge import MergeReport
from warmcli.ops.verify import IntegrityReport
from warmcli.printable import visible
from warmcli.records import where


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
    if not report.signatures and report.corrupt:  # named among the problems above
        return [line("signature: none readable (a malformed signature row)", style="red")]
    if not report.signatures:
        return [line("signature: unsigned", style="yellow")]
    lines = []
    for s in report.signatures:
        state = "INVALID" if not s.valid else "valid but stale" if s.stale else "valid"
        if s.trusted is not None:
            state += ", trusted" if s.trusted else ", not trusted"
        covers = f"covers {s.covers} of {report.rows} row(s)"
        if s.stale:  # signed before a migration: its hashes match, it vouches for nothing
            covers = f"vouches for none of {report.rows} row(s) (signed {s.covers} as they are)"
        dated = f"dated {when(s.signed_at)} (unsigned)"  # the key signs no date: any copy may
        lines.append(
            line(
                f"signature: key {s.key_id}, {dated}: {state}, {covers}",
                style="green" if s.valid and not s.stale and s.trusted is not False else "red",
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
    parts += [line(f"  {m}", style="yellow") for m in report.mended]
    for c in report.choices:
        parts.append(
            line(
                f"  tune {cell(c.operation)} {cell(visible(c.shape))} on {cell(c.device)}: kept "
                f"{cell(c.kept_pick or 'pending')} "
                f"measured {when(str(c.kept_measured_at))} in {c.kept} ({c.why}); dropped "
                f"{cell(c.dropped_pick or 'pending')} measured {when(str(c.dropped_measured_at))} "
                f"in {c.dropped}",
                style="yellow",
            )
        )
    if report.unlisted_choices:
        more = f"{report.unlisted_choices:,} more tune(s) measured in several inputs"
        parts.append(line(f"  and {more}: the newer kept", style="yellow"))
    return Group(*parts)


def diff_json(diff: BundleDiff) -> dict[str, Any]:
    return {
        "a": diff.a,
        "b": diff.b,
        "same": diff.same,
        "kernels": {
            "only_a": kernels_json(
                diff.kernels_only_a, diff.named_a, diff.usage_a, diff.users_a, diff.compiles_a
            ),
            "only_b": kernels_json(
                diff.kernels_only_b, diff.named_b, diff.usage_b, diff.users_b, diff.compiles_b
            ),
            "shared": diff.kernels_shared,
            "only_a_count": diff.count("kernels_only_a"),
            "only_b_count": diff.count("kernels_only_b"),
            "binary_differs": list(diff.binaries_changed),
            "binary_differs_count": diff.count("binaries_changed"),
        },
        "tunes": {
            "only_a": [tune_brief(t) for t in sorted(diff.tunes_only_a, key=tune_order)],
            "only_b": [tune_brief(t) for t in sorted(diff.tunes_only_b, key=tune_order)],
            "shared": diff.tunes_shared,
            "picks_changed": [dataclasses.asdict(c) for c in diff.picks_changed],
            "only_a_count": diff.count("tunes_only_a"),
            "only_b_count": diff.count("tunes_only_b"),
            "picks_changed_count": diff.count("picks_changed"),
            "checksum_differs": checksum_twins(diff),
        },
        "corrupt": {
            "a": list(diff.corrupt_a),
            "b": list(diff.corrupt_b),
            "a_count": diff.count("corrupt_a"),
            "b_count": diff.count("corrupt_b"),
        },
    }


def checksum_twins(diff: BundleDiff) -> list[dict[str, Any]]:
    """The listed tunes only in A and only in B for the same operation, shapes and device:
    their candidate sets' checksums differ (`same_kernels`: their candidates name the same
    kernel keys, so the output check or the launch function does: an edit, or another
    Python, whose bytecode keys a check's code; read as `listed_tune`'s digests)."""
    theirs = {(t.operation, t.shape_key, t.device): t for t in diff.tunes_only_b}
    twins = []
    for t in sorted(diff.tunes_only_a, key=tune_order):
        other = theirs.get((t.operation, t.shape_key, t.device))
        if other is not None:
            kernels = diff.candidate_kernels
            same = kernels[t.key] == kernels[other.key]
            twins.append(
                {"operation": t.operation, "shape": t.shape_key, "device": t.device,
                 "same_kernels": same}
            )  # fmt: skip
    return twins


def _twins_line(diff: BundleDiff) -> list[Text]:
    """What `checksum_twins` finds, said in one line."""
    twins = checksum_twins(diff)
    if not twins:
        return []
    same = all(t["same_kernels"] for t in twins)
    why = (
        "same candidate kernels: the output check or the launch function differs (an edit, "
        "or another Python version: a check's code is keyed as the Python that warmed it "
        "compiles it)"
        if same
        else "a candidate, a candidate's kernel, the output check or the launch function differs"
    )
    return [
        line(
            f"{len(twins)} tune(s) in A and B for the same operation, shapes and device under "
            f"another candidate-set checksum: {why}",
            style="yellow",
        )
    ]


def _unlisted(diff: BundleDiff) -> list[Text]:
    """A line for each kind of difference with more entries than the diff keeps."""
    lines = []
    for name, listed in (
        ("kernels_only_a", diff.kernels_only_a),
        ("kernels_only_b", diff.kernels_only_b),
        ("tunes_only_a", diff.tunes_only_a),
        ("tunes_only_b", diff.tunes_only_b),
        ("picks_changed", diff.picks_changed),
        ("binaries_changed", diff.binaries_changed),
    ):
        if diff.count(name) > len(listed):
            what = (
                name.replace("_", " ").replace("only a", "only in A").replace("only b", "only in B")
            )
            lines.append(
                Text(f"{what}: {diff.count(name):,} in all, the first {len(listed):,} listed")
            )
    return lines


def _how_many(here: int, listed: int, total: int) -> str:
    """A listing's header count: `here` of the `listed` first of `total` entries."""
    if total <= listed:
        return f"{here}"
    if here == listed:
        return f"the first {listed:,} of {total:,}"
    return f"{here:,} of the first {listed:,} of {total:,}"


def diff_renderable(diff: BundleDiff) -> Group:
    parts: list[Any] = [
        line(f"A {diff.a}"),
        line(f"B {diff.b}"),
        line(f"{diff.kernels_shared} kernel(s) and {diff.tunes_shared} tune(s) in both"),
    ]
    doc = diff_json(diff)["kernels"]
    twins = kernel_sources(doc["only_a"] + doc["only_b"]) is not None  # one label, two sources
    edited = kernel_headers(doc["only_a"] + doc["only_b"]) is not None  # a header edited
    for side, kernels in (("A", doc["only_a"]), ("B", doc["only_b"])):
        n = diff.count(f"kernels_only_{side.lower()}")
        by_toolchain: dict[str, list[dict[str, Any]]] = {}
        for k in kernels:  # one table per toolchain, not its long identity on every row
            by_toolchain.setdefault(k["toolchain"], []).append(k)
        for toolchain, built in by_toolchain.items():
            shown = _how_many(len(built), len(kernels), n)
            parts.append(line(f"Kernels only in {side} ({shown}), built by {toolchain}"))
            table = listing()
            options = kernel_options(built)
            sources = [str(k["source_sha256"])[:SOURCE_SHOWN] for k in built] if twins else None
            headers = [str(k["headers_sha256"] or "-")[:SOURCE_SHOWN] for k in built]
            named = (*(() if options is None else ("options",)), *(("source",) if twins else ()))
            named += ("headers",) if edited else ()
            for col in ("device", "kernel", *named, "bytes"):
                table.add_column(
                    col, justify="right" if col == "bytes" else "left", overflow="fold"
                )
            for i, k in enumerate(built):
                shown = [] if options is None else [options[i]]
                shown += [] if sources is None else [sources[i]]
                shown += [headers[i]] if edited else []
                add_row(
                    table, where(k["device"], k["arch"]), kernel_name(k), *shown, f"{k['bytes']:,}"
                )
            parts.append(table)
    for side, tunes in (("A", diff.tunes_only_a), ("B", diff.tunes_only_b)):
        if tunes:
            shown = _how_many(len(tunes), len(tunes), diff.count(f"tunes_only_{side.lower()}"))
            table = listing(f"Tunes only in {side} ({shown})")
            for col in ("operation", "shape", "pick", "device"):
                table.add_column(col)
            for t in sorted(tunes, key=tune_order):
                add_row(table, t.operation, visible(t.shape_key), t.pick or t.status, t.device)
            parts.append(table)
    if diff.picks_changed:
        n = len(diff.picks_changed)
        table = listing(f"Picks that differ ({_how_many(n, n, diff.count('picks_changed'))})")
        for col in ("operation", "shape", "A pick", "A median", "B pick", "B median"):
            table.add_column(col, justify="right" if "median" in col else "left")
        for c in diff.picks_changed:
            add_row(
                table,
                c.operation,
                visible(c.shape),
                c.a_pick or "pending",
                micros(c.a_seconds),
                c.b_pick or "pending",
                micros(c.b_seconds),
            )
        parts.append(table)
    if diff.binaries_changed:
        n = len(diff.binaries_changed)
        shown = _how_many(n, n, diff.count("binaries_changed"))
        parts.append(line(f"Kernels in both under one key, built to other binaries ({shown}):"))
        parts += [line(f"  {key[:16]}") for key in diff.binaries_changed]
    parts += _twins_line(diff)
    for side, problems in (("A", diff.corrupt_a), ("B", diff.corrupt_b)):
        if problems:
            count = diff.count(f"corrupt_{side.lower()}")
            parts.append(line(f"Corrupt in {side} ({count}; {side} cannot serve them):"))
            parts += [line(f"  {p}") for p in problems]
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
        "older_than_seconds": report.older_than,
        "used_in_future_count": {"kernels": plan.future["kernel"], "tunes": plan.future["tune"]},
        "kept_unjudged": plan.kept_unjudged,
        "binary_bytes": {"before": plan.binary_bytes_before, "after": plan.binary_bytes_after},
        "file_bytes": {"before": report.file_bytes_before, "after": report.file_bytes_after},
        "format": {"before": report.format_before, "after": report.format_after},
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
            + (  # a dry run changes nothing: the file's size after is not known
                f"file {report.file_bytes_before:,} bytes now"
                if report.dry_run
                else f"file {report.file_bytes_before:,} → {report.file_bytes_after:,} bytes"
            )
        )
    )
    parts += [line(f"  {n}", style="dim") for n in plan.kept_unjudged]
    if sum(plan.future.values()):
        stamped = "would stamp them" if report.dry_run else "stamped"
        parts.append(
            line(
                f"  kept {plan.future['kernel']} kernel(s) and {plan.future['tune']} tune(s) "
                f"used in the future (a skewed clock): taken as used now ({stamped} so)",
                style="dim",
            )
        )
    if report.format_after != report.format_before:
        parts.append(
            line(
                f"migrated from format {report.format_before} to {report.format_after}: "
                "a warm that reads only the older format cannot read this file now"
            )
        )
    elif report.would_migrate:
        parts.append(line(f"format {report.format_before}: a clean without --dry-run migrates it"))
    return Group(*parts)


DEVICE_FIELDS = ("id", "backend", "name", "arch", "driver", "memory", "fingerprint")


def devices_json(machine: Inventory) -> dict[str, Any]:
    """`warm devices --json`: every device (one spelling), pycuda, the compilers."""
    devices = [{f: getattr(d, f) for f in DEVICE_FIELDS} for d in machine.devices]
    return {"devices": devices, "pycuda": machine.pycuda, "compilers": machine.compilers}


def devices_table(devices: Iterable[DeviceInfo]) -> Table:
    """One row per device: its id, name, arch, memory (GiB; `-` unknown) and driver."""
    table = listing("Devices")
    for col in ("id", "name", "arch", "memory", "driver"):
        table.add_column(col)
    for d in devices:
        memory = f"{d.memory / 2**30:.1f} GiB" if d.memory else "-"
        add_row(table, d.id, d.name, d.arch, memory, d.driver)
    return table
