"""Bundle signatures through the real CLI and real production processes.

A bundle made by `warm run` is signed with a key made by `warm keygen`; production
processes under `WARM_TRUSTED_KEYS` serve it, refuse it unsigned or signed by another
key, and never serve a row edited or added after signing (sqlite3 edits the file as
an attacker would). Signing is by content: a VACUUM or a read-only copy stays signed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_cli import ForkedWarm

from warmcli.records import tune_key

MATMUL = EXAMPLES / "matmul_host.py"
SERVE = SERVE_MATMUL + "print(len(r.kernels), len(r.tunes), 'cryptography' in sys.modules)\n"


class Setup:
    """The module's bundles and keys, and its `warm`: each command a fork of a process that
    imported the CLI once (`tests/forked_cli.py`); no test here is of how a process starts."""

    def __init__(self, base: Path, servers: Any) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        self.servers = servers
        warm = Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200"))
        self.warm = ForkedWarm(warm, servers)
        self.base = base
        self.unsigned = base / "unsigned.warm"
        self.warm.json("run", MATMUL, "--bundle", self.unsigned)
        for name in ("ours", "theirs"):
            proc = self.warm("keygen", base / name)
            assert proc.returncode == 0, proc.stderr
        self.key, self.pub, self.other = base / "ours", base / "ours.pub", base / "theirs"
        self.signed = self.copy(self.unsigned, "signed.warm")
        self.ok(self.warm("sign", self.signed, "--key", self.key))

    def copy(self, source: Path, name: str) -> Path:
        path = self.base / name
        shutil.copyfile(source, path)
        return path

    @staticmethod
    def ok(proc: subprocess.CompletedProcess[str]) -> str:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def serve(self, bundle: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", SERVE.format(examples=str(EXAMPLES))],
            env={
                **self.warm.env,
                "WARM_BUNDLE": str(bundle),
                "WARM_TRUSTED_KEYS": str(self.pub),
                **env,
            },
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def verify(self, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.warm.env, WARM_TRUSTED_KEYS=str(self.pub))
        return ForkedWarm(Warm(env), self.servers)("verify", bundle, *args)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Setup:
    return Setup(tmp_path_factory.mktemp("signing"), forking_servers)


def test_a_signed_bundle_is_served_under_trusted_keys(setup: Setup) -> None:
    proc = setup.serve(setup.signed)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "0", "True"]  # every kernel and tune served
    doc = json.loads(setup.ok(setup.verify(setup.signed, "--json")))
    (signature,) = doc["integrity"]["signatures"]["signatures"]
    assert signature["valid"] and signature["trusted"]
    assert signature["covers"] == doc["integrity"]["signatures"]["rows"]
    text = setup.ok(setup.warm("verify", setup.signed))  # no trusted keys: reported only
    assert f"signature: key {signature['key_id']}" in text and "valid, covers" in text
    trusting = setup.warm.with_env(WARM_TRUSTED_KEYS=str(setup.pub))
    assert "every entry is servable here" in setup.ok(trusting("check", setup.signed))


def test_without_trusted_keys_cryptography_is_never_imported(setup: Setup) -> None:
    proc = setup.serve(setup.signed, WARM_TRUSTED_KEYS="")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "0", "False"]


def _swap_blob(conn: sqlite3.Connection) -> None:
    """Point row_sum at another kernel's binary (both are real blobs of the bundle)."""
    other = conn.execute(
        "SELECT sha256 FROM kernels WHERE sha256 != (SELECT sha256 FROM kernels "
        "WHERE entry = 'row_sum') LIMIT 1"
    ).fetchone()[0]
    conn.execute("UPDATE kernels SET sha256 = ? WHERE entry = 'row_sum'", (other,))


def _edit_pick(conn: sqlite3.Connection) -> None:
    conn.execute(
        "UPDATE tunes SET pick = 'tile8' WHERE key = (SELECT key FROM tunes "
        "WHERE pick != 'tile8' LIMIT 1)"
    )


@pytest.mark.parametrize(
    "tamper, missed", [(_swap_blob, ["1", "0"]), (_edit_pick, ["0", "1"])], ids=["blob", "pick"]
)
def test_an_edited_row_is_never_served(setup: Setup, tamper, missed: list[str]) -> None:
    path = setup.copy(setup.signed, f"tampered-{tamper.__name__}.warm")
    conn = sqlite3.connect(path)
    with conn:
        tamper(conn)
    conn.close()
    proc = setup.serve(path, WARM_EXPLAIN="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == missed  # compiled or measured by the process itself
    assert ": unsigned: bundle's entry is not signed by a trusted key" in proc.stderr
    strict = setup.serve(path, WARM_STRICT="1")
    assert strict.returncode != 0 and "StrictMissError" in strict.stderr
    verified = setup.verify(path)
    assert verified.returncode == 1
    assert "1 of" in verified.stdout and "not signed by a trusted key" in verified.stdout


def test_an_added_row_is_named_and_not_served(setup: Setup) -> None:
    path = setup.copy(setup.signed, "added.warm")
    conn = sqlite3.connect(path)
    with conn:
        row = conn.execute(  # format 3 stores a checksum and a key as their bytes
            "SELECT operation, shape_key, device, lower(hex(checksum)) FROM tunes"
        ).fetchone()
        key = tune_key(row[0], "float32[1x1]", row[2], row[3])
        conn.execute(
            "INSERT INTO tunes SELECT ?, operation, 'float32[1x1]', device, checksum, status, "
            "pick, candidates, seconds, measured_at, updated FROM tunes LIMIT 1",
            (bytes.fromhex(key),),
        )
    conn.close()
    verified = setup.verify(path)
    assert verified.returncode == 1 and f"tunes {key[:16]}" in verified.stdout
    proc = setup.serve(path)
    assert proc.returncode == 0 and proc.stdout.split()[:2] == ["0", "0"], proc.stderr


@pytest.mark.parametrize("which", ["unsigned", "wrong key", "forged signature"])
def test_a_bundle_no_trusted_key_signed_is_refused(setup: Setup, which: str) -> None:
    if which == "unsigned":
        path = setup.unsigned
    else:
        path = setup.copy(setup.unsigned, f"{which.replace(' ', '-')}.warm")
        setup.ok(setup.warm("sign", path, "--key", setup.other))
    if which == "forged signature":  # the other key's signature row, claiming to be ours
        pub = sqlite3.connect(setup.signed).execute("SELECT public_key FROM signatures").fetchone()
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE signatures SET public_key = ?", pub)
        conn.close()
    proc = setup.serve(path)
    assert proc.returncode != 0
    assert "bundle refused" in proc.stderr and "trusted key" in proc.stderr
    verified = setup.verify(path)
    assert verified.returncode == 1 and "not signed by a trusted key" in verified.stdout
    if which == "forged signature":
        assert "INVALID" in verified.stdout
    trusting = setup.warm.with_env(WARM_TRUSTED_KEYS=str(setup.pub))
    checked = trusting("check", path)  # the preflight: refused as production refuses it
    assert checked.returncode == 2 and "bundle refused" in checked.stderr, checked.stderr
    assert len(checked.stderr.splitlines()) == 1 and setup.ok(setup.warm("check", path))
    if which == "unsigned":  # `warm run` opens the bundle as production does
        run = trusting("run", MATMUL, "--bundle", setup.copy(path, "run-over.warm"))
        assert run.returncode == 2 and "bundle refused" in run.stderr
        assert "Traceback" not in run.stderr


def test_vacuum_and_a_read_only_copy_stay_signed(setup: Setup) -> None:
    path = setup.copy(setup.signed, "vacuumed.warm")
    conn = sqlite3.connect(path)
    conn.execute("VACUUM")
    conn.close()
    path.chmod(0o444)
    setup.ok(setup.verify(path))
    proc = setup.serve(path)
    assert proc.returncode == 0 and proc.stdout.split()[:2] == ["0", "0"], proc.stderr


def test_run_and_merge_sign_with_a_key_or_say_unsigned(setup: Setup) -> None:
    trusting = setup.warm.with_env(WARM_TRUSTED_KEYS=str(setup.pub))
    fresh = setup.base / "fresh.warm"
    doc = json.loads(
        setup.ok(trusting("run", MATMUL, "--bundle", fresh, "--key", setup.key, "--json"))
    )
    assert doc["verified"] and doc["signature"].startswith("signed by key")
    merged = setup.base / "merged.warm"
    text = setup.ok(setup.warm("merge", setup.signed, fresh, "-o", merged))
    assert "unsigned: the inputs' signatures do not carry over" in text
    assert setup.verify(merged).returncode == 1
    setup.ok(setup.warm("merge", setup.signed, "-o", merged, "--force", "--key", setup.key))
    setup.ok(setup.verify(merged))


def test_a_bundle_made_before_signatures_opens_and_can_be_signed(setup: Setup) -> None:
    path = setup.copy(setup.unsigned, "old.warm")
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE signatures")
    conn.close()
    assert "signature: unsigned" in setup.ok(setup.warm("verify", path))
    setup.ok(setup.warm("sign", path, "--key", setup.key))
    setup.ok(setup.verify(path))


def test_bad_keys_are_one_line_errors(setup: Setup) -> None:
    not_a_key = setup.base / "bundle-as-key"
    not_a_key.write_text("hello")
    for args in (
        ("sign", setup.signed, "--key", not_a_key),
        ("sign", setup.base / "missing.warm", "--key", setup.key),
        ("keygen", setup.key),  # never overwrites
    ):
        proc = setup.warm(*args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith("warm: error: ") and "Traceback" not in proc.stderr
    assert not (setup.base / "missing.warm").exists()
    bad = setup.warm.with_env(WARM_TRUSTED_KEYS=str(not_a_key))("verify", setup.signed)
    assert bad.returncode == 2 and "not a PEM public key" in bad.stderr


def test_row_hashes_are_unambiguous_and_found_in_sorted_lists() -> None:
    """Unit test of the pure encoding and lookup (no bundle)."""
    from warmcli.bundle.signing import RowSet, row_hash

    rows = [("ab", "c"), ("a", "bc"), (1,), (1.0,), ("1",), (b"1",), (None,), ()]
    hashes = {row_hash("kernels", r) for r in rows}
    assert len(hashes) == len(rows)
    assert row_hash("kernels", ("a",)) != row_hash("tunes", ("a",))
    listed = sorted(hashes)
    found = RowSet([b"".join(listed)])
    assert all(h in found for h in hashes)
    assert row_hash("kernels", ("x",)) not in found and b"" not in found


def test_a_write_back_keeps_what_was_signed_and_says_the_rest_is_unsigned(setup: Setup) -> None:
    path = setup.copy(setup.signed, "write-back.warm")
    conn = sqlite3.connect(path)
    with conn:
        _edit_pick(conn)
    conn.close()
    wrote = setup.serve(path, WARM_BUNDLE_WRITE="1")
    assert wrote.returncode == 0 and wrote.stdout.split()[:2] == ["0", "1"], wrote.stderr
    assert "they are unsigned: sign it again" in wrote.stderr
    again = setup.serve(path)  # the signed rows are still served; the new one is not
    assert again.returncode == 0 and again.stdout.split()[:2] == ["0", "1"], again.stderr
    setup.ok(setup.warm("sign", path, "--key", setup.key))
    signed = setup.serve(path)
    assert signed.returncode == 0 and signed.stdout.split()[:2] == ["0", "0"], signed.stderr
