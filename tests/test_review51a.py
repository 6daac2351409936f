"""Review 51a (a hostile review: bundles an attacker made by hand, against every command that
opens one): what it found.

- A bundle that is a link to a terminal (`b.warm -> /dev/pts/N`, or `WARM_BUNDLE` naming
  one), and a trusted key file that is one: `read_header` (every open of a bundle, a
  production process's `use_bundle` first) and the key's read opened the path to learn it
  was no regular file, without `O_NOCTTY`, so a session leader (a daemon, a service, a
  `setsid` job) took the terminal as its controlling terminal, whose hangup then sends it
  SIGHUP; a device opened acts besides (a tape rewinds, a watchdog is armed). Now the path
  is judged by `stat` first and never opened where it is no regular file (as
  `warmcli.stamped.opened` and the journal's checks already do), and opened as no terminal.
- `warm sign` signed a bundle whose fingerprint row is no JSON (exit 0, its key vouching
  for it), where `warm stats` and `merge` refuse the bundle naming the row ("corrupt
  fingerprint entry") and `sign` refuses a malformed kernel or tune row: its check of
  every row (`require_well_formed`) read no manifest or fingerprint. Now it reads them.
- A tune held twice under one key, as its 32 bytes and as hex text (a lookup by key reads
  either form): `warm verify` said sound (exit 0), `stats --json` listed the key twice with
  two picks (a serving process would take either, by SQLite's choice), and a format-1
  bundle holding such a pair failed every write at its migration ("UNIQUE constraint
  failed"). Now verify names it, exit 1, and every reader that checks a bundle's
  consistency (stats, check, clean, sign, diff, merge) refuses it in one line; a format-1
  bundle's writer, whose migration fails on it, says so ("held twice"), not "UNIQUE
  constraint failed: tunes.key".
- A `tune_kernels` row whose id is out of range (negative, or past 2^32 - 1): every write
  of a tune of that kernel (`warm run` into the bundle) is refused, "kernel id -1 in
  tune_kernels is out of range; nothing was written", for ever (`warm clean` removes the
  tunes naming it, never the row), while `warm verify` said sound. Now verify names it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from fresh_python import ROOT, fresh_env

# In a new session (a session leader with no controlling terminal, as a daemon is): open
# the bundle, then another trusting the key file, both links to a terminal; after each,
# whether the process has a controlling terminal (`/dev/tty` opens only where it has one).
_SESSION_LEADER = """
import os, sys
import warmcli
from warmcli.errors import WarmError
for kwargs in ({}, {"trusted_keys": [sys.argv[2]]}):
    try:
        warmcli.use_bundle(sys.argv[1 if not kwargs else 3], **kwargs)
    except WarmError as exc:
        print("refused:", exc)
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY))
        print("controlling terminal taken")
    except OSError:
        print("no controlling terminal")
"""


def test_a_bundle_or_key_linked_to_a_terminal_never_becomes_a_daemons_terminal(
    tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    master, slave = os.openpty()
    try:
        terminal = os.ttyname(slave)
        os.close(slave)
        (tmp_path / "b.warm").symlink_to(terminal)
        (tmp_path / "ci.key.pub").symlink_to(terminal)
        args = [tmp_path / "b.warm", tmp_path / "ci.key.pub", host_bundle(tmp_path / "g.warm")]
        proc = subprocess.run(
            [sys.executable, "-c", _SESSION_LEADER, *args],
            env=fresh_env(tmp_path),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.close(master)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("b.warm: not a warm bundle (not a regular file)"), proc.stdout
    assert lines[1] == "no controlling terminal", proc.stdout
    assert lines[2].endswith("ci.key.pub: not a PEM public key (not a regular file)"), lines
    assert lines[3] == "no controlling terminal", proc.stdout


def test_sign_refuses_a_fingerprint_row_stats_refuses(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    with contextlib.closing(sqlite3.connect(bundle)) as conn, conn:
        conn.execute("UPDATE fingerprints SET data = data || 'x' WHERE kind = 'device'")
    assert warm("keygen", tmp_path / "ci.key").returncode == 0
    said = "corrupt fingerprint entry 'device:host"
    stats = warm("stats", bundle)
    assert stats.returncode == 2 and said in stats.stderr, stats.stderr
    signed = warm("sign", "-k", tmp_path / "ci.key", bundle)
    assert signed.returncode == 2, signed.stdout
    assert said in signed.stderr and len(signed.stderr.splitlines()) == 1, signed.stderr
    with contextlib.closing(sqlite3.connect(bundle)) as conn:
        assert conn.execute("SELECT count(*) FROM signatures").fetchone() == (0,)


# A tune held twice: its row copied with its key as hex text (as format 2 stores keys) and
# another pick; a lookup by key reads either form (`tune_row.BY_KEY`).
_TWIN = (
    "INSERT INTO tunes SELECT lower(hex(key)), operation, shape_key, device, checksum, "
    "status, ?, candidates, seconds, measured_at, updated FROM tunes WHERE pick = ? LIMIT 1"
)


def test_a_tune_key_held_as_bytes_and_as_hex_is_named_not_read_as_sound(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    with contextlib.closing(sqlite3.connect(bundle)) as conn, conn:
        pick = conn.execute("SELECT pick FROM tunes LIMIT 1").fetchone()[0]
        conn.execute(_TWIN, ("tile8" if pick != "tile8" else "tile16", pick))
    said = "1 tune key(s) held twice, as their 32 bytes and as hex text"
    verified = warm("verify", bundle)
    assert verified.returncode == 1 and said in verified.stdout, verified.stdout
    for command in (("stats",), ("check",), ("clean",), ("sign", "-k", tmp_path / "k")):
        if command[0] == "sign":
            assert warm("keygen", tmp_path / "k").returncode == 0
        proc = warm(*command, bundle)
        assert proc.returncode == 2 and said in proc.stderr, (command, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_verify_names_a_kernel_id_every_tune_write_refuses(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    with contextlib.closing(sqlite3.connect(bundle)) as conn, conn:
        held = conn.execute("SELECT count(*) FROM tune_kernels").fetchone()[0]
        conn.execute("UPDATE tune_kernels SET id = -id")  # (as `warm clean` leaves it:)
        conn.execute("DELETE FROM tunes")  # its tunes, which name ids it lacks, removed
    verified = warm("verify", bundle)
    said = f"tune_kernels holds {held} kernel id(s) out of range (0 to 4294967295)"
    assert verified.returncode == 1 and said in verified.stdout, verified.stdout


def test_a_format1_bundle_holding_a_tune_twice_says_so_where_its_migration_fails(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    from test_clean37 import _format1_bundle

    bundle = tmp_path / "one.warm"
    _format1_bundle(bundle, host_bundle(tmp_path / "good.warm"))
    with contextlib.closing(sqlite3.connect(bundle)) as conn, conn:
        conn.execute(  # the first tune again, its key as its 32 bytes
            "INSERT INTO tunes SELECT unhex_key, operation, shape_key, device, checksum, "
            "status, pick, candidates, seconds, measured_at, updated FROM (SELECT *, ? AS "
            "unhex_key FROM tunes WHERE rowid = 1)",
            (bytes.fromhex(conn.execute("SELECT key FROM tunes WHERE rowid = 1").fetchone()[0]),),
        )
    cleaned = warm("clean", bundle)
    said = "a tune key held twice, as its 32 bytes and as hex text"
    assert cleaned.returncode == 2 and said in cleaned.stderr, cleaned.stderr
    assert len(cleaned.stderr.splitlines()) == 1, cleaned.stderr
    with contextlib.closing(sqlite3.connect(bundle)) as conn:  # as it was: format 1, both rows
        assert conn.execute("SELECT count(*) FROM tunes").fetchone() == (3,)
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
