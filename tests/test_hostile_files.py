"""A bundle path that is no bundle file, or a file crafted to attack a command other than
merge/diff/pull (those are test_hostile_inputs'): `warm stats/check/verify/run/clean` and a
production process given it. Each gives one clear line and a non-zero exit (a production
process, one `BundleError`), never a hang, a traceback or a changed file. Real files, the
real CLI in subprocesses."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)

from warmcli.bundle.signing import load_public_key

OPEN = """import sys, warmcli
try:
    warmcli.use_bundle(sys.argv[1])
except warmcli.BundleError as exc:
    print(exc)
    sys.exit(2)
"""


def one_line(proc: subprocess.CompletedProcess[str], named: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = proc.stderr or proc.stdout  # a production process prints its error itself
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text and named in lines[0], lines
    return lines[0]


def production(warm: Warm, path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OPEN, str(path)],
        capture_output=True,
        text=True,
        env=dict(warm.env, **env),
        timeout=60,
        cwd=ROOT,
    )


def test_a_fifo_is_refused_at_once_never_waited_on(made: tuple[Warm, Path], tmp_path: Path) -> None:
    warm, _ = made
    fifo = tmp_path / "fifo.warm"
    os.mkfifo(fifo)  # opening it to read would wait for a writer that never comes
    for command in (("stats", fifo), ("run", EXAMPLES / "matmul_host.py", "-b", fifo, "-q")):
        one_line(warm(*command, timeout=20), "not a regular file")
    one_line(production(warm, fifo), "not a regular file")
    assert fifo.exists() and not fifo.is_file()  # left as it was


def test_a_device_or_directory_is_refused_as_no_file(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, _ = made
    zero, folder = tmp_path / "zero.warm", tmp_path / "dir.warm"
    zero.symlink_to("/dev/zero")
    folder.mkdir()
    for path in (zero, folder):
        one_line(warm("stats", path, timeout=20), "not a regular file")
        one_line(production(warm, path), "not a regular file")


def hostile(good: Path, folder: Path, *statements: str) -> Path:
    """A copy of the bundle `good` in `folder`, changed by `statements`."""
    path = folder / "hostile.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return path


def test_a_time_past_any_calendar_is_shown_as_stored(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    times = (
        "UPDATE kernels SET last_used = 1e300",  # a float, but no date (OverflowError)
        "UPDATE manifest SET value = '1e400' WHERE key = 'created'",  # inf
        "UPDATE manifest SET value = '-1e18' WHERE key = 'updated'",  # year out of range
    )
    warm, good = made
    path = hostile(good, tmp_path, *times)
    before = path.read_bytes()
    proc = warm("stats", path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "1e+300" in proc.stdout and "-1e+18" in proc.stdout
    assert path.read_bytes() == before


def strict_json(text: str) -> object:
    """`text` parsed as JSON as the standard says it: no NaN, no Infinity."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_standard_json_whatever_numbers_a_bundle_holds(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    path = hostile(
        good,
        tmp_path,
        "UPDATE manifest SET value = '1e400' WHERE key = 'created'",  # inf as a float
        "UPDATE manifest SET value = 'nan' WHERE key = 'updated'",
    )
    proc = warm("stats", "--json", path)
    assert proc.returncode == 0, proc.stderr
    manifest = strict_json(proc.stdout)["manifest"]  # type: ignore[index]
    assert (manifest["created"], manifest["updated"]) == ("1e400", "nan")
    for data in ('{"name": NaN}', '{"name": Infinity}', '{"n": 1e999}', '{"n": [-Infinity]}'):
        path = hostile(good, tmp_path, f"UPDATE fingerprints SET data = '{data}'")
        proc = warm("stats", "--json", path)
        assert "Traceback" not in proc.stderr, proc.stderr
        if proc.returncode == 0:
            strict_json(proc.stdout)
        else:
            assert proc.returncode == 2 and "corrupt fingerprint entry" in proc.stderr, data


def interrupted_copy(good: Path, dest: Path) -> None:
    """At `dest`, a copy of the bundle `good` taken inside a write transaction, with its
    hot journal beside it: what a crash leaves (opening it rolls the write back)."""
    shutil.copyfile(good, dest)
    conn = sqlite3.connect(dest, isolation_level=None)
    conn.execute("PRAGMA cache_size = 1")  # the change spills to the file: a hot journal
    conn.execute("BEGIN")
    conn.execute("UPDATE blobs SET data = zeroblob(length(data) + 1)")
    copy = dest.with_name("copy")
    for suffix in ("", "-journal"):
        shutil.copyfile(f"{dest}{suffix}", f"{copy}{suffix}")
    conn.execute("ROLLBACK")
    conn.close()
    for suffix in ("", "-journal"):
        os.replace(f"{copy}{suffix}", f"{dest}{suffix}")


def test_a_bundle_reached_by_a_symlink_has_its_interrupted_write_rolled_back(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    (tmp_path / "elsewhere").mkdir()
    target, link = tmp_path / "elsewhere" / "real.warm", tmp_path / "link.warm"
    interrupted_copy(good, target)
    link.symlink_to(target)  # SQLite keeps the journal beside the file the link names
    assert Path(f"{target}-journal").stat().st_size > 0
    proc = warm("verify", link)
    assert proc.returncode == 0 and "sound" in proc.stdout, proc.stdout + proc.stderr
    assert not Path(f"{target}-journal").exists() and link.is_symlink()
    assert target.read_bytes() == good.read_bytes()  # the write rolled back
    interrupted_copy(good, target)
    assert production(warm, link).returncode == 0, production(warm, link).stdout


MANY = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})"


def test_a_manifest_of_many_rows_is_refused_never_read_whole(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made  # warm writes 5 manifest rows; 1.5M (a 50 MB file) cost 400 MB to read
    path = hostile(good, tmp_path, MANY.format(5000) + "INSERT INTO manifest SELECT i, 'v' FROM n")
    for command in (("stats",), ("stats", "--json"), ("verify",)):
        line = one_line(warm(*command, path), "manifest")
        assert "more than 64 rows" in line, line
    path = hostile(
        good,
        tmp_path,
        "UPDATE manifest SET value = printf('%.*c', 5000, 'v') WHERE key = 'warm_version'",
    )
    assert "value: 5000 characters" in one_line(warm("stats", path), "manifest")
    path = hostile(good, tmp_path, MANY.format(59) + "INSERT INTO manifest SELECT i, 'v' FROM n")
    assert warm("stats", path).returncode == 0  # a few extra rows are no harm
    path = hostile(good, tmp_path, "UPDATE manifest SET value = '1e400' WHERE key = 'created'")
    proc = warm("verify", path)  # inf: no time
    assert proc.returncode == 1 and "manifest 'created' is not a time" in proc.stdout, proc.stdout


def test_fingerprints_of_many_rows_or_huge_data_are_refused_never_read_whole(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made  # 1.5M fingerprint rows (a 60 MB file): 'warm stats' ran over 3 minutes
    rows = MANY.format(5000) + "INSERT INTO fingerprints SELECT 'f' || i, 'device', '{}' FROM n"
    path = hostile(good, tmp_path, rows)
    for command in (("stats",), ("stats", "--json")):
        line = one_line(warm(*command, path, timeout=60), "fingerprint")
        assert "more than 1024 rows" in line, line
    huge = "json_set(data, '$.x', printf('%.*c', 20000, 'x'))"
    path = hostile(good, tmp_path, f"UPDATE fingerprints SET data = {huge}")
    assert "data: 20" in one_line(warm("stats", path), "fingerprint")


def test_signatures_of_many_rows_are_refused_never_read_whole(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made  # 500k signature rows (an 81 MB file): 'warm verify' ran minutes, 600 MB
    rows = MANY.format(5000) + (
        "INSERT INTO signatures SELECT printf('%016x', i), randomblob(32), randomblob(64), "
        "randomblob(32), 1.0 FROM n"
    )
    path = hostile(good, tmp_path, rows)
    assert "more than 64 rows" in one_line(warm("verify", path, timeout=60), "signatures")
    key = tmp_path / "key"
    assert warm("keygen", key).returncode == 0
    public = load_public_key(f"{key}.pub")  # each row now says the trusted key signed it
    conn = sqlite3.connect(path)
    conn.execute("UPDATE signatures SET public_key = ?", (public,))
    conn.commit()
    conn.close()
    refused = production(warm, path, WARM_TRUSTED_KEYS=f"{key}.pub")
    assert "more than 64 rows" in one_line(refused, "signatures")


def test_check_names_a_host_binary_built_for_another_machine(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Its sha256 is right (the bundle says so), but it is an ELF for another machine: the
    loader refuses it, so a production process compiles it; `warm check` must say so."""
    warm, good = made
    path = tmp_path / "elsewhere.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    for sha, data in conn.execute("SELECT sha256, data FROM blobs").fetchall():
        other = bytearray(data)
        other[18:20] = (21 if other[18:20] != b"\x15\x00" else 62).to_bytes(2, "little")
        new = hashlib.sha256(other).hexdigest()
        conn.execute("UPDATE blobs SET sha256 = ?, data = ? WHERE sha256 = ?", (new, other, sha))
        conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
    conn.commit()
    conn.close()
    proc = warm("check", "--json", path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reasons = {u["detail"] for u in json.loads(proc.stdout)["unservable"]}
    assert reasons and all("another machine" in r for r in reasons), reasons


def test_a_key_file_that_is_a_fifo_is_refused_at_once(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo)
    path = tmp_path / "b.warm"
    shutil.copyfile(good, path)
    one_line(warm("sign", path, "--key", fifo, timeout=20), "not a regular file")
    trusting = production(warm, path, WARM_TRUSTED_KEYS=str(fifo))
    one_line(trusting, "not a regular file")
    assert path.read_bytes() == good.read_bytes()


def test_a_huge_label_is_cut_in_a_table_and_kept_whole_in_json(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    # 6 labels of 4M characters: 'warm stats' wrote 9 MB in 8 s. Here 400,000 each: uncut,
    # 2.4 MB of table, 24 times the bound below (that cut undone, the test fails).
    warm, good = made
    path = hostile(good, tmp_path, "UPDATE kernels SET label = printf('%.*c', 400000, 'l')")
    proc = warm("stats", path)
    assert proc.returncode == 0 and len(proc.stdout) < 100_000, len(proc.stdout)
    assert "(400,000 characters)" in proc.stdout
    doc = json.loads(warm("stats", "--json", path).stdout)
    assert {len(k["label"]) for k in doc["kernels"]} == {400_000}


def test_a_fifo_as_the_remembered_versions_file_is_never_waited_on(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, _ = made
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.mkfifo(home / "toolchains.json", 0o600)
    proc = warm.with_env(WARM_HOME=str(home))("devices", timeout=30)
    assert proc.returncode == 0 and "host" in proc.stdout, proc.stdout + proc.stderr


def test_a_fifo_in_the_host_library_cache_is_never_waited_on(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    home = tmp_path / "home"
    (home / "host-libraries").mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    conn = sqlite3.connect(good)
    shas = [sha for (sha,) in conn.execute("SELECT sha256 FROM blobs")]
    conn.close()
    for sha in shas:  # where each binary is written before it is loaded
        os.mkfifo(home / "host-libraries" / f"{sha}.so", 0o600)
    env = dict(warm.env, WARM_HOME=str(home), WARM_BUNDLE=str(good))
    code = SERVE_MATMUL.format(examples=str(EXAMPLES)) + "print(len(r.kernels))\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["0"], proc.stdout + proc.stderr
