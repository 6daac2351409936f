"""Bundle integrity: is every stored thing readable and what it claims to be?

`check_bundle` opens a bundle read-only (which already refuses a file that is not
a warm bundle or is of another format version) and then checks SQLite's own
page-level consistency, the manifest's fields, every blob against its sha256 and
size, that every kernel's blob is there, that every tune's candidates parse, and
every signature (`warmcli.signing`): by which key, valid or not, what it covers;
an invalid one is a problem, and so, under trusted keys, is a row none of them signed.
Everything is read in one snapshot (one read transaction), so a writer committing
meanwhile never makes a sound bundle look corrupt. It returns an `IntegrityReport`
naming each problem; it never repairs, deletes or writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from warmcli.bundle import FORMAT_VERSION, Bundle, BundleError
from warmcli.signing import SignatureReport, signature_report

MANIFEST_FIELDS = ("format_version", "warm_version", "created", "updated")


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

    @property
    def ok(self) -> bool:
        return not self.problems


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
    with Bundle.open(path) as bundle, bundle.snapshot():  # writers may commit meanwhile
        report.problems += [f"sqlite: {line}" for line in bundle.integrity_check()]
        report.problems += _manifest_problems(bundle.manifest())
        blobs: set[str] = set()
        for sha, _size, actual in bundle.blob_digests():
            blobs.add(sha)
            if actual != sha:
                report.problems.append(f"blob {sha[:16]} does not match its sha256")
        report.blobs = len(blobs)
        kernels = bundle.kernels()
        report.kernels = len(kernels)
        for k in kernels:
            if k.sha256 not in blobs:
                report.problems.append(
                    f"kernel {k.label} ({k.device} {k.arch}) has no blob {k.sha256[:16]}"
                )
        keys = bundle.tune_keys()
        report.tunes = len(keys)
        for key in keys:
            try:
                bundle.tune(key)
            except BundleError as exc:
                report.problems.append(str(exc).split(": ", 1)[-1])
        report.signatures = signature_report(bundle, trusted_keys)
        report.problems += report.signatures.problems
    return report
