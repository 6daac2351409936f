"""Files beside a bundle: a rollback journal handed over with it, or left by a crash.

SQLite rolls back a hot `-journal` it finds beside a database on the first read, before
warm has checked anything; a journal is the attacker's file as much as the bundle is. One
that names a super-journal makes SQLite delete that file once the rollback is done (any
file the user may delete: their own bundle), and one that is a FIFO makes SQLite wait for
a writer for ever, deaf to SIGTERM. warm never writes either (it attaches no database, so
it never writes a super-journal), so both are refused, one line, before SQLite opens the
bundle, and nothing elsewhere is touched. A journal belongs to the file it was written
for: one a crashed write left is never rolled into a new file that replaces that file
(`warm run` after the bundle was deleted, `merge --force`, `pull`). Every case runs the
real CLI or a real production subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_hostile_schema import matmul_bundle
from test_production import MATMUL, serve
from test_remote import Store, http_store  # noqa: F401  (a fixture)


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
PAGE_BYTES = 16384


def journal_naming(bundle: Path, other: Path) -> Path:
    """A hot journal beside `bundle` that replays no page and names `other` as its
    super-journal, as SQLite writes one for a transaction over attached databases."""
    pages = bundle.stat().st_size // PAGE_BYTES
    header = JOURNAL_MAGIC + struct.pack(">IIIII", 0, 0, pages, 512, PAGE_BYTES)
    name = os.fsencode(other)
    record = struct.pack(">I", 0) + name + struct.pack(">II", len(name), sum(name))
    journal = Path(f"{bundle}-journal")
    journal.write_bytes(header.ljust(512, b"\0") + record + JOURNAL_MAGIC)
    return journal


CRASHED_WRITE = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # the pages spill: the journal is synced, hot
conn.execute("BEGIN")
conn.execute("UPDATE kernels SET compile_log = hex(randomblob(20000))")
conn.execute("DELETE FROM tunes")
os._exit(0)
"""


def crashed_write(bundle: Path) -> Path:
    """`bundle` as a process killed in mid-write leaves it: half written, its journal hot."""
    subprocess.run([sys.executable, "-c", CRASHED_WRITE, bundle], check=True)
    journal = Path(f"{bundle}-journal")
    assert journal.read_bytes()[:8] == JOURNAL_MAGIC
    return journal


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(proc: subprocess.CompletedProcess[str], words: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


@pytest.fixture
def handed(warm: Warm, tmp_path: Path) -> tuple[Path, Path]:
    """(the attacker's bundle, the user's own bundle in another folder)."""
    mine = tmp_path / "mine" / "app.warm"
    mine.parent.mkdir()
    matmul_bundle(warm, mine)
    theirs = tmp_path / "download" / "evil.warm"
    theirs.parent.mkdir()
    shutil.copyfile(mine, theirs)
    return theirs, mine


def test_a_journal_naming_another_file_never_gets_it_deleted(
    warm: Warm, handed: tuple[Path, Path], tmp_path: Path
) -> None:
    evil, mine = handed
    kept = digest(mine)
    journal = journal_naming(evil, mine)
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    commands = [
        ("stats", evil),
        ("stats", evil, "--json"),
        ("verify", evil),
        ("check", evil),
        ("diff", evil, mine),
        ("clean", evil),
        ("sign", evil, "--key", key),
        ("merge", mine, evil, "-o", mine),
        ("run", MATMUL, "--bundle", evil),
    ]
    for args in commands:
        proc = warm(*args)
        assert mine.exists(), f"warm {args[0]} let SQLite delete the user's bundle"
        assert digest(mine) == kept
        if "--json" in args:
            assert proc.returncode == 2 and "journal" in proc.stdout, proc.stdout
        else:
            assert "names another file" in one_line(proc, str(journal.name))
        assert journal.exists(), "the attacker's journal is left for the user to see"
    for trusted in ("", f"{key}.pub"):
        prod = serve(warm, evil, WARM_TRUSTED_KEYS=trusted)
        _, err = prod.communicate(timeout=120)
        assert prod.returncode != 0 and "names another file" in err
        assert mine.exists() and digest(mine) == kept


def test_a_journal_that_is_a_fifo_is_refused_never_waited_on(
    warm: Warm, handed: tuple[Path, Path]
) -> None:
    evil, _ = handed
    os.mkfifo(f"{evil}-journal")
    for args in [("stats", evil), ("verify", evil), ("run", MATMUL, "--bundle", evil)]:
        one_line(warm(*args, timeout=60), "not a regular file")  # SIGKILLed if it waits
    prod = serve(warm, evil)
    _, err = prod.communicate(timeout=60)
    assert prod.returncode != 0 and "not a regular file" in err


def test_a_journal_left_by_warms_own_interrupted_write_is_still_rolled_back(
    warm: Warm, handed: tuple[Path, Path]
) -> None:
    """The check refuses only what warm never writes: a real hot journal (no super-journal
    named) is rolled back as before, here one that puts the bundle's first page back."""
    _, mine = handed
    sound = mine.read_bytes()
    header = JOURNAL_MAGIC + struct.pack(">IIIII", 1, 7, len(sound) // PAGE_BYTES, 512, PAGE_BYTES)
    page = sound[:PAGE_BYTES]
    checksum = (7 + sum(page[i] for i in range(PAGE_BYTES - 200, 0, -200))) & 0xFFFFFFFF
    record = struct.pack(">I", 1) + page + struct.pack(">I", checksum)
    Path(f"{mine}-journal").write_bytes(header.ljust(512, b"\0") + record)
    torn = bytearray(sound)
    torn[100:PAGE_BYTES] = bytes(PAGE_BYTES - 100)  # the schema page, half written
    mine.write_bytes(bytes(torn))
    proc = warm("stats", mine)
    assert proc.returncode == 0, proc.stderr
    assert mine.read_bytes() == sound and not Path(f"{mine}-journal").exists()


def sound(warm: Warm, bundle: Path) -> None:
    proc = warm("verify", bundle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not Path(f"{bundle}-journal").exists()


def test_a_journal_left_by_a_deleted_bundle_is_not_rolled_into_the_new_one(
    warm: Warm, handed: tuple[Path, Path]
) -> None:
    _, mine = handed
    crashed_write(mine)
    mine.unlink()  # the broken bundle is deleted, its journal is not
    proc = warm("run", MATMUL, "--bundle", mine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sound(warm, mine)


def test_merge_force_over_a_crashed_bundle_leaves_the_merged_one_sound(
    warm: Warm, handed: tuple[Path, Path], tmp_path: Path
) -> None:
    source, out = handed
    crashed_write(out)
    proc = warm("merge", source, "-o", out, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sound(warm, out)
    assert sqlite3.connect(out).execute("SELECT count(*) FROM tunes").fetchone() == (3,)


def test_pull_over_a_crashed_bundle_leaves_the_pulled_one_sound(
    warm: Warm,
    handed: tuple[Path, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    source, mine = handed
    conn = sqlite3.connect(source, isolation_level=None)
    conn.execute("DELETE FROM tunes WHERE rowid = (SELECT min(rowid) FROM tunes)")
    conn.execute("VACUUM")  # another file than the one the journal was written for
    conn.close()
    store, base, _ = http_store
    store.files["/app.warm"] = source.read_bytes()
    crashed_write(mine)
    proc = warm("pull", f"{base}/app.warm", mine, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sound(warm, mine)
    assert mine.read_bytes() == source.read_bytes()


def test_a_journal_that_cannot_be_removed_replaces_nothing(
    warm: Warm, handed: tuple[Path, Path]
) -> None:
    source, out = handed
    Path(f"{out}-journal").mkdir()
    kept = digest(out)
    proc = warm("merge", source, "-o", out, "--force")
    assert "cannot remove app.warm-journal" in one_line(proc, "nothing was replaced")
    assert digest(out) == kept


NOT_AS_WARM_WRITES = ("5", '[["TILE", "8", "9"]]', "nope", "[" * 100_000, '[1, {"a": 2}]', "{}")


@pytest.mark.parametrize("component", ["defines", "options"])
def test_a_miss_explained_against_components_warm_never_writes_is_still_a_miss(
    warm: Warm, tmp_path: Path, component: str
) -> None:
    """The nearest entries' defines or options, shown in a miss's explanation, are JSON
    text in the bundle: text that is not what warm writes there is shown as it is, and
    the process (production, `warm verify --workload`) goes on, the kernel compiled."""
    bundle = matmul_bundle(warm, tmp_path / "b.warm")
    conn = sqlite3.connect(bundle)
    # The miss: a tune's pick (which tile this machine measured fastest: not always 64).
    (pick,) = conn.execute("SELECT pick FROM tunes WHERE operation = 'matmul'").fetchone()
    missed = f"matmul[TILE={pick[4:]}]"
    conn.execute("DELETE FROM kernels WHERE label = ?", (missed,))
    rows = conn.execute("SELECT rowid, components FROM kernels WHERE entry = 'matmul'")
    for (rowid, text), value in zip(rows.fetchall(), NOT_AS_WARM_WRITES, strict=False):
        components = json.loads(text)
        components[component] = value
        conn.execute(
            "UPDATE kernels SET components = ? WHERE rowid = ?", (json.dumps(components), rowid)
        )
    conn.commit()
    conn.close()
    prod = serve(warm, bundle, WARM_EXPLAIN="1")
    out, err = prod.communicate(timeout=120)
    assert prod.returncode == 0, err
    assert out.split() == ["1", "0"]  # one kernel compiled, every tune served
    assert f"{missed}: {component}: bundle has " in err and "Traceback" not in err
    assert "[" * 201 not in err  # text warm never writes is cut
    proc = warm("verify", bundle, "--workload", MATMUL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"miss: kernel {missed}: {component}: bundle has " in proc.stdout


def test_stats_and_diff_show_components_warm_never_writes_without_a_traceback(
    warm: Warm, tmp_path: Path
) -> None:
    bundle = matmul_bundle(warm, tmp_path / "b.warm")
    conn = sqlite3.connect(bundle)
    rows = conn.execute("SELECT rowid, components FROM kernels WHERE entry = 'matmul'")
    for (rowid, text), value in zip(rows.fetchall(), NOT_AS_WARM_WRITES, strict=False):
        components = dict(json.loads(text), defines=value, options=value)
        conn.execute(
            "UPDATE kernels SET components = ? WHERE rowid = ?", (json.dumps(components), rowid)
        )
    conn.commit()
    conn.close()
    for args in [("stats", bundle), ("diff", bundle, bundle), ("check", bundle)]:
        proc = warm(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        doc = json.loads(warm(*args, "--json").stdout)
        if args[0] == "stats":  # read as no options and no defines, as before
            shown = [k for k in doc["kernels"] if k["entry"] == "matmul"]
            assert {(str(k["options"]), str(k["defines"])) for k in shown[:3]} == {("[]", "{}")}


@pytest.mark.parametrize("kernel_id", [-1, 2**32, 2**63 - 1])
def test_a_kernel_id_a_tune_cannot_name_is_refused_by_a_run_onto_the_bundle(
    warm: Warm, tmp_path: Path, kernel_id: int
) -> None:
    """A tune names its candidates' kernels by their `tune_kernels` id, packed in 32 bits:
    an id outside them (or the id SQLite picks after one) is refused in one line, the
    write rolled back."""
    bundle = matmul_bundle(warm, tmp_path / "b.warm")
    conn = sqlite3.connect(bundle)
    conn.execute(
        "UPDATE tune_kernels SET id = ? WHERE rowid = (SELECT min(id) FROM tune_kernels)",
        (kernel_id,),
    )
    conn.execute("DELETE FROM tunes")  # measured again, and stored naming those kernels
    conn.commit()
    conn.close()
    before = digest(bundle)
    line = one_line(warm("run", MATMUL, "--bundle", bundle), "tune_kernels")
    assert str(kernel_id) in line
    assert digest(bundle) == before


def test_replacing_a_bundle_never_plays_a_journal_naming_another_file(
    warm: Warm,
    handed: tuple[Path, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`merge -o OUT --force` and `pull URL OUT --force` roll a crash journal beside OUT back
    into the old file before replacing it: never one that names a super-journal (SQLite
    would delete that file, the user's own bundle), which is removed instead."""
    source, mine = handed
    store, base, _ = http_store
    store.files["/app.warm"] = source.read_bytes()
    kept = digest(mine)
    for n, args in enumerate(
        [("merge", source, "-o", "{out}", "--force"), ("pull", f"{base}/app.warm", "{out}")]
    ):
        out = tmp_path / f"out{n}.warm"
        shutil.copyfile(source, out)
        journal_naming(out, mine)
        proc = warm(*[str(a).format(out=out) for a in args], *(["--force"] * (n == 1)))
        assert mine.exists() and digest(mine) == kept, f"warm {args[0]} deleted the user's bundle"
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not Path(f"{out}-journal").exists()
        sound(warm, out)
