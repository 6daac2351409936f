"""A bundle no valid signature covers is reported without hashing a row, and the report
is the one hashing every row gives (`signature_report`'s loop over `row_hashes`)."""

from __future__ import annotations

from pathlib import Path

from tests.big_bundle import build_big
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import SHOWN
from warmcli.bundle.store import Bundle


def test_an_unsigned_report_counts_and_names_what_hashing_would(tmp_path: Path) -> None:
    path = build_big(tmp_path / "big.warm", kernels=7, tunes=30)
    with Bundle.open(path) as bundle:
        every = list(bundle.row_hashes())
        names = [f"{t} {n[:16]}" for t, n, _ in every if t in ("kernels", "tunes")][:SHOWN]
        for trusted in (None, [b"\0" * 32]):
            report = signature_report(bundle, trusted)
            assert (report.rows, report.uncovered) == (len(every), len(every))
            assert report.uncovered_entries == names
            assert not report.vouched and report.signatures == []
        assert bundle.signed_rows(("blobs",), 3) == (
            len(every),
            [("blobs", n) for t, n, _ in every if t == "blobs"][:3],
        )
