"""Merging bundles: the union of several bundles' kernels and tunes in one new bundle.

Bundles made on several machines or for several architectures are combined by
key. A kernel key is content-addressed, so a kernel held by two bundles is the
same kernel: it is stored once, with the latest `last_used` of its sources (a
merge is not a use). A tune key measured in two bundles keeps the newer
measurement, and the report says which one won and which was dropped. Bundles of
different format versions are refused before anything is read. The result is
written to a temporary file beside the output and moved into place only when
complete, so a failed merge leaves the output as it was. The inputs' signatures
do not carry over: given a key, the output is signed with it (every entry),
else the report says the output is unsigned. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warmcli.bundle import Bundle, BundleError
from warmcli.records import KernelRecord, TuneRecord
from warmcli.signing import sign


class MergeError(BundleError):
    """Bundles that cannot be merged (format versions differ), or an output in the way."""


@dataclass(frozen=True)
class TuneChoice:
    """A tune key measured in two bundles: which measurement was kept, which dropped."""

    operation: str
    shape: str
    device: str
    kept: str
    kept_pick: str | None
    kept_measured_at: float
    dropped: str
    dropped_pick: str | None
    dropped_measured_at: float


@dataclass
class MergeReport:
    out: Path
    sources: list[str]
    kernels: int = 0
    tunes: int = 0
    fingerprints: int = 0
    contributed: dict[str, tuple[int, int]] = field(default_factory=dict)
    choices: list[TuneChoice] = field(default_factory=list)
    signature: str = ""  # signed by which key, or that the output is unsigned


def read_format_version(path: str | os.PathLike[str]) -> int | None:
    """The schema version a file claims (`PRAGMA user_version`), None if it is unreadable."""
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def check_format_versions(paths: Sequence[Path]) -> None:
    """Refuse bundles whose format versions differ, naming each one's version."""
    versions = {p: read_format_version(p) for p in paths if p.exists()}
    if len({v for v in versions.values() if v is not None}) > 1:
        listed = ", ".join(f"{p} (format {v})" for p, v in versions.items())
        raise MergeError(f"cannot merge bundles of different format versions: {listed}")


def merge_bundles(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    signing_key: Any = None,
) -> MergeReport:
    """Write the union of `sources` to `out`; see the module doc."""
    paths = _distinct([Path(s) for s in sources])
    out = Path(out)
    if len(paths) < 1:
        raise MergeError("merge needs at least one bundle")
    check_format_versions(paths)
    in_sources = any(p.exists() and out.exists() and p.samefile(out) for p in paths)
    if out.exists() and not (overwrite or in_sources):
        raise MergeError(f"{out} exists: name it as an input to merge into it, or pass --force")
    report = MergeReport(out, [str(p) for p in paths])
    with contextlib.ExitStack() as stack:
        bundles = [stack.enter_context(Bundle.open(p)) for p in paths]
        kernels: dict[str, tuple[KernelRecord, int]] = {}
        last_used: dict[str, float] = {}
        tunes: dict[str, tuple[TuneRecord, int]] = {}
        fingerprints: dict[str, tuple[str, dict[str, object]]] = {}
        for index, bundle in enumerate(bundles):
            usage = bundle.usage()
            for record in bundle.kernels():
                kernels.setdefault(record.key, (record, index))
                used = usage.get(record.key, (0.0, 0.0))[1]
                last_used[record.key] = max(used, last_used.get(record.key, 0.0))
            for tune in bundle.tunes():
                _choose(tunes, tune, index, report)
            for fp in bundle.fingerprints():
                data = {k: v for k, v in fp.items() if k not in ("identity", "kind")}
                fingerprints[str(fp["identity"])] = (str(fp["kind"]), data)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.merge")
        try:
            with Bundle.create(tmp) as dest:
                by_blob: dict[tuple[int, str], list[KernelRecord]] = {}
                for record, index in kernels.values():
                    by_blob.setdefault((index, record.sha256), []).append(record)
                for (index, sha), records in by_blob.items():
                    binary = bundles[index].blob(sha)
                    dest.put(kernels=[(r, binary) for r in records])
                dest.put(
                    tunes=[t for t, _ in tunes.values()],
                    fingerprints=[(i, kind, data) for i, (kind, data) in fingerprints.items()],
                )
                dest.touch(last_used)
                report.signature = _sign(dest, signing_key, bundles)
            os.replace(tmp, out)
        finally:
            for leftover in (tmp, Path(f"{tmp}.lock")):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
    report.kernels, report.tunes, report.fingerprints = len(kernels), len(tunes), len(fingerprints)
    for index, path in enumerate(paths):
        report.contributed[str(path)] = (
            sum(1 for _, i in kernels.values() if i == index),
            sum(1 for _, i in tunes.values() if i == index),
        )
    return report


def _sign(dest: Bundle, signing_key: Any, sources: Sequence[Bundle]) -> str:
    if signing_key is not None:
        signature = sign(dest, signing_key)
        return f"signed by key {signature.key_id}: {signature.count} row(s)"
    if any(b.signatures() for b in sources):
        return "unsigned: the inputs' signatures do not carry over (warm sign OUT --key KEY)"
    return ""


def _distinct(paths: list[Path]) -> list[Path]:
    """The inputs, each file once (a bundle named twice is merged once, in its first place)."""
    seen: list[Path] = []
    for p in paths:
        if not any(p == q or (p.exists() and q.exists() and p.samefile(q)) for q in seen):
            seen.append(p)
    return seen


def _choose(
    tunes: dict[str, tuple[TuneRecord, int]], tune: TuneRecord, index: int, report: MergeReport
) -> None:
    """Keep the newer measurement of a tune key; note the choice when both differ."""
    held = tunes.get(tune.key)
    if held is None:
        tunes[tune.key] = (tune, index)
        return
    old, old_index = held
    if (old.measured_at, old.pick) == (tune.measured_at, tune.pick):
        return
    newer, newer_index, older, older_index = (
        (tune, index, old, old_index) if _rank(tune) > _rank(old) else (old, old_index, tune, index)
    )
    tunes[tune.key] = (newer, newer_index)
    report.choices.append(
        TuneChoice(
            operation=newer.operation,
            shape=newer.shape_key,
            device=newer.device,
            kept=report.sources[newer_index],
            kept_pick=newer.pick,
            kept_measured_at=newer.measured_at,
            dropped=report.sources[older_index],
            dropped_pick=older.pick,
            dropped_measured_at=older.measured_at,
        )
    )


def _rank(tune: TuneRecord) -> tuple[bool, float]:
    """A measured pick beats a pending one; then the newer measurement wins."""
    return (tune.status == "measured", tune.measured_at)
