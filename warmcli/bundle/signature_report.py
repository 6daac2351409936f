"""What `warm verify` says of a bundle's signatures: `signature_report`.

Each stored signature checked (valid or not, trusted or not, how many of the bundle's
signed rows it covers, stale: signed in another format; a malformed row is named as
corrupt, a problem), and how many signed rows
(manifest, fingerprints, blobs, kernels, tunes) no valid current signature (by a
trusted key, when keys are given) vouches for, the first few kernels and tunes among
them named. Signatures and row hashes are read through the `SignedRows` protocol of
`warmcli.bundle.signing` (`Bundle`'s, `warmcli.bundle.signed`). It owns no state and
never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from warmcli.bundle.signing import SHOWN, RowSet, SignedRows, stale


@dataclass
class SignatureStatus:
    key_id: str
    signed_at: float
    valid: bool
    trusted: bool | None  # None: no trusted keys were given
    covers: int  # rows of the bundle whose hash this signature holds
    stale: bool = False  # valid, but signed in another format: it vouches for no row


@dataclass
class SignatureReport:
    """What `warm verify` says of a bundle's signatures."""

    signatures: list[SignatureStatus] = field(default_factory=list)
    rows: int = 0
    uncovered: int = 0  # rows no valid (trusted, when keys are given) signature covers
    uncovered_entries: list[str] = field(default_factory=list)  # kernels, tunes: the first few
    stale: list[str] = field(default_factory=list)  # valid signatures of another format: why
    corrupt: list[str] = field(default_factory=list)  # malformed signature rows: why
    trust_required: bool = False
    vouched: bool = False  # some valid signature (by a trusted key, when keys are given)

    @property
    def invalid(self) -> list[str]:
        """Invalid signatures: a file holding one is no sound bundle, trusted keys or not."""
        return [f"signature by key {s.key_id} is invalid" for s in self.signatures if not s.valid]

    @property
    def problems(self) -> list[str]:
        """Invalid and stale signatures; under trusted keys, also every row no trusted key
        signed."""
        found = self.corrupt + self.invalid + self.stale
        if self.trust_required and not self.vouched:
            found += [] if self.stale else ["not signed by a trusted key"]
        elif self.trust_required and self.uncovered:
            named = f": {', '.join(self.uncovered_entries)}" if self.uncovered_entries else ""
            found.append(
                f"{self.uncovered} of {self.rows} row(s) not signed by a trusted key{named}"
            )
        return found


def signature_report(bundle: SignedRows, trusted: Sequence[bytes] | None) -> SignatureReport:
    """Check every signature of `bundle` and which of its rows they cover."""
    report = SignatureReport(trust_required=trusted is not None)
    stored = bundle.signatures(on_error=lambda _key, why: report.corrupt.append(why))
    valid = {s.key_id: s.valid() for s in stored}
    sets = {s.key_id: RowSet([s.rows]) for s in stored if valid[s.key_id]}
    counts = dict.fromkeys(sets, 0)
    version = bundle.format_version()
    vouching, stale_ids = set(), set()
    for s in stored:
        why = stale(s, version) if valid[s.key_id] else None
        if why:
            stale_ids.add(s.key_id)
        if valid[s.key_id] and (trusted is None or s.public_key in trusted):
            if why:
                report.stale.append(why)
            else:
                vouching.add(s.key_id)
    report.vouched = bool(vouching)
    if not sets:  # no valid signature: every row is uncovered, and none needs its hash
        report.rows, first = bundle.signed_rows(("kernels", "tunes"), SHOWN)
        report.uncovered = report.rows
        report.uncovered_entries = [f"{table} {name[:16]}" for table, name in first]

    def over(name: str, why: str) -> None:  # a row over a limit (named by the integrity
        report.rows += 1  # check as corrupt): never hashed, so no signature covers it
        report.uncovered += 1
        table = next((t for t in ("kernels", "tunes") if why.startswith(f"corrupt {t[:-1]} ")), "")
        if table and len(report.uncovered_entries) < SHOWN:  # as `signed_rows` names it
            report.uncovered_entries.append(f"{table} {name[:16]}")

    for table, name, h in bundle.row_hashes(over) if sets else ():
        report.rows += 1
        for k, hashes in sets.items():
            counts[k] += h in hashes
        if not any(h in sets[k] for k in vouching):
            report.uncovered += 1
            if table in ("kernels", "tunes") and len(report.uncovered_entries) < SHOWN:
                report.uncovered_entries.append(f"{table} {name[:16]}")
    for s in stored:
        trusted_here = None if trusted is None else s.public_key in trusted
        covers, old = counts.get(s.key_id, 0), s.key_id in stale_ids
        report.signatures.append(
            SignatureStatus(s.key_id, s.signed_at, valid[s.key_id], trusted_here, covers, old)
        )
    return report
