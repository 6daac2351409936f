"""An attacker's review of warm's newest readers (u1h): each hand-crafted bundle here broke
a reader before its fix. A production process given one serves what it can, misses the
rest and exits cleanly; a command gives one clear line. Real files, written with sqlite3;
the real CLI and real production processes in subprocesses (forks of servers that imported
the CLI, or numpy and warmcli, once: `tests/forked_cli.py`, `tests/forked_python.py`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from forked_python import ForkedPython

from warmcli.bundle.candidates import decode, pack
from warmcli.bundle.remote import RemoteError, cache_dir, fetch
from warmcli.bundle.store import Bundle
from warmcli.cli.inspect import NAMED_TUNES
from warmcli.errors import BundleError
from warmcli.records import tune_key

SERVE = SERVE_MATMUL.format(examples=str(EXAMPLES)) + "print(r)\n"
ESCAPES = "\x1b[31m\x1b]0;pwned\x07"


def crafted(good: Path, path: Path, *statements: str) -> Path:
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()
    return path


@pytest.fixture(name="producing", scope="module")
def producing_server() -> Iterator[ForkedPython]:
    """The module's production processes, each a fork of one that imported numpy and
    warmcli (`tests/forked_python.py`): what each serves and says of a hostile bundle is
    tested, not how it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)  # (conftest's `warm`'s, its home aside)
    yield server
    server.close()


def serve(
    producing: ForkedPython, warm: Warm, path: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = dict(warm.env, WARM_BUNDLE=str(path), **env)
    return producing.run(SERVE, env=environ, cwd=ROOT, timeout=120)


def test_a_tune_miss_explained_over_rows_sqlite_cannot_hand_back_is_a_miss_not_a_crash(
    made: tuple[Warm, Path], tmp_path: Path, producing: ForkedPython
) -> None:
    """A tune the bundle lacks is explained against the operation's other rows: one of them
    text SQLite cannot decode (invalid UTF-8, escapes after it) or a value longer than warm
    reads stops that listing. The miss is explained as corrupt, logged escaped; never a
    traceback that prints the row's escapes raw."""
    warm, good = made
    bad_key = "CAST(x'ff1b5b33316d1b5d303b70776e6507' AS TEXT)"  # \xff, then ESC[31m, OSC title
    cases = {
        "undecodable": (f"UPDATE tunes SET key = {bad_key} WHERE rowid = 1",),
        "too-long": (
            "UPDATE tunes SET key = x'00' || key WHERE rowid = 1",
            "UPDATE tunes SET shape_key = zeroblob(20000000) WHERE rowid = 2",
        ),
    }
    for name, statements in cases.items():
        path = crafted(good, tmp_path / f"{name}.warm", *statements)
        for env in ({}, {"WARM_EXPLAIN": "1"}):
            proc = serve(producing, warm, path, **env)
            out = proc.stdout + proc.stderr
            assert proc.returncode == 0, (name, env, out)
            assert "Traceback" not in out and "\x1b" not in out, (name, env, out)
            if env:
                assert "corrupt" in proc.stderr, (name, proc.stderr)


def _blobs_changed(good: Path, path: Path, change: Callable[[bytes], bytes]) -> Path:
    """`good` with every blob replaced by `change` of it, its sha256 (and its kernels') right."""
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    with conn:
        for sha, data in conn.execute("SELECT sha256, data FROM blobs").fetchall():
            other = change(data)
            new = hashlib.sha256(other).hexdigest()
            conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?)", (new, len(other), other))
            conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
            conn.execute("DELETE FROM blobs WHERE sha256 = ?", (sha,))
    conn.close()
    return path


def _typed(data: bytes, e_type: int) -> bytes:
    return data[:16] + e_type.to_bytes(2, "little") + data[18:]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda data: data[:64], "cut short"),  # its header only
        (lambda data: data[: len(data) // 2], "cut short"),  # its segments cut
        (lambda data: _typed(data, 2), "not a shared object"),  # an executable
        (lambda data: _typed(data, 1), "not a shared object"),  # a relocatable object
        (lambda data: data[:4] + b"\x07" + data[5:], "not an ELF"),  # no ELF class
    ],
    ids=["header only", "half", "executable", "relocatable", "no class"],
)
def test_check_names_a_host_binary_the_loader_refuses_whose_sha256_is_right(
    made: tuple[Warm, Path], tmp_path: Path, change: Callable[[bytes], bytes], said: str
) -> None:
    """`warm check` reads a host build's ELF header (never loading it): a header alone, a
    file cut short or an ELF that is no shared object is not servable, whatever its sha256."""
    warm, good = made
    path = _blobs_changed(good, tmp_path / "refused.warm", change)
    proc = warm("check", "--json", path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reasons = {u["detail"] for u in json.loads(proc.stdout)["unservable"]}
    assert reasons and all(said in r for r in reasons), reasons


def test_a_negative_time_of_a_candidate_is_refused_never_shown_as_measured(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A time warm measured is never negative: a tune whose candidates say one is a corrupt
    entry (`warm stats` refuses it, `warm verify` names it), never a pick shown at -1 s."""
    warm, good = made
    path = tmp_path / "negative.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    with conn:
        ids = dict(conn.execute("SELECT key, id FROM tune_kernels").fetchall())
        keys = {i: k.hex() for k, i in ids.items()}
        key, cands = conn.execute("SELECT key, candidates FROM tunes LIMIT 1").fetchone()
        items = [replace(c, seconds=-1.0, samples=(-1.0,)) for c in decode(cands, keys.get)]
        conn.execute(
            "UPDATE tunes SET candidates = ? WHERE key = ?", (pack(items, ids.__getitem__), key)
        )
    conn.close()
    for command, code in (("stats", 2), ("verify", 1), ("check", 1)):
        proc = warm(command, path)
        assert proc.returncode == code, (command, proc.stdout + proc.stderr)
        assert "negative" in proc.stdout + proc.stderr, (command, proc.stdout + proc.stderr)


def test_a_candidate_name_that_is_not_unicode_is_shown_escaped_never_a_traceback(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A packed candidates document holds any UTF-8 bytes, lone surrogates too (read with
    `surrogatepass`): a name or reason of them is shown escaped, as a control character is,
    never a `UnicodeEncodeError` traceback at the terminal."""
    warm, good = made
    path = tmp_path / "surrogates.warm"
    shutil.copyfile(good, path)
    lone = "\ud800\udfff\udc80"
    conn = sqlite3.connect(path)
    with conn:
        ids = dict(conn.execute("SELECT key, id FROM tune_kernels").fetchall())
        keys = {i: k.hex() for k, i in ids.items()}
        for key, cands, pick in conn.execute("SELECT key, candidates, pick FROM tunes").fetchall():
            items = [
                c if c.name == pick else replace(c, name=c.name + lone, reason=lone)
                for c in decode(cands, keys.get)
            ]
            packed = pack(items, ids.__getitem__)
            conn.execute("UPDATE tunes SET candidates = ? WHERE key = ?", (packed, key))
    conn.close()
    for args in (
        ("stats", path),
        ("stats", "--json", path),
        ("verify", path),
        ("diff", good, path),
    ):
        proc = warm(*args)
        assert proc.returncode in (0, 1), (args, proc.stdout + proc.stderr)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
    assert "\\ud800\\udfff\\udc80" in warm("stats", path).stdout


class _Hostile(BaseHTTPRequestHandler):
    """A store that lies: a length that is no number, a redirect to plain http elsewhere."""

    def do_GET(self) -> None:
        if self.path == "/length.warm":
            self.send_response(200)
            self.send_header("Content-Length", "abc")
            self.end_headers()
            self.wfile.write(b"SQLite format 3\x00" + b"\x00" * 100)
        else:  # TEST-NET-1: no loopback address, so plain http to it is refused
            self.send_response(302)
            self.send_header("Location", "http://192.0.2.1:9/b.warm")
            self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_length_that_is_no_number_is_a_refused_download_not_a_traceback(
    hostile_store: str,
) -> None:
    with pytest.raises(RemoteError, match="download refused"):
        fetch(hostile_store + "/length.warm")
    folder = cache_dir(hostile_store + "/length.warm")
    assert not [p for p in folder.iterdir() if p.suffix == ".tmp"]


def test_a_redirect_to_plain_http_elsewhere_is_refused_never_followed(hostile_store: str) -> None:
    """Plain http:// is taken only for this machine; a store on it that redirects elsewhere
    over plain http (or an https:// store that does: a downgrade) is refused, not followed."""
    with pytest.raises(RemoteError, match=r"redirect.*refused"):
        fetch(hostile_store + "/away.warm")


def test_sqlites_words_on_a_row_it_cannot_decode_carry_no_escape_of_it(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """SQLite's error on text that is not UTF-8 quotes the text: the `BundleError` a
    library caller gets (and may log as it is) names the entry instead, quoting none of it
    (where it cannot name it, it holds SQLite's words escaped, as warm shows them)."""
    _, good = made
    path = crafted(
        good,
        tmp_path / "quoted.warm",
        "UPDATE kernels SET label = CAST(x'ff1b5b33316d1b5d303b70776e6507' AS TEXT)",
    )
    with Bundle.open(path) as bundle, pytest.raises(BundleError) as raised:
        list(bundle.each_kernel())
    assert "label: not UTF-8" in str(raised.value), raised.value  # named, the text not quoted
    assert "\x1b" not in str(raised.value), raised.value


def test_stats_json_cut_short_by_a_corrupt_tune_is_still_one_json_document(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm stats --json` of a large bundle streams its tunes: a corrupt one met after
    others were written ends the document it began with the error (`{..., "error": ...,
    "exit": 2}`), never a cut document followed by a second one."""
    count = NAMED_TUNES + 1000
    path = build_big(tmp_path / "cut.warm", 0, count)  # (its tunes streamed in rowid order)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE tunes SET pick = 'none of them' WHERE rowid = ?", (count - 100,))
    conn.close()
    proc = warm("stats", "--json", path)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["exit"] == 2 and "corrupt tune entry" in doc["error"], doc.keys()
    assert 0 < len(doc["tunes"]) < count


def _shape_of_digits(good: Path, path: Path, digits: int) -> Path:
    """`good` with its first tune's shape holding a number of `digits` digits (its key made
    anew, so the row is sound)."""
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    with conn:
        op, shape, device, checksum = conn.execute(
            "SELECT operation, shape_key, device, lower(hex(checksum)) FROM tunes WHERE rowid = 1"
        ).fetchone()
        shape = shape.replace("x", "9" * digits + "x", 1)
        key = bytes.fromhex(tune_key(op, shape, device, checksum))
        conn.execute("UPDATE tunes SET shape_key = ?, key = ? WHERE rowid = 1", (shape, key))
    conn.close()
    return path


@pytest.mark.parametrize("digits", [400, 5000])
def test_a_shape_holding_a_number_of_any_length_is_sorted_and_explained(
    made: tuple[Warm, Path], tmp_path: Path, digits: int, producing: ForkedPython
) -> None:
    """Numbers in a bundle's shapes and labels are ordered and compared as numbers, never
    made Python ints or floats that overflow (past 4300 digits `int()` refuses; past 308 a
    ratio is no float): `warm stats` lists them, a production process explains its miss."""
    warm, good = made
    path = _shape_of_digits(good, tmp_path / f"digits{digits}.warm", digits)
    for args in (("stats", path), ("stats", "--json", path), ("diff", good, path)):
        proc = warm(*args)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    proc = serve(producing, warm, path, WARM_EXPLAIN="1")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "shape" in proc.stderr, proc.stderr


def test_verify_hashes_a_large_blob_a_chunk_at_a_time(tmp_path: Path) -> None:
    """`warm verify` hashes every blob: a 96 MB one is read a chunk at a time, never made
    one bytes object (with SQLite's own copy, ~3x its size in memory before)."""
    path = tmp_path / "large.warm"
    Bundle.create(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO blobs VALUES ('x', 0, randomblob(96 << 20))")
    conn.close()
    with Bundle.open(path) as bundle:
        tracemalloc.start()
        try:
            digests = [d[2] for d in bundle.blob_digests()]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert len(digests) == 1 and len(digests[0]) == 64
    assert peak < 8 << 20, peak
