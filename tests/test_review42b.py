"""Review of stop 42's merges (clean42's `warm clean --older-than`, hostile42's key= tags,
held values cut in miss explanations, merge's later build, diff's corrupt rows): what a
hostile bundle's time columns do to a clean's age, each against the real CLI and a real
bundle (the host example's, `host_bundle`)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

DAY = 86400


def _sql(bundle: Path, *statements: str) -> list[tuple[object, ...]]:
    """Raw SQLite (the test's, not warm's): each statement run, the last one's rows."""
    rows: list[tuple[object, ...]] = []
    with sqlite3.connect(bundle) as conn:
        for statement in statements:
            rows = conn.execute(statement).fetchall()
    conn.close()
    return rows


def test_a_tune_whose_written_time_is_no_number_ages_as_one_written_long_ago(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """A tune whose pick's kernel the bundle does not hold lives by its `updated` time; one
    whose time was text, a blob or NULL (a bundle from elsewhere: times are not signed) was
    neither old nor in the future for `--older-than`, kept by every age, `0s` too, for ever.
    No time of writing can be read there: it is taken as long ago, as a time of -inf is."""
    bundle = host_bundle(tmp_path / "b.warm")  # type: ignore[operator]
    tunes = [str(r[0]) for r in _sql(bundle, "SELECT lower(hex(key)) FROM tunes ORDER BY key")]
    assert len(tunes) >= 3, tunes
    now = time.time()
    _sql(
        bundle,
        "PRAGMA foreign_keys = OFF",
        "DELETE FROM kernels",  # no tune's pick held: each lives by when it was written
        f"UPDATE tunes SET updated = {now - 40 * DAY}",
        f"UPDATE tunes SET updated = 'soon' WHERE lower(hex(key)) = '{tunes[0]}'",
        f"UPDATE tunes SET updated = x'00ff' WHERE lower(hex(key)) = '{tunes[1]}'",
        f"UPDATE tunes SET updated = {now + 50 * 365 * DAY} WHERE lower(hex(key)) = '{tunes[2]}'",
    )
    before = hashlib.sha256(bundle.read_bytes()).hexdigest()
    dry = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    gone = {r["key"] for r in dry["removed"] if r["kind"] == "tune"}
    assert gone == set(tunes) - {tunes[2]}, (dry["removed"], tunes)  # the future one: kept
    assert dry["removed_by_reason"] == {"not used in the last 30d": len(tunes) - 1}, dry
    assert dry["used_in_future_count"] == {"kernels": 0, "tunes": 1}, dry
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before  # a dry run: untouched
    report = warm.json("clean", bundle, "--older-than", "30d")
    assert {r["key"] for r in report["removed"] if r["kind"] == "tune"} == gone, report
    left = _sql(bundle, "SELECT lower(hex(key)), typeof(updated), updated FROM tunes")
    assert [(k, t) for k, t, _ in left] == [(tunes[2], "real")], left
    assert now <= float(left[0][2]) <= time.time()  # stamped with the clean's time


def test_an_age_of_megabytes_is_refused_in_one_short_line(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """`--older-than` repeated a refused age whole (100,000 digits: 100 KB on the terminal,
    and in `--json`'s error), where `--max-size` cuts its own to 40 characters: cut alike."""
    bundle = host_bundle(tmp_path / "b.warm")  # type: ignore[operator]
    before = bundle.read_bytes()
    for age in ("9" * 100_000 + "d", "1" * 100_000, "x" * 100_000):
        proc = warm("clean", bundle, "--older-than", age, "--dry-run")
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[:300]
        assert lines[0].startswith("warm: error: --older-than: '") and len(lines[0]) < 300, lines
        doc = warm("clean", bundle, "--older-than", age, "--json")
        assert doc.returncode == 2 and len(doc.stdout) < 400, doc.stdout[:300]
    assert bundle.read_bytes() == before


def test_max_size_alone_counts_the_tunes_it_stamps(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """`--max-size` alone stamps a time in the future with the clean's (stop 42's follow-up),
    the tunes' too where a kernel's was ahead, yet said `0 tune(s)` used in the future (its
    `used_in_future_count` too), and stamped no tune where no kernel was ahead: what it
    stamps, of either kind, is what it says."""
    bundle = host_bundle(tmp_path / "b.warm")  # type: ignore[operator]
    ahead = time.time() + 50 * 365 * DAY
    _sql(bundle, f"UPDATE tunes SET updated = {ahead}")
    tunes = len(_sql(bundle, "SELECT key FROM tunes"))
    dry = warm.json("clean", bundle, "--max-size", str(2**40), "--dry-run")
    assert dry["used_in_future_count"] == {"kernels": 0, "tunes": tunes}, dry
    start = time.time()
    report = warm.json("clean", bundle, "--max-size", str(2**40))
    assert report["used_in_future_count"] == {"kernels": 0, "tunes": tunes}, report
    times = [float(str(t)) for (t,) in _sql(bundle, "SELECT updated FROM tunes")]
    assert all(start <= t <= time.time() for t in times), times  # stamped: ages from now
    _sql(bundle, f"UPDATE tunes SET updated = {ahead}", f"UPDATE kernels SET last_used = {ahead}")
    kernels = len(_sql(bundle, "SELECT key FROM kernels"))
    text = warm("clean", bundle, "--max-size", str(2**40))
    said = " ".join(text.stdout.split())
    assert f"kept {kernels} kernel(s) and {tunes} tune(s) used in the future" in said, said


DEVICES = """\
import gc, sys
sys.path.insert(0, sys.argv[1])
import warmcli
from matmul_host import workload
from warmcli.records import MissExplanation
workload(warmcli.runtime("host"))
kept = {id(o): o for o in gc.get_objects() if isinstance(o, MissExplanation)}.values()
print(max(len(m.detail) for m in kept))
"""


def _forge_devices(bundle: Path, count: int) -> str:
    """Raw SQLite (the test's): the first tune's shape held on `count` other devices, their
    names distinct and 900 characters each, each row keyed as warm keys it (a bundle from a
    fleet of oddly named hosts), and on no device here: that shape's miss is `device`'s."""
    from warmcli.records import tune_key

    with sqlite3.connect(bundle) as conn:
        names = [d[0] for d in conn.execute("SELECT * FROM tunes").description]
        row = dict(zip(names, conn.execute("SELECT * FROM tunes").fetchone(), strict=True))
        conn.execute("DELETE FROM tunes WHERE shape_key = ?", (row["shape_key"],))
        backend, _, arch, system = str(row["device"]).split("|")
        for i in range(count):
            device = f"{backend}|{i:04d}{'N' * 896}|{arch}|{system}"
            checksum = row["checksum"]
            key = tune_key(row["operation"], row["shape_key"], device, bytes(checksum).hex())
            values = dict(row, device=device, key=bytes.fromhex(key))
            conn.execute(
                f"INSERT INTO tunes VALUES ({', '.join('?' * len(names))})",
                [values[n] for n in names],
            )
    conn.close()
    return str(row["shape_key"])


def test_a_device_miss_names_three_of_the_devices_held_not_every_one(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """A tune's `device` miss said every distinct value the nearest held entries have in the
    field that differs, however many: 300 hosts' names of 900 characters each (each cut at
    1,000, stop 42) made one miss's explanation 270 KB, kept for the process's life (as many
    again each miss), and its `WARM_EXPLAIN` line, cut at 4,096 characters, lost what this
    process wants. Three are named now, and how many more, as every other component says."""
    bundle = host_bundle(tmp_path / "b.warm")  # type: ignore[operator]
    _forge_devices(bundle, 300)
    examples = Path(__file__).resolve().parent.parent / "examples"
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_EXPLAIN="1", WARM_REPORT="0")
    done = subprocess.run(
        [sys.executable, "-c", DEVICES, str(examples)],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 5_000, done.stdout
    lines = [line for line in done.stderr.splitlines() if ": device: name: bundle has" in line]
    assert len(lines) == 1, done.stderr[-2000:]
    assert "(+297 more), this process wants " in lines[0], lines[0][-300:]


def test_a_checksum_miss_names_three_of_the_candidate_sets_held_fakes() -> None:
    """Pure logic, fake components: a tune's candidate names differing from every held
    entry's named each distinct set held, however many; three now, and how many more."""
    from warmcli.runtime.explain import describe

    held = [{"checksum": f"{i:064x}", "candidates": f"c{i}," + "x" * 900} for i in range(300)]
    wanted = {"checksum": "f" * 64, "candidates": "mine"}
    said = describe("checksum", held, wanted)
    assert len(said) < 4_000 and said.endswith("(+297 more), this process wants mine"), said[-200:]


def _batch_blob(bundle: Path) -> str:
    """The blob the most kernels of `bundle` share (a batch's)."""
    rows = _sql(bundle, "SELECT sha256 FROM kernels GROUP BY 1 ORDER BY count(*) DESC LIMIT 1")
    return str(rows[0][0])


def test_merge_says_the_later_build_it_took_not_one_whose_blob_is_missing_too(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """Three inputs holding a batch's kernel keys: the first's blob missing, the second's
    build of them (another binary) missing too, the third's good. The merge took the
    third's (OUT sound) but said, of the first's, `took its build of` the second, whose
    blob no input holds: `mended` names the build it takes, one whose blob an input holds."""
    good = host_bundle(tmp_path / "good.warm")  # type: ignore[operator]
    sha = _batch_blob(good)
    bad, gone, other = tmp_path / "bad.warm", tmp_path / "gone.warm", tmp_path / "other.warm"
    for path in (bad, gone, other):
        path.write_bytes(good.read_bytes())
    drop = f"DELETE FROM blobs WHERE sha256 = '{sha}'"
    _sql(bad, "PRAGMA foreign_keys = OFF", drop)
    _sql(gone, "PRAGMA foreign_keys = OFF", f"UPDATE kernels SET sha256 = '{'e' * 64}' "
         f"WHERE sha256 = '{sha}'", drop)  # fmt: skip
    (data,) = _sql(other, f"SELECT data FROM blobs WHERE sha256 = '{sha}'")[0]
    rebuilt = bytes(data) + b"\0"  # another build: the same code, a byte of padding more
    new = hashlib.sha256(rebuilt).hexdigest()
    with sqlite3.connect(other) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (new, len(rebuilt), rebuilt))
        conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
        conn.execute("DELETE FROM blobs WHERE sha256 = ?", (sha,))
    conn.close()
    out = tmp_path / "out.warm"
    doc = warm.json("merge", bad, gone, other, "-o", out)
    mended = [m for m in doc["mended"] if "took its build of" in m]
    assert mended and all(m.endswith(f"took its build of {other}") for m in mended), mended
    checked = warm("verify", out)
    assert checked.returncode == 0 and "sound" in checked.stdout, checked.stdout
    assert {s for (s,) in _sql(out, "SELECT sha256 FROM kernels")} >= {new}


def test_the_reason_names_the_age_given_not_one_rounded_to_six_digits(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """A removal's reason named the age as `%g` writes it, six digits: `1.000000001s` said
    `not used in the last 1s`, `2.123456789h` `7644.44s`, `123456789.5s` `1.23457e+08s`,
    another age than the one applied. Every digit given is said now."""
    bundle = host_bundle(tmp_path / "b.warm")  # type: ignore[operator]
    _sql(bundle, "UPDATE kernels SET last_used = 1")  # long ago: each age removes them
    for age, said in (
        ("1.000000001s", "1.000000001s"),
        ("2.123456789h", "7644.4444404s"),
        ("123456789.5s", "123456789.5s"),
        ("0.000000001s", "0.000000001s"),
        ("1.5w", "252h"),
        ("0s", "0s"),
    ):
        dry = warm.json("clean", bundle, "--older-than", age, "--dry-run")
        reasons = dry["removed_by_reason"]
        assert reasons.get(f"not used in the last {said}", 0) >= 1, (age, reasons)


def test_max_size_alone_reads_the_keys_of_no_tune_but_those_ahead(
    tmp_path: Path, host_bundle: object
) -> None:
    """`--max-size` alone reads the tunes dated ahead (to count and stamp them), never the
    keys of every tune written before now, as an age's cutoff at now would: memory holds no
    whole table (a real bundle, read as a clean reads it)."""
    from warmcli.bundle.store import Bundle
    from warmcli.ops.clean_age import old_and_future_tunes

    bundle = host_bundle(tmp_path / "b.warm")  # type: ignore[operator]
    with Bundle.open(bundle) as opened:
        now = time.time()
        assert old_and_future_tunes(opened, None, now) == (set(), set())
        assert len(old_and_future_tunes(opened, now, now)[0]) == 3  # an age of 0s: all


def _copied_to(bundle: Path, count: int) -> None:
    """`bundle`'s first kernel row copied until it holds `count` kernels, each copy another
    kernel (a content hash of its own in its components) under that kernel's key and symbol,
    as warm writes them (`key_of`, `warm_<key[:16]>_<entry>`), sharing the row's blob: as
    many kernel keys as a workload of `count` kernels stores, without its `warm run` (1,010
    kernels: 6 s of compiles). A copy's blob is the first's, which exports no symbol of the
    copy's (`warm verify` says so): a merge reads rows and blobs, never a binary's symbols."""
    from warmcli.kernel_parts import key_of

    with sqlite3.connect(bundle) as conn:
        held = int(conn.execute("SELECT count(*) FROM kernels").fetchone()[0])
        row = conn.execute("SELECT * FROM kernels LIMIT 1").fetchone()
        names = [d[0] for d in conn.execute("SELECT * FROM kernels LIMIT 0").description]
        first = dict(zip(names, row, strict=True))
        parts = json.loads(first["components"])
        copies = []
        for i in range(count - held):
            parts["kernel"] = hashlib.sha256(f"copy {i}".encode()).hexdigest()
            key = key_of(parts["kernel"], first["arch"], parts.get("headers", ""),
                         first["toolchain"])  # fmt: skip
            symbol = f"warm_{key[:16]}_{first['entry']}"
            copy = dict(first, key=key, symbol=symbol, components=json.dumps(parts))
            copies.append(tuple(copy[n] for n in names))
        marks = ", ".join("?" * len(names))
        conn.executemany(f"INSERT INTO kernels VALUES ({marks})", copies)
    conn.close()


def test_merge_says_the_first_thousand_later_builds_taken_and_counts_the_rest(
    warm: Warm, tmp_path: Path, host_bundle: object
) -> None:
    """A first input holding none of its blobs, merged with another build of every one of
    its kernels: one `mended` line per kernel key, however many (100,000 kernels: 100,000
    lines, 10 MB on the terminal and in memory), where a later input's other binary is said
    for the first 1,000 and the rest counted: said so alike now."""
    good = host_bundle(tmp_path / "good.warm")  # type: ignore[operator]
    _copied_to(good, 1010)
    bad, other = tmp_path / "bad.warm", tmp_path / "other.warm"
    bad.write_bytes(good.read_bytes())
    other.write_bytes(good.read_bytes())
    _sql(bad, "PRAGMA foreign_keys = OFF", "DELETE FROM blobs")
    with sqlite3.connect(other) as conn:  # every binary rebuilt: a byte of padding more
        conn.execute("PRAGMA foreign_keys = OFF")
        for sha, data in conn.execute("SELECT sha256, data FROM blobs").fetchall():
            rebuilt = bytes(data) + b"\0"
            new = hashlib.sha256(rebuilt).hexdigest()
            conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (new, len(rebuilt), rebuilt))
            conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
            conn.execute("DELETE FROM blobs WHERE sha256 = ?", (sha,))
    conn.close()
    doc = warm.json("merge", bad, other, "-o", tmp_path / "out.warm")
    taken = [m for m in doc["mended"] if "took its build of" in m]
    assert len(taken) == 1000 and doc["kernels"] == 1010, (len(taken), doc["kernels"])
    assert doc["mended"][-1].startswith("and 10 more kernel key(s) whose blob no input holds")
