"""Stop 37's hostile bundles: a real bundle (`warm run examples/matmul_host.py`, made once a
test process: conftest's `host_bundle`) mutated by an attacker who ships it, against every
command and a production process serving from it (WARM_BUNDLE). What broke is kept here,
with a compact sample of what held: each command exits 0 or says one line and exits
non-zero (no traceback, no signal, no hang), prints no escape byte, keeps its memory flat,
leaves the bundle (and a merge's target) as it was, and production computes the numbers a
cold start computes, or refuses in one line.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from test_fuzz34 import ROW_SUMS

ROOT = Path(__file__).resolve().parents[1]
_COLD: list[tuple[str, int]] = []  # what the example computes with no bundle, once per test process
MIB = 1 << 20
PAGE = 16384
BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
ESCAPES = ("\x1b", "\x9b", *map(chr, BIDI))  # none printed as it is

# The example workload served over WARM_BUNDLE: its row sums, one line (a refusal: one line).
SERVE = (
    f"""
import sys
sys.path.insert(0, {str(ROOT / "examples")!r})
import numpy as np
import warmcli
import matmul_host as m
try:
    rt = warmcli.runtime()
except warmcli.WarmError as exc:
    print("refused:", exc)
    raise SystemExit(0)
"""
    + ROW_SUMS
)


# Runs argv[1:] under a 1.5 GiB address-space limit (killed after 120 s: a hang is status -9)
# and says its exit status and its own peak memory (KiB) on a last stderr line: a child
# forked from pytest itself would report pytest's peak (Linux keeps the highest resident
# size a process had, across its exec).
MEASURE = """
import os, resource, signal, sys
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
    os.execv(sys.argv[1], sys.argv[1:])
signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))  # a hang: ended
signal.alarm(120)
_, status, usage = os.wait4(pid, 0)
os.write(2, b"\\nmeasured %d %d\\n" % (os.waitstatus_to_exitcode(status), usage.ru_maxrss))
"""


def cli(warm: Warm, *args: object) -> tuple[int, str, str, int]:
    return peak_of([sys.executable, "-m", "warmcli", *map(str, args)], warm.env)


def peak_of(argv: list[str], env: dict[str, str]) -> tuple[int, str, str, int]:
    """`argv` run under a 1.5 GiB address-space limit (no hang: `MEASURE`): its exit status
    (negative: the signal that ended it), stdout, stderr (neither holding an escape byte),
    and its own peak resident memory in KiB."""
    measure = [sys.executable, "-c", MEASURE, *argv]
    done = subprocess.run(measure, capture_output=True, env=env, timeout=300, cwd=ROOT)
    said, _, last = done.stderr.rstrip(b"\n").rpartition(b"\n")
    _, code, peak = last.split()
    out, err = (text.decode("utf-8", "surrogateescape") for text in (done.stdout, said))
    for bad in ESCAPES:  # a stray byte 0x9b (no UTF-8) is read as the surrogate \\udc9b
        assert bad not in out + err and "\\udc9b" not in out + err, (argv, bad, out, err)
    return int(code), out, err, int(peak)


def one_line_or_ok(argv: object, code: int, err: str) -> None:
    """Exit 0, or 1 (verify, diff, check found something), or one line and exit 2."""
    assert code in (0, 1, 2), (argv, code, err[-600:])
    assert "Traceback" not in err, (argv, err[-600:])
    if code == 2:
        assert len([line for line in err.splitlines() if line.strip()]) == 1, (argv, err)


# --- signatures: a row's key id, public key and signature are read only within a bound ---


def big_signatures(bundle: Path, rows: int, each: int) -> None:
    """`rows` signature rows, each with a public key and a signature of `each` bytes."""
    with sqlite3.connect(bundle) as conn:
        conn.executemany(
            "INSERT INTO signatures VALUES (?, zeroblob(?), zeroblob(?), x'', 0)",
            [(f"{i:016x}", each, each) for i in range(rows)],
        )
    conn.close()


def test_oversized_signature_fields_are_never_read_whole(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A `signatures` row's public key and signature (32 and 64 bytes as warm writes them)
    were read whole, whatever their size: 4 rows of 2 x 6 MB made `warm verify` (and `merge`,
    and a trusted-keys reader) hold ~48 MB more, up to ~1 GB over 64 rows. They are bounded
    in SQL now: an oversized one is a corrupt signature entry, named, never loaded."""
    plain = host_bundle(tmp_path / "plain.warm")
    hostile = host_bundle(tmp_path / "hostile.warm")
    big_signatures(hostile, 4, 6 * MIB)
    before = hostile.read_bytes()
    _, _, _, base = cli(warm, "verify", plain)
    code, out, err, peak = cli(warm, "verify", hostile)
    one_line_or_ok("verify", code, err)
    assert code == 1 and "corrupt signature entry '0000000000000000'" in out, out + err
    assert "public_key" in out
    assert peak < base + 20 * 1024, (base, peak)  # KiB: not the 48 MB of the rows
    target = tmp_path / "out.warm"
    code, out, err, peak = cli(warm, "merge", hostile, "-o", target)
    one_line_or_ok("merge", code, err)
    assert peak < base + 20 * 1024, (base, peak)
    assert hostile.read_bytes() == before


# --- a kernel miss's note of what the bundle holds from other toolchains and devices ---


def long_values(bundle: Path, table: str, column: str, chars: int) -> None:
    """Every row's `column` of `table` made a distinct text of `chars` characters."""
    with sqlite3.connect(bundle) as conn:
        conn.execute(f"UPDATE {table} SET {column} = printf('%.*c', ?, 'a') || rowid", (chars,))
    conn.close()


def cold(warm: Warm) -> tuple[str, int]:
    """What the example computes with no bundle (each kernel compiled, each tune measured),
    and the peak memory (KiB) that took."""
    if not _COLD:
        code, out, err, peak = peak_of(
            [sys.executable, "-c", SERVE], dict(warm.env, WARM_BUNDLE="")
        )
        assert code == 0 and out.startswith("["), err
        _COLD.append((out, peak))
    return _COLD[0]


def test_a_miss_holds_no_long_toolchain_of_the_bundle_in_memory(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A production process's first kernel miss notes what the bundle holds from other
    toolchains (`Bundle.foreign`): its `GROUP BY toolchain` held every toolchain whole in
    SQLite's temporary B-tree, over its limit or not, so six kernels of 6 MB toolchains
    (a 36 MB bundle) made the process hold ~66 MB more. Counted as they stream now, each
    within its bound: the process serves the cold numbers in flat memory."""
    numbers, base = cold(warm)  # a process that compiles every kernel itself
    hostile = host_bundle(tmp_path / "hostile.warm")
    long_values(hostile, "kernels", "toolchain", 6 * MIB)
    before = hostile.read_bytes()
    env = dict(warm.env, WARM_BUNDLE=str(hostile))
    code, out, err, peak = peak_of([sys.executable, "-c", SERVE], env)
    assert code == 0 and out == numbers, err[-600:]
    assert peak < base + 25 * 1024, (base, peak)  # KiB: not the 36 MB of toolchains
    assert hostile.read_bytes() == before


# --- a sample of what held: raw and structured mutations against the commands ---


def flipped(data: bytes, seed: int) -> bytes:
    """`data` with a few bytes of one page past the header changed (seeded)."""
    rng, out = random.Random(seed), bytearray(data)
    page = rng.randrange(1, len(data) // PAGE)
    for _ in range(4):
        out[page * PAGE + rng.randrange(PAGE)] ^= rng.randrange(1, 256)
    return bytes(out)


def edited(data: bytes, path: Path, *statements: str) -> bytes:
    """`data` with `statements` run on a copy at `path` (NOT NULL lifted while they run)."""
    path.write_bytes(data)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema = ON")
    schema = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    conn.execute("UPDATE sqlite_master SET sql = replace(sql, 'NOT NULL', '') WHERE type = 'table'")
    conn.commit()
    conn.close()
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.execute("PRAGMA writable_schema = ON")
    conn.executemany("UPDATE sqlite_master SET sql = ? WHERE name = ?", [(s, n) for n, s in schema])
    conn.commit()
    conn.close()
    return path.read_bytes()


ESCAPED = "CAST(x'1b5b324a1b5d35323b633b61476b3d07e280ae9bff' AS TEXT)"  # ESC[2J, OSC 52, U+202E
DEEP = "'" + "[" * 100_000 + "]" * 100_000 + "'"
SAMPLE = {
    "bytes flipped": lambda data, path: flipped(data, 37),
    "cut at a page": lambda data, path: data[: len(data) // PAGE // 2 * PAGE],
    "grown by pages": lambda data, path: data + random.Random(7).randbytes(3 * PAGE),
    "escapes, not UTF-8": lambda data, path: edited(
        data,
        path,
        f"UPDATE kernels SET label = {ESCAPED} WHERE label = 'row_sum'",
        f"UPDATE manifest SET value = {ESCAPED} WHERE key = 'warm_version'",
        f"UPDATE tunes SET pick = {ESCAPED}",
    ),
    "deep JSON, huge sizes": lambda data, path: edited(
        data,
        path,
        f"UPDATE fingerprints SET data = {DEEP}",
        f"UPDATE manifest SET value = {DEEP} WHERE key = 'run'",
        f"UPDATE blobs SET size = {2**63 - 1}",
        f"UPDATE kernels SET seconds = {-(2**63)}, components = NULL",
    ),
}


def test_a_sample_of_hostile_bundles_against_the_commands(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """Each sample (bytes flipped in a page, cut at a page, grown by random pages; texts of
    escapes that are no UTF-8; JSON nested 100,000 deep, sizes at 64-bit limits, NULL in a
    NOT NULL column): `stats`, `verify --json` and `merge` exit 0, 1 or say one line and
    exit 2, print no escape, leave the bundle as it was and a merge's target intact when
    it fails; a production process over the last computes the cold numbers."""
    good = host_bundle(tmp_path / "good.warm").read_bytes()
    target = tmp_path / "target.warm"
    for name, make in SAMPLE.items():
        bundle = tmp_path / f"{name.replace(' ', '-').replace(',', '')}.warm"
        bundle.write_bytes(make(good, bundle))
        before = bundle.read_bytes()
        for args in (("stats", bundle), ("verify", bundle, "--json")):
            code, _, err, _ = cli(warm, *args)
            one_line_or_ok((name, *args), code, err)
        target.write_bytes(good)
        code, _, err, _ = cli(warm, "merge", bundle, "-o", target, "--force")
        one_line_or_ok((name, "merge"), code, err)
        assert code == 0 or target.read_bytes() == good, name
        assert bundle.read_bytes() == before, name
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_EXPLAIN="1", WARM_REPORT="1")
    code, out, err, _ = peak_of([sys.executable, "-c", SERVE], env)
    assert code == 0 and out == cold(warm)[0], err[-600:]


def test_sqlites_two_line_finding_is_one_line_of_push_and_verify(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A header whose incremental-vacuum field is set (byte 64) has SQLite's own check say
    `*** in database main ***` and its finding on two lines: `warm push` (and `warm pull`,
    whose download is checked the same way) refused the bundle in those two lines. SQLite's
    words are one line now, as every refusal is."""
    bundle = host_bundle(tmp_path / "vacuum.warm")
    data = bytearray(bundle.read_bytes())
    data[64] = 149
    bundle.write_bytes(bytes(data))
    code, _, err, _ = cli(warm, "push", bundle, "http://127.0.0.1:9/never.warm")
    one_line_or_ok("push", code, err)
    assert code == 2 and "not pushed: sqlite: *** in database main *** incremental" in err, err
    code, out, err, _ = cli(warm, "verify", bundle)
    assert code == 1 and "sqlite: *** in database main *** incremental_vacuum" in out, out + err
    assert bundle.read_bytes() == bytes(data)
