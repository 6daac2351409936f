"""How a bundle's contents look (`warm stats`, `warm verify`): kernels and tunes as JSON
documents and tables, the manifest (the summary of a bundle too large to list:
`warmcli.cli.render.summary`). Pure presentation over records and summaries; it owns
no state, never opens a bundle and never prints. Rich is imported when a table is
first built: a JSON document (`warm stats --json`) needs none of it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from warmcli.bundle.compiles import Compile, compile_of
from warmcli.bundle.counts import BATCH, HeldCounts
from warmcli.bundle.run_record import KEY as RUN_KEY
from warmcli.bundle.run_record import parse
from warmcli.cli.render import add_row, cell, line, listing
from warmcli.cli.render.header import manifest_grid
from warmcli.cli.render.kernel_columns import kernels_table
from warmcli.cli.render.shown import by_median, figures, first_shown, reason_shown, timed
from warmcli.errors import headline
from warmcli.kernel_parts import headers_digest, source_digest, stored
from warmcli.printable import natural, printable, visible
from warmcli.records import KernelRecord, TuneRecord

if TYPE_CHECKING:  # (Rich: imported when a table is built)
    from rich.table import Table


def kernel_json(
    k: KernelRecord,
    usage: tuple[float, float] | None = None,
    shared_by: int = 1,
    share: int | None = None,
    candidates: list[str] | None = None,
    built_with: int = 1,
) -> dict[str, Any]:
    """One kernel. A batch compiles several kernels into one binary: `blob_bytes` is that
    binary's size, `bytes` this kernel's share of it (`share`: so the shares of one binary
    add up to it exactly). `compile_seconds` is this kernel's share of its compile's time
    (as its row keeps it), `batch_seconds` the compile that made its binary (every share of
    it), and `seconds` this row's part: the kernel's share over the `built_with` rows its
    compile made of it (a CUDA kernel's cubin and PTX: half each), so that every compile is
    counted once where the kernels' `seconds` are added up."""
    created, last_used = usage or (None, None)
    shared_by, built_with = max(shared_by, 1), max(built_with, 1)
    return {
        "key": k.key,
        "device": k.device,
        "backend": k.backend,
        "arch": k.arch,
        "entry": k.entry,
        "label": k.label,
        "candidates": candidates or [],
        "options": stored(k.components.get("options", ""), pairs=False) or [],
        "defines": dict(stored(k.components.get("defines", ""), pairs=True) or []),
        "source_sha256": source_digest(k.components),  # of the source text, as keyed
        "headers_sha256": headers_digest(k.components),  # of the headers it read, or ""
        "bytes": k.size // shared_by if share is None else share,
        "blob_bytes": k.size,
        "shared_by": shared_by,
        "sha256": k.sha256,
        "toolchain": k.toolchain,
        "seconds": k.seconds / built_with,
        "compile_seconds": k.seconds,
        "batch_seconds": k.seconds * shared_by,
        "created": created,
        "last_used": last_used,
    }


def kernel_order(k: KernelRecord) -> tuple[Any, ...]:
    """How kernels are listed: by device, arch and label, numbers as numbers (one label's
    kernels by source, then by options, defines and headers, so a kernel's cubin and PTX
    come in one order, `-DK=2` before `-DK=10`; then by the toolchain that built each, so
    nvcc's and NVRTC's builds of every label come in one order)."""
    parts = k.components
    made = [natural(parts.get(part, "")) for part in ("options", "defines")]
    head = (natural(k.device), natural(k.arch), natural(k.label), source_digest(parts))
    return (*head, *made, headers_digest(parts), k.toolchain, k.key)


def kernels_json(
    kernels: list[KernelRecord],
    named: dict[str, set[str]],
    usage: dict[str, tuple[float, float]],
    users: dict[str, int] | None = None,
    compiles: dict[Compile, int] | None = None,
) -> list[dict[str, Any]]:
    """Every kernel's `kernel_json`, by device, arch and label (numbers as numbers): each
    named by the tunable candidates it is (`named`: by kernel key, `operation/name`), and
    given its share of a shared binary (`users`: how many kernels of the bundle share each,
    where `kernels` are only some of them) and its part of its compile's time (`compiles`:
    how many rows of the bundle each made)."""
    listed = Counter(k.sha256 for k in kernels)
    users = listed if users is None else Counter({**listed, **users})
    built = Counter(map(compile_of, kernels)) | Counter(compiles or {})
    given: Counter[str] = Counter()
    docs = []
    for k in sorted(kernels, key=kernel_order):
        n = users[k.sha256]
        share = k.size // n + (1 if given[k.sha256] < k.size % n else 0)
        given[k.sha256] += 1
        cands = sorted(named.get(k.key, ()), key=natural)
        docs.append(kernel_json(k, usage.get(k.key), n, share, cands, built[compile_of(k)]))
    return docs


def tune_brief(t: TuneRecord) -> dict[str, Any]:
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
        **tune_brief(t),
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


def tune_shown(t: TuneRecord) -> dict[str, Any]:
    """`tune_json(t)` as the tables show it, made as the tune is read: its pick's figures
    from all its candidates, its first `LISTED` by median (and its pick), the rest counted
    (`more`). A packed row of 4 KB may hold 246,000 candidates: a listing held them all, in
    every tune, and a table rendered every one (13 such tunes: 2.2 GB, 41 s)."""
    first = first_shown(t.candidates, t.pick)
    fields = (t.key, t.operation, t.shape_key, t.device, t.checksum, t.status, t.pick)
    doc = tune_json(TuneRecord(*fields, tuple(first), t.seconds, t.measured_at))
    for c in doc["candidates"]:
        c["reason"] = reason_shown(c["reason"])
    doc["more"] = len(t.candidates) - len(first)
    doc["figures"] = figures(t.pick, ((c.name, c.status, c.seconds) for c in t.candidates))
    return doc


def tune_order(t: TuneRecord) -> tuple[Any, ...]:
    """Tunes by operation, then shape (numbers as numbers), then device."""
    return (natural(t.operation), natural(t.shape_key), t.device, t.key)


MANIFEST_TYPES: dict[str, type] = {"format_version": int, "created": float, "updated": float}


def manifest_json(manifest: dict[str, str]) -> dict[str, Any]:
    """The manifest with its numbers as numbers (the bundle keeps text; a value that is
    not the number it should be, or is no finite number JSON can hold, is shown as it is),
    its `run` record as an object (one that is not what warm writes: as it is; null where
    the bundle records no run: a merge of several runs, an older warm's bundle)."""
    out: dict[str, Any] = {}
    for key, value in manifest.items():
        record = parse(value) if key == RUN_KEY else None
        if record is not None:  # the run and shards the bundle holds, as an object
            out[key] = {**json.loads(value), "shards": sorted(record.shards)}
            continue
        try:
            number = MANIFEST_TYPES.get(key, str)(value)
        except ValueError:
            number = value
        out[key] = value if isinstance(number, float) and not math.isfinite(number) else number
    out.setdefault(RUN_KEY, None)
    return out


def _fingerprint_order(fp: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Devices and toolchains by kind, then identity, numbers as numbers (`sm_75` first)."""
    return natural(fp.get("kind")), natural(fp.get("identity"))


def stats_document(
    manifest: dict[str, str],
    fingerprints: list[dict[str, Any]],
    kernels: Iterable[tuple[KernelRecord, tuple[float, float] | None]],
    tunes: Iterable[TuneRecord],
    shared: HeldCounts | None = None,
    named: dict[str, set[str]] | None = None,
    tune: Callable[[TuneRecord], Any] = tune_json,
    format_version: int | None = None,
    compiles: HeldCounts | None = None,
    shown: Callable[[KernelRecord], bool] | None = None,
) -> dict[str, Any]:
    """The `warm stats --json` document; its "kernels" and "tunes" are iterators, each
    entry converted as it is read (stream them, or list them). `shared`: how many kernels
    use each binary used by more than one (so each gets its share of it); `compiles`: how
    many rows each compile made of one kernel, where more than one (`shared_compiles`: so
    each gets its part of its time); `named`: the
    tunable candidates each kernel key is; `tune`: how a tune is given (its `tune_json`,
    or the same as JSON text: `warmcli.cli.render.tune_line`); `format_version`: the
    format the file is in (its header's), given as "format" beside the manifest's claim;
    `shown`: which kernels are listed (`--explain`'s), each with its share in the listing of all."""
    shared, compiles = shared or HeldCounts(), compiles or HeldCounts()
    named = named or {}
    given: Counter[str] = Counter()

    def one(
        k: KernelRecord, usage: tuple[float, float] | None, n: int, made: int
    ) -> dict[str, Any] | None:
        share = k.size // n + (1 if given[k.sha256] < k.size % n else 0)
        if n > 1:  # (forgotten once its last user is given its share: what is held is the
            given[k.sha256] += 1  # binaries whose users the listing has not all reached yet)
            if given[k.sha256] == n:
                del given[k.sha256]
        if shown is not None and not shown(k):
            return None
        return kernel_json(k, usage, n, share, sorted(named.get(k.key, ()), key=natural), made)

    def each(rows: Iterator[tuple[KernelRecord, tuple[float, float] | None]]) -> Iterator[Any]:
        while batch := list(islice(rows, BATCH)):  # their counts read in two queries
            users = shared.get_many([(k.sha256,) for k, _ in batch])
            made = compiles.get_many([compile_of(k) for k, _ in batch])
            yield from filter(None, map(one, *zip(*batch, strict=True), users, made))  # (shown)

    return {
        **({} if format_version is None else {"format": format_version}),
        "manifest": manifest_json(manifest),
        "fingerprints": sorted(fingerprints, key=_fingerprint_order),
        "kernels": each(iter(kernels)),
        "tunes": map(tune, tunes),
    }


TUNE_TABLES = 10  # more tunes than this are listed one line each (--explain: every candidate)


def pick_figures(t: dict[str, Any]) -> tuple[str, str]:
    """A tune's (`tune_json`, `tune_shown`) pick median, and how much slower its runner-up is."""
    if "figures" in t:  # (`tune_shown`'s: of every candidate, not only those it keeps)
        return t["figures"]  # type: ignore[no-any-return]
    return figures(t["pick"], ((c["name"], c["status"], c["seconds"]) for c in t["candidates"]))


def tunes_table(title: str, tunes: list[dict[str, Any]]) -> Table:
    """One line per tune (its `tune_json`): the pick, its median, the runner-up's ratio."""
    table = listing(title)
    for col in ("operation", "shape", "device", "pick"):
        table.add_column(col, overflow="fold")
    for col in ("median", "runner-up", "candidates"):
        table.add_column(col, justify="right", no_wrap=True)
    for t in tunes:
        median, runner = pick_figures(t)
        pick = t["pick"] or t["status"]
        add_row(
            table,
            t["operation"],
            visible(t["shape"]),
            device_brief(t["device"]),
            pick,
            median,
            runner,
            str(len(t["candidates"]) + t.get("more", 0)),
        )
    return table


def candidates_table(t: dict[str, Any]) -> list[Any]:
    """A tune's heading line and every candidate's median, ratio to the pick and status."""
    from rich.text import Text

    heading = Text.assemble(
        (f"{printable(t['operation'])} ", "bold"),
        visible(t["shape"]),
        " → ",
        (printable(t["pick"] or t["status"]), "bold green"),
        (f"   on {printable(t['device'])}", "dim"),
    )
    table = listing()
    for col in ("candidate", "median", "vs pick", "status"):
        table.add_column(col, justify="right" if col in ("median", "vs pick") else "left")
    for c in sorted(t["candidates"], key=by_median):
        median, ratio = timed(c["seconds"], c["ratio"])
        status = c["status"] if not c["reason"] else f"{c['status']}: {headline(c['reason'])}"
        style = "bold green" if c["name"] == t["pick"] else None
        cells = (cell(c["name"]), median, ratio, status)  # (reason_shown's cut)
        table.add_row(*map(line, cells), style=style)
    if t.get("more"):  # (`tune_shown`'s)
        said = f"and {t['more']:,} more candidate(s) not listed: warm stats --json lists every one"
        return [heading, table, line(said, style="dim")]
    return [heading, table]


def stats_renderable(
    path: str, doc: dict[str, Any], *, every_candidate: bool = False, copy: str | None = None
) -> Iterator[Any]:
    """The manifest (`path`: a URL's local `copy` named after it), the contents, every
    kernel, and the tunes: each with its candidates when there are few (or
    `every_candidate`), else one line each; each part made as it is printed (a tune's
    table of 1,000 candidates at a time: 100 made at once, as one group, took 400 MB)."""
    yield manifest_grid(path, doc["manifest"], doc["fingerprints"], doc.get("format"), copy)
    yield summary_table(doc)
    yield kernels_table(f"Kernels ({len(doc['kernels'])})", doc["kernels"])
    tunes = doc["tunes"]
    if every_candidate or len(tunes) <= TUNE_TABLES:
        for t in tunes:
            yield from candidates_table(t)
    else:
        yield tunes_table(f"Tunes ({len(tunes)})", tunes)
        yield line(EXPLAIN_HINT, style="dim")


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


def tunable_row(table: Table, operation: str, device: str, tunes: str, pending: str) -> None:
    """The Contents row of one tunable on one device (a fingerprint, `backend|name|arch|
    driver`, whose arch fills the arch column): its tunes and how many are pending."""
    arch = device.split("|")[2] if device.count("|") >= 3 else device
    add_row(table, f"{operation} on {device}", arch, "", "", tunes, pending)


def summary_table(doc: dict[str, Any]) -> Table:
    """One row per device and arch (kernels, binary bytes), one per tunable and device.
    A row's bytes are its kernels' shares of their binaries (`kernel_json`'s `bytes`):
    every binary's size once where all its kernels are listed, and where only some are
    (`--explain`: one operation's), theirs, never the whole of a binary shared with others."""
    table = contents_table()
    places: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for k in doc["kernels"]:
        places.setdefault((k["device"], k["arch"]), []).append(k)
    for (device, arch), ks in sorted(places.items(), key=lambda p: natural(p[0])):
        size = sum(int(k["bytes"]) for k in ks)
        add_row(table, device, arch, str(len(ks)), f"{size:,}", "", "")
    tunables: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in doc["tunes"]:
        tunables.setdefault((t["operation"], t["device"]), []).append(t)
    for (operation, device), ts in sorted(tunables.items(), key=lambda t: natural(t[0])):
        pending = sum(1 for t in ts if t["status"] == "pending")
        tunable_row(table, operation, device, str(len(ts)), str(pending))
    return table
