"""Review of fleet61's `merged_from` record (stop 62), against the real CLI and the real
HTTP store on 127.0.0.1 (`test_remote`'s).

- A merge whose record of the URLs it was merged from was over the manifest's 4,096-char
  value limit dropped the last entries silently: a push to a dropped URL went over another
  job's push, exit 0. Now the record spans as many rows as it needs (a bounded number), and
  a merge past that is refused in one line, nothing written.
- Plain `warm stats` said nothing of where a merged bundle came from (only --json, as text).
- A hostile record's ETag (CR LF, a byte no header holds) reached a PUT's `If-Match`.
- An s3:// object removed since the merge: the push said "no bundle there ... none was pushed
  to it yet (warm push)", or "cannot be told", where https:// says it changed (removed).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from local_http import served_locally
from test_remote import Store, _handler, built, http_store, s3  # noqa: F401  (fixtures)

from warmcli.bundle.merged_from import KEY, parse, read

Served = tuple[Store, str, ThreadingHTTPServer]
STALE = '"stale-version"'  # an ETag the store's object never has


def _rows(bundle: Path) -> dict[str, str]:
    with sqlite3.connect(bundle) as conn:
        return dict(conn.execute("SELECT key, value FROM manifest"))


def _record(bundle: Path, rows: dict[str, str]) -> None:
    """Set `bundle`'s merged_from rows (key -> value) as a bundle from elsewhere may."""
    with sqlite3.connect(bundle) as conn:
        conn.execute("DELETE FROM manifest WHERE key = ? OR key GLOB ?", (KEY, f"{KEY}.*"))
        conn.executemany("INSERT INTO manifest VALUES (?, ?)", rows.items())


def _fill(prefix: str, count: int, url_chars: int = 200) -> list[dict[str, Any]]:
    """`count` entries of long URLs under `prefix` (each about `url_chars` long)."""
    pad = "p" * url_chars
    return [
        {"url": f"{prefix}/{i}-{pad}.warm", "etag": f'"e{i}"', "sha256": f"{i:064x}"}
        for i in range(count)
    ]


def test_a_record_over_one_rows_limit_keeps_every_push_condition(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    """Two inputs, each recording URLs it was merged from: the first's fill one manifest
    value (about 4,000 chars), the second's names this store's URL at a version it no longer
    holds. Before: OUT kept the first's only, the push went over the store's object (exit 0).
    """
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    first, second, out = tmp_path / "1.warm", tmp_path / "2.warm", tmp_path / "out.warm"
    first.write_bytes(built[0])
    second.write_bytes(built[1])
    filler = _fill("https://elsewhere.example/a", 11, 220)
    mine = [{"url": url, "etag": STALE, "sha256": "a" * 64}]
    assert len(json.dumps(filler)) <= 4096 < len(json.dumps(filler + mine))
    _record(first, {KEY: json.dumps(filler)})
    _record(second, {KEY: json.dumps(mine)})
    proc = warm("merge", first, second, "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(out)
    assert all(len(v) <= 4096 for v in rows.values())
    held = read(rows)
    assert [o.url for o in held] == [d["url"] for d in filler] + [url]  # every one, in order
    store.files["/fleet.warm"] = theirs = b"another job's push"
    pushed = warm("push", out, url)
    assert pushed.returncode == 2, pushed.stdout + pushed.stderr  # before: 0, theirs replaced
    assert f"{url} changed since {out} was merged from it" in pushed.stderr
    assert pushed.stderr.count("\n") == 1 and store.files["/fleet.warm"] == theirs
    assert warm("verify", out).returncode == 0 and warm("check", out).returncode == 0
    # Merged again: the whole record carried (read from each of its rows).
    again = tmp_path / "again.warm"
    assert warm("merge", out, first, "-o", again).returncode == 0
    assert read(_rows(again)) == held
    assert warm("push", again, url).returncode == 2 and store.files["/fleet.warm"] == theirs


def test_a_record_past_every_row_is_refused_and_nothing_written(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    first, second, out = tmp_path / "1.warm", tmp_path / "2.warm", tmp_path / "out.warm"
    first.write_bytes(built[0])
    second.write_bytes(built[1])
    rows = {}
    for n in range(1, 17):  # 16 full rows (`MAX_ROWS`), then one more entry in the other
        filler = _fill(f"https://elsewhere.example/{n}", 11)
        rows[KEY if n == 1 else f"{KEY}.{n}"] = json.dumps(filler)
    _record(first, rows)
    _record(second, {KEY: json.dumps(_fill("https://more.example", 1))})
    assert len(read(_rows(first))) == 16 * 11
    out.write_bytes(b"kept")  # an OUT there before: as it was
    proc = warm("merge", first, second, "-o", out, "--force")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "merged from" in proc.stderr and "push" in proc.stderr
    assert out.read_bytes() == b"kept"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.warm")]


def test_plain_stats_says_where_a_merged_bundle_came_from_escaped(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    hostile = "https://evil.example/\x1b]0;pwned\x07x.warm"
    docs = [
        {"url": "https://store.example/fleet.warm", "etag": '"v1"', "sha256": "a" * 64},
        {"url": hostile, "etag": None, "sha256": "b" * 64},
    ]
    docs.append(
        {"url": "https://ci:hunter2@x.example/a.warm?sig=zzz", "etag": None, "sha256": "c" * 64}
    )
    docs += _fill("https://many.example", 11, 10)
    _record(bundle, {KEY: json.dumps(docs)})
    proc = warm.with_env(COLUMNS="200")("stats", bundle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "merged from" in out  # before: not said at all
    assert "https://store.example/fleet.warm" in out and '"v1"' in out
    assert "sha256 bbbbbbbbbbbbbbbb" in out
    assert "https://ci:***@x.example/a.warm?***" in out  # as every URL is shown
    assert "hunter2" not in out and "zzz" not in out
    assert "\x1b]" not in out and "\x07" not in out
    assert "and 11 more" in out  # a few shown, the count of the rest (--json: every one)
    # --json: the record as it is (text), as before
    assert json.loads(warm.json("stats", bundle)["manifest"][KEY]) == docs


@pytest.fixture
def no_etag_store() -> Iterator[tuple[Store, str]]:
    """`test_remote`'s HTTP store, but its HEAD says no ETag (as some stores do)."""

    store = Store()
    base = _handler(store)

    class Handler(base):  # type: ignore[misc,valid-type]
        def send_header(self, keyword: str, value: str) -> None:
            if not (self.command == "HEAD" and keyword == "ETag"):
                super().send_header(keyword, value)

    with served_locally(Handler) as base:
        yield store, base


@pytest.mark.parametrize(
    "etag",
    ['"x"\r\nX-Evil: 1', '"x"\r\n\tX-Evil: 1', '"caf\u00e9"', '"\u2603"', '"x" "y"'],
    ids=["crlf", "folded", "latin1", "unicode", "space"],
)
def test_a_hostile_recorded_etag_never_reaches_a_header(
    warm: Warm,
    tmp_path: Path,
    no_etag_store: tuple[Store, str],
    built: tuple[bytes, bytes],  # noqa: F811
    etag: str,
) -> None:
    """A foreign bundle's record of this URL with an ETag no HTTP header holds: no record
    (as fleet61 takes any record warm never writes), never a traceback or a header sent."""
    store, base = no_etag_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = b"held"
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    _record(bundle, {KEY: json.dumps([{"url": url, "etag": etag, "sha256": "a" * 64}])})
    proc = warm("push", bundle, url)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all("X-Evil" not in str(h) for h in store.puts)
    assert parse(_rows(bundle)[KEY]) == []


@pytest.mark.parametrize("etag", ['"abc"', None], ids=["etag", "sha256"])
def test_an_s3_object_removed_since_the_merge_is_said_as_changed(
    warm: Warm,
    tmp_path: Path,
    s3: Any,  # noqa: F811
    built: tuple[bytes, bytes],  # noqa: F811
    etag: str | None,
) -> None:
    """As https:// says it (its HEAD's 404: `since.moved`): the store moved on, merge again;
    before, a 404 said as a download's ("none was pushed to it yet (warm push)", the
    command the user ran) or, with no ETag recorded, "cannot be told"."""
    url = f"s3://fleet/gone-{'etag' if etag else 'sha256'}.warm"  # (moto's objects outlive
    # a test's server: the other case's forced push is at its URL, which this bundle holds)
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[1])
    _record(bundle, {KEY: json.dumps([{"url": url, "etag": etag, "sha256": "a" * 64}])})
    proc = warm("push", bundle, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{url} changed since {bundle} was merged from it" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert warm("push", bundle, url, "--force").returncode == 0  # --force: pushed all the same


def test_put_replaces_the_record_rows_only(tmp_path: Path, built: tuple[bytes, bytes]) -> None:  # noqa: F811
    """`put` of a record removes the rows of any record there, and no other: SQL's LIKE
    takes `_` for any character (`mergedXfrom.2` went with them)."""
    from warmcli.bundle.merged_from import laid_out, put

    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    _record(bundle, {KEY: "[]", f"{KEY}.2": "[]"})
    with sqlite3.connect(bundle) as conn:
        conn.execute("INSERT INTO manifest VALUES ('mergedXfrom.2', 'kept')")
        laid = laid_out(read({KEY: json.dumps(_fill("https://a.example", 1))}))
        assert not isinstance(laid, str)
        put(conn, laid)
    rows = _rows(bundle)
    assert rows["mergedXfrom.2"] == "kept" and f"{KEY}.2" not in rows
    assert [o.url for o in read(rows)] == [_fill("https://a.example", 1)[0]["url"]]
