"""A row no listing can read (a value over the length SQLite lets warm load, a text that is
not UTF-8, a key that is not hex) stopped every command, `warm clean` too, in one line
about the whole bundle: nothing could repair it. `warm verify` now names each such entry
by its key, `warm clean` (and `--dry-run`) lists and removes it (by its rowid), every
sound entry survives and is still served, and production treats the row as a miss.
The real CLI over the host example's bundle, edited with plain SQLite.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import EXAMPLES, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)

HUGE = 35_000_000  # bytes: over what warm lets SQLite load (`MAX_VALUE_BYTES`)
# A production process: the example's workload, then each shape's row sums read back.
SERVE = f"""
import json, sys
sys.path.insert(0, {str(EXAMPLES)!r})
import numpy as np
import warmcli, matmul_host as m
rt = warmcli.runtime("host")
rng = np.random.default_rng(0)
sums = []
for rows, n, k in m.SHAPES:
    a = rt.upload(rng.standard_normal((rows, k), dtype=np.float32))
    b = rt.upload(rng.standard_normal((k, n), dtype=np.float32))
    bias = rt.upload(rng.standard_normal(n, dtype=np.float32))
    c, out = rt.buffer((rows, n), "float32"), rt.buffer(rows, "float32")
    rt.tune(m.MATMUL, a, b, c, rows, n, k)
    rt.launch(m.BIAS_RELU, c, bias, rows, n)
    rt.launch(m.ROW_SUM, c, out, rows, n)
    sums.append([float(x) for x in rt.read(out)])
print(json.dumps(sums))
"""


def _copy(good: Path, tmp_path: Path, *edits: str) -> Path:
    bundle = tmp_path / "b.warm"
    shutil.copyfile(good, bundle)
    conn = sqlite3.connect(bundle)
    for sql in edits:
        assert conn.execute(sql).rowcount == 1, sql
    conn.commit()
    conn.close()
    return bundle


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _counts(path: Path) -> tuple[int, int]:
    return tuple(_query(path, f"SELECT count(*) FROM {t}")[0][0] for t in ("kernels", "tunes"))  # type: ignore[return-value]


def _keys(path: Path) -> tuple[str, str]:
    """The key of the `row_sum` kernel (every shape uses it) and of the first tune."""
    kernel = _query(path, "SELECT key FROM kernels WHERE entry = 'row_sum'")[0][0]
    tune = _query(path, "SELECT lower(hex(key)) FROM tunes WHERE rowid = 1")[0][0]
    return bytes(kernel).decode(), bytes(tune).decode()  # type: ignore[arg-type]


def _serve(warm: Warm, bundle: Path) -> tuple[list[list[float]], str]:
    """What production computes over `bundle`, and its `WARM_REPORT` line(s)."""
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_REPORT="1")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _same(a: list[list[float]], b: list[list[float]]) -> bool:
    return all(np.allclose(x, y, rtol=1e-4, atol=1e-3) for x, y in zip(a, b, strict=True))


def _repaired(warm: Warm, good: Path, bundle: Path, kernel: str, tune: str) -> None:
    """`bundle` (`good` with the row_sum kernel and the first tune unreadable): verify names
    both, a dry run lists both and changes nothing, production computes what `good` serves
    (both a miss); clean removes both and only them: verify passes, stats reads it, and
    production is served every other entry."""
    expected, served = _serve(warm, good)
    assert "served everything" in served, served
    kernels, tunes = _counts(good)

    stats = warm("stats", bundle)
    assert stats.returncode == 2 and len(stats.stderr.splitlines()) == 1, stats.stderr
    assert f"'{kernel[:16]}'" in stats.stderr or f"'{tune[:16]}'" in stats.stderr, stats.stderr
    verified = warm("verify", bundle)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"'{kernel[:16]}'" in verified.stdout and f"'{tune[:16]}'" in verified.stdout

    got, report = _serve(warm, bundle)  # production: each a miss, the results the same
    assert _same(got, expected), (got, expected)
    assert "lacked 1 kernel(s) and 1 tune(s)" in report and tune[:16] in report, report

    dry = warm("clean", bundle, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["removed_count"] == {"kernels": 1, "tunes": 1}, plan
    assert all(r["reason"].startswith("corrupt") for r in plan["removed"]), plan
    assert _counts(bundle) == (kernels, tunes)

    cleaned = warm("clean", bundle)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "removed 1 kernel(s) and 1 tune(s)" in cleaned.stdout, cleaned.stdout
    assert _counts(bundle) == (kernels - 1, tunes - 1)
    left = {bytes(k).decode() for (k,) in _query(bundle, "SELECT key FROM kernels")}  # type: ignore[arg-type]
    assert left == {bytes(k).decode() for (k,) in _query(good, "SELECT key FROM kernels")} - {
        kernel
    }  # type: ignore[arg-type]
    verified = warm("verify", bundle)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert warm("stats", bundle).returncode == 0

    got, report = _serve(warm, bundle)  # every sound entry still served
    assert _same(got, expected), (got, expected)
    assert "lacked 1 kernel(s) and 1 tune(s)" in report and tune[:16] in report, report


def test_a_value_over_the_length_limit_is_named_and_removed(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    kernel, tune = _keys(good)
    bundle = _copy(
        good,
        tmp_path,
        f"UPDATE kernels SET compile_log = printf('%.*c', {HUGE}, 'a') WHERE entry = 'row_sum'",
        f"UPDATE tunes SET candidates = printf('%.*c', {HUGE}, 'a') WHERE rowid = 1",
    )
    _repaired(warm, good, bundle, kernel, tune)


def test_a_text_not_utf8_is_named_and_removed(made: tuple[Warm, Path], tmp_path: Path) -> None:
    warm, good = made
    kernel, tune = _keys(good)
    bundle = _copy(
        good,
        tmp_path,
        "UPDATE kernels SET arch = CAST(x'ff' AS TEXT) WHERE entry = 'row_sum'",
        "UPDATE tunes SET shape_key = CAST(x'61c3' AS TEXT) WHERE rowid = 1",
    )
    _repaired(warm, good, bundle, kernel, tune)


def test_a_key_not_hex_or_not_utf8_is_removed_by_its_rowid(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    kernels, tunes = _counts(good)
    bundle = _copy(
        good,
        tmp_path,
        "UPDATE kernels SET key = CAST(x'ff' AS TEXT) WHERE entry = 'row_sum'",
        "UPDATE kernels SET key = 'zz' WHERE entry = 'bias_relu'",
        "UPDATE tunes SET key = x'00' WHERE rowid = 1",
    )
    verified = warm("verify", bundle)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert "'zz' (key: not a sha256 in hex)" in verified.stdout, verified.stdout
    assert "(key: not UTF-8)" in verified.stdout and "'00' (key: not a tune key)" in verified.stdout
    cleaned = warm("clean", bundle)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "removed 2 kernel(s) and 1 tune(s)" in cleaned.stdout, cleaned.stdout
    assert _counts(bundle) == (kernels - 2, tunes - 1)
    assert warm("verify", bundle).returncode == 0


def test_a_key_not_hex_alone_is_removed_by_its_rowid(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A key that is not hex in rows every listing reads: verify named them, but clean kept
    them (it removes by key)."""
    warm, good = made
    kernels, tunes = _counts(good)
    bundle = _copy(
        good,
        tmp_path,
        "UPDATE kernels SET key = 'zz' WHERE entry = 'bias_relu'",
        "UPDATE tunes SET key = x'0011' WHERE rowid = 2",
    )
    cleaned = warm("clean", bundle)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "removed 1 kernel(s) and 1 tune(s)" in cleaned.stdout, cleaned.stdout
    assert "'zz'" in cleaned.stdout and "'0011'" in cleaned.stdout, cleaned.stdout
    assert _counts(bundle) == (kernels - 1, tunes - 1)
    assert warm("verify", bundle).returncode == 0


def _format1_bundle(path: Path, good: Path) -> None:
    """A format-1 file (as warm 1 wrote it) holding `good`'s kernels and blobs too."""
    from test_compact_tunes import _format1
    from test_format3 import _tune

    _format1(path, [_tune(0), _tune(1)])
    conn = sqlite3.connect(path)
    conn.execute("ATTACH ? AS good", (str(good),))
    conn.execute("INSERT INTO kernels SELECT * FROM good.kernels")
    conn.execute("INSERT INTO blobs SELECT * FROM good.blobs")
    conn.commit()
    conn.close()


def test_a_format1_bundle_is_cleaned_or_says_it_was_migrated(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Clean migrated a format-1 bundle holding an oversized value to format 3, then failed
    (exit 2) without a word of the migration. It now removes the row; and a clean that
    fails once it migrated (an inconsistent index) says the file was migrated."""
    from test_integrity35 import _behind_index

    warm, good = made
    bundle = tmp_path / "one.warm"
    _format1_bundle(bundle, good)
    conn = sqlite3.connect(bundle)
    conn.execute(f"UPDATE tunes SET candidates = printf('%.*c', {HUGE}, 'a') WHERE rowid = 1")
    conn.commit()
    conn.close()
    cleaned = warm("clean", bundle)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "removed 0 kernel(s) and 1 tune(s)" in cleaned.stdout, cleaned.stdout
    assert "migrated from format 1 to 3" in " ".join(cleaned.stdout.split())
    assert _query(bundle, "PRAGMA user_version")[0][0] == 3

    broken = tmp_path / "broken.warm"
    _format1_bundle(broken, good)
    _behind_index(
        broken,
        "sqlite_autoindex_kernels_1",
        ("key TEXT PRIMARY KEY", "key TEXT"),
        "INSERT INTO kernels SELECT * FROM kernels ORDER BY rowid LIMIT 1",
    )
    failed = warm("clean", broken)
    assert failed.returncode == 2 and len(failed.stderr.splitlines()) == 1, failed.stderr
    assert "inconsistent bundle" in failed.stderr, failed.stderr
    assert "migrated from format 1 to 3 first" in failed.stderr, failed.stderr
