"""Bundle integrity: is every stored thing readable and what it claims to be?

`check_bundle` opens a bundle read-only (which already refuses a file that is not
a warm bundle or is of another format version) and then runs `Bundle.integrity`
(`warmcli.bundle.admin`: SQLite's own page-level consistency, the manifest's
fields, every blob against its sha256 and size, that every kernel's row is well
formed and its blob is there, that every tune's row is: its candidates parse, its
pick is one of them; where a listing stops at a row it cannot read, the checks run again
with every such row, `warmcli.bundle.unreadable`, named first and skipped), that every
host kernel's binary exports its symbol and every CUDA PTX row's blob is PTX of its arch
(`warmcli.ops.exported`: production would never serve it), and checks every signature
(`warmcli.bundle.signature_report`): by which key, valid or not, stale (signed before a
migration: it covers nothing) or not, what it covers; an invalid or stale one is a
problem, and so, under trusted keys, is a row none of them signed (a bundle no valid
signature covers is counted in SQL, no row hashed). Everything is read in one snapshot
(one read transaction), so a writer committing meanwhile never makes a sound bundle
look corrupt; rows and blobs are streamed one at a time, so memory does not grow with
the bundle (the tunes of a large one are checked in one process per CPU, each reading
its range under the same snapshot: `warmcli.bundle.checking`): the report keeps the
first `LISTED` problems and counts the rest. It returns an `IntegrityReport`
naming each problem; it never repairs, deletes or writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from warmcli.bundle.consistency import twin_keys
from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.signature_report import SignatureReport, signature_report
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_row import kernel_id_problems
from warmcli.bundle.unreadable import skip_unreadable, unreadable_error
from warmcli.errors import BundleError
from warmcli.ops.exported import unexported
from warmcli.printable import LISTED


@dataclass
class IntegrityReport:
    """What `check_bundle` looked at, and every problem it found (empty when sound)."""

    path: str
    format_version: int = FORMAT_VERSION
    kernels: int = 0
    blobs: int = 0
    tunes: int = 0
    problems: list[str] = field(default_factory=list)
    signatures: SignatureReport = field(default_factory=SignatureReport)
    unlisted: int = 0  # problems found beyond the first `LISTED`

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str) -> None:
        if len(self.problems) < LISTED:
            self.problems.append(problem)
        else:
            self.unlisted += 1


def check_bundle(
    path: str | os.PathLike[str], trusted_keys: Sequence[bytes] | None = None
) -> IntegrityReport:
    """Check everything the bundle at `path` holds; raises `BundleError` if it is no bundle."""
    with Bundle.open(path) as bundle, bundle.snapshot():  # writers may commit meanwhile
        try:
            return _checked(bundle, IntegrityReport(str(path)), trusted_keys)
        except BundleError as exc:  # a listing stopped at a row it cannot read: again,
            if not unreadable_error(exc):  # every such row named first, then skipped
                raise
            report = IntegrityReport(str(path))
            for row in skip_unreadable(bundle):
                setattr(report, f"{row.what}s", getattr(report, f"{row.what}s") + 1)
                report.add(row.problem)
            return _checked(bundle, report, trusted_keys)


def _checked(
    bundle: Bundle, report: IntegrityReport, trusted_keys: Sequence[bytes] | None
) -> IntegrityReport:
    """`report` with every check of the open `bundle` added (read in its snapshot)."""
    counters = {"blob": "blobs", "kernel": "kernels", "tune": "tunes"}
    report.format_version = bundle.format_version()  # the file's, not this warm's
    for what, problem in bundle.integrity():
        if what:
            setattr(report, counters[what], getattr(report, counters[what]) + 1)
        if problem is not None:
            report.add(problem)
    for _, problem in unexported(bundle):  # never served: as `warm check` says
        report.add(problem)
    for problem in (*twin_keys(bundle), *kernel_id_problems(bundle)):  # no row's own check
        report.add(problem)  # (one tune held twice, an id a tune's write refuses)
    report.signatures = signature_report(bundle, trusted_keys)
    for problem in report.signatures.problems:
        report.add(problem)
    return report


def trusted_signed(path: str | os.PathLike[str], trusted_keys: Sequence[bytes]) -> bool:
    """Whether a valid signature of this format by one of `trusted_keys` vouches for the
    bundle at `path` (`signature_report`, as `warm verify` checks it): where none does, a
    production process trusting only those keys serves none of its entries."""
    with Bundle.open(path) as bundle, bundle.snapshot():
        return signature_report(bundle, trusted_keys).vouched
