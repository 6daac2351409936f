"""User trial 62a: a new user's workloads (threads, unicode sources and an `#include` beside
them, tunes whose candidates fail to compile, a workload that raises midway, a lazy import,
`multiprocessing`), and bundles edited with `sqlite3`.

A blob row whose `data` is text, not a binary (`UPDATE blobs SET data = 'hello'`), is
missing to every reader of warm's (`warm merge`: `blob ... is missing`; `warm check`: not
servable), but `warm diff`, which names a missing or size-lying blob without hashing one,
selected only binary rows: it called such a bundle the same as the one it was copied from
and exited 0 (trial62a). It now names it corrupt and exits 1, as the README's exit codes say.

Real parts: the real CLI in a subprocess, real SQLite edits, the host example's bundle.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import Warm


def _first_used_blob_as_text(path: Path) -> str:
    """Replace the data of the blob the first kernel uses by text; returns its sha256."""
    with sqlite3.connect(path) as conn:
        (sha,) = conn.execute("SELECT sha256 FROM kernels ORDER BY rowid LIMIT 1").fetchone()
        conn.execute("UPDATE blobs SET data = 'hello' WHERE sha256 = ?", (sha,))
    conn.close()
    return str(sha)


def test_diff_names_a_blob_stored_as_text_corrupt(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """Before: exit 0, `the bundles hold the same kernels and tunes, with the same picks`."""
    good = host_bundle(tmp_path / "good.warm")
    bad = host_bundle(tmp_path / "bad.warm")
    sha = _first_used_blob_as_text(bad)
    done = warm("diff", bad, good)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the same" not in done.stdout, done.stdout
    assert f"blob {sha[:16]} is no binary" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    as_json = warm("diff", good, bad, "--json")
    assert as_json.returncode == 1, as_json.stdout + as_json.stderr
    assert sha[:16] in as_json.stdout, as_json.stdout
    merged = warm("merge", bad, good, "-o", tmp_path / "m.warm")  # as every reader: missing
    assert f"blob {sha[:16]} is missing: copied from" in merged.stdout, merged.stdout
    verified = warm("verify", bad)  # by its hash, as before: one problem, not two
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert verified.stdout.count(sha[:16]) == 1, verified.stdout
    assert "1 problem(s)" in verified.stdout, verified.stdout


def test_verify_given_runs_bundle_option_says_to_name_the_bundle(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """Before: `No such option: --bundle (Possible options: --module)`, Click's guess, where
    a user who ran `warm run w.py --bundle b.warm` types `warm verify w.py --bundle b.warm`."""
    bundle = host_bundle(tmp_path / "b.warm")
    workload = tmp_path / "w.py"
    workload.write_text("def workload(rt):\n    pass\n")
    for args in (
        (workload, "--bundle", bundle),
        ("--bundle", bundle, "-w", workload),
        ("-b", bundle, "-w", workload),
    ):
        done = warm("verify", *args)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert "an option of warm run" in lines[0], done.stderr
        assert "name the bundle as its argument, warm verify BUNDLE" in lines[0], done.stderr
        assert "Possible options" not in lines[0], done.stderr


def test_verify_given_a_workload_as_its_bundle_says_how_to_replay_it(
    warm: Warm, tmp_path: Path
) -> None:
    """Before: `w.py: not a warm bundle (not an SQLite file)` alone, where a user types
    `warm verify w.py` as `warm run w.py` takes its workload."""
    workload = tmp_path / "w.py"
    workload.write_text("def workload(rt):\n    pass\n")
    done = warm("verify", workload)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "not a warm bundle (not an SQLite file)" in lines[0], done.stderr
    assert f"to replay it, warm verify BUNDLE --workload {workload}" in lines[0], done.stderr
    other = tmp_path / "notes.txt"  # no workload's name: as before
    other.write_text("x")
    done = warm("verify", other)
    assert done.returncode == 2 and "--workload" not in done.stderr, done.stderr
