"""Prefetched kernel rows read their blob's size by a join (perf54a, issue 16's `serve_per_kernel`).

The prefetch select reads each row's blob size by a left join on the blob's key, not a
correlated subquery per row (which SQLite ran afresh for every row): a row whose blob is
gone is still prefetched, its size NULL as the subquery gave it (listed with size 0, never
served), a blob size that is no size is refused in the words a read by its key gives, and
every other row's size is its own blob's.
"""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from test_serve_fast_paths import _stored

from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError


def test_each_prefetched_row_has_its_own_blobs_size_or_none(tmp_path) -> None:
    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 4)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM blobs WHERE sha256 = ?", (records[1].sha256,))
        conn.execute("UPDATE blobs SET size = 'many' WHERE sha256 = ?", (records[2].sha256,))
    with Bundle.open(path) as bundle:
        rows = bundle.kernel_rows("host", "x86_64")
        assert list(rows) == [r.key for r in records]  # one row each, in stored order
        assert [rows[r.key][12] for r in records] == [1, None, "many", 4]
        for record in (records[0], records[1], records[3]):
            assert bundle.kernel(record.key, rows, keyed=True) == bundle.kernel(record.key)
        assert bundle.kernel(records[1].key, rows).size == 0  # listed, never served
        refusals = []
        for fetched in (rows, None):
            with pytest.raises(BundleError, match="not a blob size") as refused:
                bundle.kernel(records[2].key, fetched, keyed=True)
            refusals.append(str(refused.value))
        assert refusals[0] == refusals[1]
