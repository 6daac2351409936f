"""No blob's size sets warm's memory: a real bundle of the host example whose blob is
replaced by a 96 MiB value (with its right sha256 and size, or a wrong sha256), through
the real CLI in subprocesses that print their own peak RSS (`VmHWM`: this process's, not
its parent's, as `ru_maxrss` would be).

Before blobs were read in chunks, `warm check`, `warm merge`, `warm verify --workload`
and a production process each held the blob two to four times over (343-647 MB for a
150 MB blob); now each stays near what it takes with no blob at all (~50 MB), so the
peak is asserted loosely: below the blob's size. A blob over `MAX_LOADED_BYTES` is a
miss saying why; a corrupt one is refused by merge; a big one merges intact.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm

from warmcli.bundle.blobs import CHUNK_BYTES, MAX_LOADED_BYTES

BIG = 96 << 20  # over the cap (64 MiB), many chunks
_PEAK = (  # the CLI as `warm` runs it, its peak RSS said last on stderr as it exits
    "import atexit, sys\n"
    "def hwm():\n"
    "    lines = open('/proc/self/status').read().splitlines()\n"
    "    return int(next(l for l in lines if l.startswith('VmHWM:')).split()[1]) << 10\n"
    "from warmcli.__main__ import main\n"
    "def peak():\n"
    "    sys.stdout.flush()\n"
    "    rss = hwm()\n"
    "    print(f'peak {rss}', file=sys.stderr, flush=True)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['warm', *sys.argv[1:]]\n"
    "main()\n"
)


def _padded(base: Path, out: Path, *, right: bool) -> str:
    """`base` copied to `out`, its row_sum kernel's blob padded with zeros to `BIG` bytes
    (the same ELF, longer), under its new sha256 (`right`) or its old one; the sha256."""
    out.write_bytes(base.read_bytes())
    with sqlite3.connect(out) as conn:
        [(sha, data)] = conn.execute(
            "SELECT sha256, data FROM blobs WHERE sha256 = "
            "(SELECT sha256 FROM kernels WHERE entry = 'row_sum' LIMIT 1)"
        ).fetchall()
        big = bytes(data) + bytes(BIG - len(data))
        new = hashlib.sha256(big).hexdigest() if right else sha
        conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
        conn.execute("UPDATE blobs SET sha256 = ?, size = ?, data = ? WHERE sha256 = ?",
                     (new, BIG, big, sha))  # fmt: skip
    return new


@pytest.fixture(scope="module")
def bundles(made: tuple[Warm, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    warm, base = made
    where = tmp_path_factory.mktemp("big")
    good, bad = where / "good.warm", where / "bad.warm"
    return {
        "warm": warm,
        "base": base,
        "good": good,
        "good_sha": _padded(base, good, right=True),
        "bad": bad,
        "bad_sha": _padded(base, bad, right=False),
    }


def _peak(warm: Warm, *args: str | Path) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes, stdout + the rest of stderr) of `warm *args`."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *map(str, args)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=300,
        cwd=ROOT,
    )
    *rest, last = proc.stderr.strip().splitlines() or [""]
    assert last.startswith("peak "), proc.stdout + proc.stderr
    return proc.returncode, int(last.split()[1]), proc.stdout + "\n".join(rest)


def test_the_cap_is_far_above_what_warm_builds(bundles: dict) -> None:
    with sqlite3.connect(bundles["base"]) as conn:
        [(largest,)] = conn.execute("SELECT max(length(data)) FROM blobs").fetchall()
    assert largest * 100 < MAX_LOADED_BYTES < BIG and CHUNK_BYTES < BIG // 64


def test_merge_copies_a_big_blob_intact_in_chunks(bundles: dict, tmp_path: Path) -> None:
    out = tmp_path / "merged.warm"
    code, peak, text = _peak(bundles["warm"], "merge", bundles["good"], bundles["base"], "-o", out)
    assert code == 0, text
    assert peak < BIG, f"merge peaked at {peak >> 20} MiB for a {BIG >> 20} MiB blob"
    with sqlite3.connect(out) as conn:
        [(size, length, data_sha)] = conn.execute(
            "SELECT size, length(data), sha256 FROM blobs WHERE sha256 = ?", (bundles["good_sha"],)
        ).fetchall()
        hashed = hashlib.sha256()
        with _blob(conn, data_sha) as blob:
            while chunk := blob.read(CHUNK_BYTES):
                hashed.update(chunk)
    assert size == length == BIG and hashed.hexdigest() == bundles["good_sha"]
    verified = bundles["warm"]("verify", out)  # intact, but never served: named (its kernels)
    problems = [line for line in verified.stdout.splitlines() if line.startswith("  kernel")]
    assert verified.returncode == 1 and problems, verified.stdout
    assert all("over the limit of" in line for line in problems), verified.stdout


def _blob(conn: sqlite3.Connection, sha: str) -> sqlite3.Blob:
    [(rowid,)] = conn.execute("SELECT rowid FROM blobs WHERE sha256 = ?", (sha,)).fetchall()
    return conn.blobopen("blobs", "data", rowid, readonly=True)


def test_merge_refuses_a_corrupt_big_blob_and_writes_nothing(bundles: dict, tmp_path: Path) -> None:
    out = tmp_path / "merged.warm"
    code, peak, text = _peak(bundles["warm"], "merge", bundles["bad"], "-o", out)
    assert code == 2 and f"blob {bundles['bad_sha'][:16]} does not match its sha256" in text
    left = [p.name for p in tmp_path.iterdir() if p.name != "merged.warm.lock"]
    assert peak < BIG and not out.exists() and left == []
    # beside an input holding a good copy (the base's), that copy is merged, and said
    code, peak, text = _peak(bundles["warm"], "merge", bundles["bad"], bundles["base"], "-o", out)
    assert code == 0 and peak < BIG and "copied from" in text, text


@pytest.mark.parametrize("which", ["good", "bad"])
def test_check_names_a_big_blob_without_holding_it(bundles: dict, which: str) -> None:
    code, peak, text = _peak(bundles["warm"], "check", bundles[which])
    assert code == 1 and peak < BIG, (peak, text)
    sha = bundles[f"{which}_sha"][:16]  # never read, so never hashed: a corrupt one too
    assert f"blob {sha} is {BIG} bytes, over the limit of" in text


def test_a_blob_over_the_cap_is_a_miss_saying_why(bundles: dict) -> None:
    """verify --workload serves as production does: the blob is never read, the kernel
    is a miss naming the cap, and the process stays small."""
    workload = EXAMPLES / "matmul_host.py"
    code, peak, text = _peak(bundles["warm"], "verify", bundles["good"], "--workload", workload)
    assert code == 1 and peak < BIG, (peak, text)
    assert f"blob {bundles['good_sha'][:16]} is {BIG} bytes, over the limit of" in text
    assert f"{MAX_LOADED_BYTES} bytes warm loads" in text


# A production process serving the host example from `sys.argv[1]`: its peak, what it missed.
SERVE_PEAK = (
    "import json, sys\n"
    f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
    "import matmul_host, warmcli.production as p\n"
    "p.use_bundle(sys.argv[1])\n"
    "matmul_host.workload(p.runtime('host'))\n"
    "lines = open('/proc/self/status').read().splitlines()\n"
    "peak = int(next(l for l in lines if l.startswith('VmHWM:')).split()[1]) << 10\n"
    "print(json.dumps([peak, [m.name for m in p.report().kernels]]))\n"
)


@pytest.mark.parametrize("which", ["good", "bad"])
def test_production_serves_around_a_big_blob(bundles: dict, which: str) -> None:
    peak, missed = bundles["warm"].production(SERVE_PEAK, bundles[which])
    assert peak < BIG and "row_sum" in missed, (peak >> 20, missed)


def test_the_other_commands_stay_flat(bundles: dict) -> None:
    for args in (
        ("stats", bundles["good"]),
        ("diff", bundles["good"], bundles["base"]),
        ("verify", bundles["bad"]),
    ):
        code, peak, text = _peak(bundles["warm"], *args)
        assert peak < BIG, (args, peak >> 20, text)
    assert code == 1 and f"blob {bundles['bad_sha'][:16]} does not match its sha256" in text


def test_a_large_library_is_compared_with_its_file_a_chunk_at_a_time(tmp_path: Path) -> None:
    from warmcli.backends.host import libraries

    binary = bytes(range(256)) * ((3 << 20) // 256 + 7)  # over the one-read size, uneven
    path = tmp_path / "lib.so"
    for on_disk, same in (
        (binary, True),
        (binary[:-1] + b"x", False),  # its last chunk differs
        (binary + b"\0", False),  # it grew
        (binary[:-1], False),  # cut short
    ):
        path.write_bytes(on_disk)
        fd = os.open(path, os.O_RDONLY)
        try:
            assert libraries._holds(fd, binary) is same
            assert libraries._holds(fd, on_disk[:100]) is (on_disk[:100] == on_disk)
        finally:
            os.close(fd)
