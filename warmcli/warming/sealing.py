"""What a run does to its bundle once both warming passes stored all: it records the run
(`warmcli.bundle.run_record`: which workload, which shard of how many; not in a bundle it stored
nothing in and signs not, where that is signed or this process may not write it), then signs what
the run may vouch for, or says that what it stored is unsigned. The record is written in the run's
last store where there is one (`join_record`: one commit), else by `seal`; a disk refusing the
record or the signature once the run stored is said so (the entries kept), and so is a run stopped
by an interrupt or by its workload's error once it stored (`kept_after`). It owns no state and never
prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from warmcli.bundle.run_record import note_run, run_write
from warmcli.bundle.signing import RowSet, sign
from warmcli.bundle.signing import covered as covered_now
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError, RunInterrupted, WorkloadError

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable
    from pathlib import Path

    from warmcli.runtime.shard import Shard
    from warmcli.warming.workload import Workload


def seal(
    bundle: Bundle,
    signing_key: Any,
    stored: int,
    run: tuple[Workload, list[str], Shard | None],
    new: bool,
) -> str:
    """Record the `run` (its workload, the devices warmed, its shard) in `bundle` (`new`: it
    held nothing before), then sign it given `signing_key` (`_sign_stored`; `stored`: how
    many entries the run stored); what is said of the signature. A signed bundle the run
    stored nothing in and signs not is left as it was (its record too)."""
    signs = "" if signing_key is None else ", nor signed: sign it again (warm sign)"
    try:
        if signing_key is not None or stored or not _signed(bundle):  # a signed bundle this
            note_run(bundle, _run_write(bundle, run, new))  # run stored nothing in is left
    except BundleError as exc:  # as it was; so is one the run stored nothing in that this
        if stored or not exc.unwritable:  # process may not write (read-only): unrecorded
            raise _after_store(exc, bundle, stored, f"the run is not recorded{signs}") from None
    try:
        return _sign_stored(bundle, signing_key, stored)  # stays wholly signed: none unsigned
    except BundleError as exc:
        raise _after_store(
            exc, bundle, stored, "they are not signed: sign it again (warm sign)"
        ) from None


class _Stored(Protocol):  # a run's report, as far as what it stored
    bundle: Path
    stored_kernels: int
    stored_tunes: int


def kept_after(exc: KeyboardInterrupt | WorkloadError, report: _Stored) -> BaseException:
    """What a run stopped by `exc` raises: an interrupt, `RunInterrupted` (what the run's
    stores kept, counted in `report`); a workload that raised or exited, `exc` with what they
    kept said after it, as a crashed worker's is (nothing where they kept nothing), and the
    notes its pass made before it (`notes_before`: they are said before its line)."""
    kernels, tunes = report.stored_kernels, report.stored_tunes
    if isinstance(exc, KeyboardInterrupt):
        return RunInterrupted(kernels, tunes)
    if not kernels + tunes:
        return exc
    kept = f"{kernels} kernel(s) and {tunes} tune(s) stored in {report.bundle} before it are kept"
    first, lines, more = str(exc).partition("\n")  # said on its first line (a failed tune's
    # candidates follow), before the colon that opens what follows (a compile's log); a
    # colon opening nothing is the workload's own text, kept as it is
    opens = first.endswith(":") and more.strip()
    head = f"{first[:-1]}; {kept}:" if opens else f"{first}; {kept}"
    said = WorkloadError(f"{head}{lines}{more}")
    said.notes_before = exc.notes_before  # (a thread that raised, another failed compile)
    return said


def kept_before(exc: BundleError, bundle: Bundle, report: _Stored) -> BundleError:
    """`exc`, one of a run's stores (one per device) failed: one the disk refused after the
    run's earlier stores committed says what they kept (counted in `report`)."""
    kernels, tunes = report.stored_kernels, report.stored_tunes
    kept = f"{kernels} kernel(s) and {tunes} tune(s)"
    return _after_store(exc, bundle, kernels + tunes, "the rest is not stored", kept)


def _after_store(
    exc: BundleError, bundle: Bundle, stored: int, what: str, kept: str = ""
) -> BundleError:
    """`exc`, a write after the run's store failed; one the disk refused once the run stored
    entries says they are kept (its own words, "nothing was written", are of its write only)."""
    if not stored or exc.disk_refusal is None:
        return exc
    kept, why = kept or f"{stored} new entries", exc.disk_refusal
    return BundleError(f"{bundle.path}: stored {kept} (kept), but {why}: {what}")


def _run_write(
    bundle: Bundle, run: tuple[Workload, list[str], Shard | None], new: bool
) -> Callable[[sqlite3.Connection], None] | None:
    """`run_record.run_write` of the `run` (its workload, the devices warmed, its shard)."""
    workload, devices, shard = run
    held = None if shard is None else (shard.index, shard.count)
    return run_write(bundle, workload.path, workload.entry, devices, held, new)


def join_record(
    bundle: Bundle, signing_key: Any, run: tuple[Workload, list[str], Shard | None], new: bool
) -> None:
    """Have `bundle`'s next write (the run's last store, once its workload ran to its end)
    record the `run` as `seal` would (`Bundle.joining`): one commit, not a transaction of its
    own after it (four fsyncs fewer on most runs). Not in a signed bundle without
    `signing_key`: whether `seal` records the run there depends on what was stored, known
    only once written."""
    try:
        if signing_key is not None or not _signed(bundle):
            bundle.joining = _run_write(bundle, run, new)
    except Exception:  # (nothing joins: what the store stores is stored; `seal` says it)
        bundle.joining = None


def _signed(bundle: Bundle) -> bool:
    """Whether `bundle` holds a signature (a malformed one too)."""
    malformed: list[str] = []
    return bool(bundle.signatures(on_error=lambda k, _why: malformed.append(k)) or malformed)


def _sign_stored(bundle: Bundle, signing_key: Any, stored: int) -> str:
    """Sign what the run may vouch for: under trusted keys, what they signed (at its open, and
    as stored when it signs: another run signing by the same key at once, whose signature
    this one replaces, keeps its rows signed) and what this run stored; else every entry.
    Without a key: say whether what was stored is unsigned."""
    if signing_key is None:
        signed: list[str] = []  # a malformed signature row is one too: the run stored
        if stored and (bundle.signatures(on_error=lambda k, _why: signed.append(k)) or signed):
            return f"the {stored} new entries are unsigned: sign the bundle again (warm sign)"
        return ""
    covered, written, trusted = bundle.covered, bundle.written, bundle._trusted
    now: list[RowSet] = []  # what trusted keys sign as stored now, read in the signing write

    def keep(table: str, name: str, row: bytes) -> bool:
        if not now:  # another run's signature by this key since the open, replaced: kept
            try:
                now.append(covered_now(bundle, trusted) if trusted is not None else RowSet())
            except BundleError:  # (refused: what was judged at the open stays the rule)
                now.append(RowSet())
        return row in now[0] or (table, name) in written or row in (covered or RowSet())

    signature = sign(bundle, signing_key, None if covered is None else keep)
    return f"signed by key {signature.key_id}: {signature.count} row(s)"
