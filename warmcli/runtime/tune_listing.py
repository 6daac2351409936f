"""A tunable operation's tunes as a miss's explanation holds them: no candidate kept.

`listed_tunes` reads the bundle's tunes of one operation (on a tune miss, kept by the miss
policy for the next: `warmcli.runtime.nearest.Listed`) one at a time, each kept as its
record without its candidates and as the components an explanation compares
(`tune_components`): a tune may hold 200,000 candidates, and an operation thousands of
tunes, so holding their candidates held hundreds of times the bundle's size. Their names
are held as `names_text`, whole up to `WHOLE_NAMES` characters, else cut and told apart by
a digest (names of 4,096 characters each, deflated, make megabytes from a row of kilobytes),
as what this process wants is said. The one record whose candidates' kernels an
explanation compares is read again by its key (`warmcli.runtime.explain`). It reads only
the bundle it is handed, owns no state and never prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from warmcli.errors import BundleError
from warmcli.records import TuneRecord
from warmcli.runtime.nearest import Listed

if TYPE_CHECKING:
    from warmcli.runtime.store import Store

WHOLE_NAMES = 4096  # characters of a tune's candidate names held whole


def names_text(names: Iterable[str]) -> str:
    """The names, sorted and joined; past `WHOLE_NAMES` characters, their head, their
    length and a digest of them all (so two such texts are equal where the names are)."""
    text = ", ".join(sorted(names))
    if len(text) <= WHOLE_NAMES:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:200]}... ({len(text):,} characters, sha256 {digest})"


def tune_components(record: TuneRecord) -> dict[str, str]:
    """What an explanation compares of a held tune."""
    return {
        "device": record.device,
        "checksum": record.checksum,
        "shape": record.shape_key,
        "candidates": names_text(c.name for c in record.candidates),
    }


def listed_tunes(bundle: Store, operation: str) -> Listed[TuneRecord]:
    """The bundle's tunes of the tunable `operation`, for its misses, each without its
    candidates (a malformed row skipped; one SQLite cannot hand back ends the listing, its
    problem listed instead)."""
    records: list[TuneRecord] = []
    held: list[dict[str, str]] = []
    try:
        for r in bundle.each_tune(operation, lambda key, problem: None, samples=False):
            held.append(tune_components(r))
            fields = (r.key, r.operation, r.shape_key, r.device, r.checksum, r.status, r.pick)
            records.append(TuneRecord(*fields, (), r.seconds, r.measured_at))
            del r  # not held while the next is read
    except BundleError as exc:
        return Listed(exc.problem)
    return Listed(records, held)
