"""A bundle's schema cannot run anything: triggers, views, extra tables and indexes,
generated columns are refused, and a WAL-mode bundle is switched back to a rollback journal.

The attacks are real: the attacker's blob is a shared object whose constructor writes a
marker file, and the trigger points the victim's freshly compiled kernels at it. Every
case goes through the real CLI or a real production subprocess.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_production import MATMUL, serve

from warmcli.bundle.store import Bundle, BundleError


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


PAYLOAD = """
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
    int fd = open("%s", O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
}
"""


def attacker_blob(tmp_path: Path, marker: Path) -> bytes:
    """A real shared object that leaves `marker` behind when it is loaded."""
    src = tmp_path / "pwn.c"
    src.write_text(PAYLOAD % marker)
    lib = tmp_path / "pwn.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib.read_bytes()


def plant(bundle: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(bundle)
    for sql in statements:
        conn.execute(sql, params if "?" in sql else ())
    conn.commit()
    conn.close()


_MATMUL: list[bytes] = []  # the example's bundle, made once per session


def matmul_bundle(warm: Warm, path: Path) -> Path:
    """The example workload's bundle at `path`, made by the real CLI (once, then copied)."""
    if not _MATMUL:
        assert warm("run", MATMUL, "--bundle", path).returncode == 0
        _MATMUL.append(path.read_bytes())
    path.write_bytes(_MATMUL[0])
    return path


def one_refusal(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema is not warm's" in lines[0], lines
    return lines[0]


def test_an_insert_trigger_pointing_kernels_at_an_attackers_blob_never_runs(
    warm: Warm, tmp_path: Path
) -> None:
    bundle, marker = tmp_path / "b.warm", tmp_path / "PWNED"
    matmul_bundle(warm, bundle)
    evil = attacker_blob(tmp_path, marker)
    sha = hashlib.sha256(evil).hexdigest()
    plant(
        bundle,
        "INSERT INTO blobs VALUES (?, ?, ?)",
        f"CREATE TRIGGER t AFTER INSERT ON kernels BEGIN "
        f"UPDATE kernels SET sha256 = '{sha}' WHERE key = new.key; END",
        "DELETE FROM kernels WHERE entry = 'row_sum'",  # the victim's next run writes it
        params=(sha, len(evil), evil),
    )
    line = one_refusal(warm("run", MATMUL, "--bundle", bundle))
    assert "trigger 't' on 'kernels'" in line
    one_refusal(warm("verify", bundle))
    one_refusal(warm("stats", bundle))
    prod = serve(warm, bundle, WARM_BUNDLE_WRITE="1")
    _, err = prod.communicate(timeout=120)
    assert prod.returncode != 0 and "schema is not warm's" in err
    assert not marker.exists(), "the attacker's shared object was loaded"


def test_a_delete_trigger_cannot_drop_a_production_write_back(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "b.warm"
    matmul_bundle(warm, bundle)
    plant(
        bundle,
        "CREATE TRIGGER gone AFTER INSERT ON kernels BEGIN "
        "DELETE FROM kernels WHERE key = new.key; END",
        "DELETE FROM kernels WHERE entry = 'row_sum'",
    )
    before = bundle.read_bytes()
    prod = serve(warm, bundle, WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    _, err = prod.communicate(timeout=120)
    assert prod.returncode != 0 and "schema is not warm's" in err
    assert "written back" not in err
    assert bundle.read_bytes() == before


OTHER_OBJECTS = [
    "CREATE TRIGGER d BEFORE DELETE ON tunes BEGIN SELECT 1; END",
    "CREATE VIEW v AS SELECT * FROM kernels",
    "CREATE TABLE extra (x)",
    "CREATE INDEX kernels_label ON kernels(label)",
    "ALTER TABLE blobs ADD COLUMN g INTEGER GENERATED ALWAYS AS (length(data)) VIRTUAL",
    "DROP INDEX tunes_operation",
]


def test_any_schema_object_that_is_not_warms_is_refused(warm: Warm, tmp_path: Path) -> None:
    sound = matmul_bundle(warm, tmp_path / "sound.warm")
    for n, sql in enumerate(OTHER_OBJECTS):
        bundle = tmp_path / f"{n}.warm"
        bundle.write_bytes(sound.read_bytes())
        plant(bundle, sql)
        for write in (False, True):  # in-process: the CLI's refusal is shown above
            with pytest.raises(BundleError, match="schema is not warm's"):
                Bundle.open(bundle, write=write)
    one_refusal(warm("stats", bundle))


def test_a_wal_bundle_is_switched_back_to_a_rollback_journal(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "b.warm"
    matmul_bundle(warm, bundle)
    conn = sqlite3.connect(bundle)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    conn.close()
    assert bundle.read_bytes()[18:20] == b"\x02\x02"
    proc = warm("verify", bundle)
    assert proc.returncode == 0, proc.stderr
    assert bundle.read_bytes()[18:20] == b"\x01\x01"
    assert not Path(f"{bundle}-wal").exists()


def test_the_schema_read_from_warms_script_is_what_sqlite_makes_of_it() -> None:
    """`declared_schema` (an open's fast check, without SQLite) holds exactly the rows SQLite
    writes for each schema warm reads: a bundle equal to it is warm's, nothing more."""
    from warmcli.bundle.file import declared_schema, warm_schema
    from warmcli.bundle.schema import SCHEMAS

    for schemas in SCHEMAS.values():
        for script in schemas:
            assert declared_schema(script) == warm_schema(script)
