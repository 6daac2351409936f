"""Bundle integrity: is every stored thing readable and what it claims to be?

`check_bundle` opens a bundle read-only (which already refuses a file that is not
a warm bundle or is of another format version) and then checks SQLite's own
page-level consistency, the manifest's fields, every blob against its sha256 and
size, that every kernel's row is well formed and its blob is there, that every
tune's row is (its candidates parse, its pick is one of them), and every signature
(`warmcli.bundle.signing`): by which key, valid or not, what it covers; an invalid one is a
problem, and so, under trusted keys, is a row none of them signed. Everything is read
in one snapshot (one read transaction), so a writer committing meanwhile never makes
a sound bundle look corrupt; rows and blobs are streamed one at a time, so memory
does not grow with the bundle: the report keeps the first `LISTED` problems and
counts the rest. It returns an `IntegrityReport`
naming each problem; it never repairs, deletes or writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from warmcli.bundle.signing import SignatureReport, signature_report
from warmcli.bundle.store import AS_STORED, FORMAT_VERSION, Bundle

MANIFEST_FIELDS = ("format_version", "warm_version", "created", "updated")
LISTED = 1_000  # problems named in a report; the rest are counted in `unlisted`


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


def _manifest_problems(manifest: dict[str, str]) -> list[str]:
    problems = [f"manifest has no {name!r}" for name in MANIFEST_FIELDS if name not in manifest]
    for name in ("created", "updated"):
        try:
            float(manifest.get(name, "0"))
        except ValueError:
            problems.append(f"manifest {name!r} is not a time: {manifest[name]!r}")
    if manifest.get("format_version", str(FORMAT_VERSION)) != str(FORMAT_VERSION):
        problems.append(
            f"manifest says format {manifest['format_version']}, the schema is {FORMAT_VERSION}"
        )
    return problems


def check_bundle(
    path: str | os.PathLike[str], trusted_keys: Sequence[bytes] | None = None
) -> IntegrityReport:
    """Check everything the bundle at `path` holds; raises `BundleError` if it is no bundle."""
    report = IntegrityReport(str(path))

    def corrupt(counter: str) -> Callable[[str, str], None]:
        def add(_key: str, problem: str) -> None:
            setattr(report, counter, getattr(report, counter) + 1)
            report.add(problem)

        return add

    with Bundle.open(path) as bundle, bundle.snapshot():  # writers may commit meanwhile
        for problem in [f"sqlite: {line}" for line in bundle.integrity_check()]:
            report.add(problem)
        for problem in _manifest_problems(bundle.manifest()):
            report.add(problem)
        for sha, _size, actual in bundle.blob_digests():
            report.blobs += 1
            if actual != sha:
                report.add(f"blob {sha[:16]} does not match its sha256")
        for _ in bundle.each_kernel(on_error=corrupt("kernels"), order=AS_STORED):
            report.kernels += 1
        for k in bundle.each_orphan():
            report.add(f"kernel {k.label} ({k.device} {k.arch}) has no blob {k.sha256[:16]}")
        for _ in bundle.each_tune(on_error=corrupt("tunes"), order=AS_STORED):
            report.tunes += 1
        report.signatures = signature_report(bundle, trusted_keys)
        for problem in report.signatures.problems:
            report.add(problem)
    return report
