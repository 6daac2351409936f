"""Trial of signing and trust (stop 60), from the README's "Trust: a bundle is native code":
faults found as a user and as an attacker, each shown by a test that failed before its fix.
Real bundles signed by `warm keygen`'s keys, production processes in subprocesses, the system
C compiler; no timings."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm

import warmcli.bundle.signed as signed_module
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import load_public_key
from warmcli.bundle.store import Bundle

# A production process given its trusted keys as `use_bundle(trusted_keys=KEYS)`, KEYS a Python
# expression (over `os`, `sys`, `Path`), in the folder `cwd`: it prints the one line its
# SignatureError says, else that the bundle was served.
_TRUSTING = """
import os, sys, warmcli
from pathlib import Path
try:
    warmcli.use_bundle(sys.argv[1], trusted_keys=KEYS)
    warmcli.runtime("host")
    print("served")
except warmcli.SignatureError as exc:
    print(exc)
"""


def production_trusting(
    warm: Warm, keys: str, bundle: Path, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """A production process over `bundle` in `cwd` trusting `keys` (a Python expression, given
    `args` after the bundle as `sys.argv[2:]`), with neither WARM_TRUSTED_KEYS nor KEY set."""
    env = {k: v for k, v in warm.env.items() if k not in ("WARM_TRUSTED_KEYS", "KEY")}
    return subprocess.run(
        [sys.executable, "-c", _TRUSTING.replace("KEYS", keys), str(bundle), *args],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(ROOT)),
        cwd=cwd,
        timeout=120,
    )


def _refused_trusting(warm: Warm, keys: Path, bundle: Path) -> str:
    """`warm verify bundle` under `WARM_TRUSTED_KEYS=keys`, refused in one line, exit 2: that
    line (with its newline)."""
    done = warm.with_env(WARM_TRUSTED_KEYS=str(keys))("verify", bundle)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_an_empty_trusted_key_path_trusts_no_key_of_the_working_folder(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`use_bundle(path, trusted_keys=[""])` (a key path read from a variable left unset, say)
    was taken as `Path("")`, which is `.`: a folder, so every `*.pub` in the working folder was
    trusted, and a bundle signed by the key whose `.pub` an attacker left beside it was served.
    An empty path names no key file: it is refused in one line, and nothing is served."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("keygen", tmp_path / "attacker.key").returncode == 0
    signed = warm("sign", bundle, "--key", tmp_path / "attacker.key")
    assert signed.returncode == 0, signed.stderr
    done = production_trusting(warm, "sys.argv[2:]", bundle, "", cwd=tmp_path)  # attacker.key.pub
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("trusted_keys=: an empty path names no key file"), done.stdout


def test_a_key_file_holding_two_keys_is_refused_not_read_in_part(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A trusted key file holding two PEM public keys (two `.pub` files concatenated, as an
    `authorized_keys` file lists several) was read up to its first key: the second was
    silently not trusted, and a bundle it signed was refused as `signed only by untrusted or
    invalid key(s)` of a key its owner had listed. A key file holds one key: one holding more
    is refused in one line naming it, exit 2."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    for name in ("old", "new"):
        assert warm("keygen", tmp_path / name).returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "new").returncode == 0
    both = tmp_path / "both.pub"
    both.write_bytes((tmp_path / "old.pub").read_bytes() + (tmp_path / "new.pub").read_bytes())
    said = _refused_trusting(warm, both, bundle)
    assert f"WARM_TRUSTED_KEYS: {both}: 2 PEM blocks" in said, said


def test_a_long_signature_list_never_pushes_a_short_one_past_the_limit(
    made: tuple[Warm, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signatures' lists are read within `MAX_BLOB_BYTES` all together (256 MiB): a list
    was read while the lists of every key id up to its own stayed within it, so one oversized
    row whose key id sorts first (`0000...`: anyone who may add a row chooses it) made the
    trusted key's own list of 13 rows read as none: `warm verify` named the trusted signature
    a `corrupt signature entry` and the bundle `not signed by a trusted key`, which a
    production process (reading only the trusted keys' rows) served. The lists are summed
    shortest first now: one longer than the limit is read as none alone. (The limit is made
    small here, as a bundle over 256 MiB is not written for a test.)"""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("keygen", tmp_path / "ci").returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "ci").returncode == 0
    with sqlite3.connect(bundle) as conn:  # a list over the limit, its key id sorting first
        conn.execute(
            "INSERT INTO signatures VALUES ('0000000000000000', zeroblob(32), zeroblob(64), "
            "zeroblob(70000), 1.0)"
        )
    conn.close()
    monkeypatch.setattr(signed_module, "MAX_BLOB_BYTES", 65536)
    with Bundle.open(bundle) as opened:
        report = signature_report(opened, [load_public_key(tmp_path / "ci.pub")])
    assert report.vouched and not report.uncovered, report
    assert report.corrupt == [
        "corrupt signature entry '0000000000000000' (rows: not a blob within the limit)"
    ], report.corrupt


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "the file is empty"),
        (b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk0 ci@host\n", "an OpenSSH key, not PEM"),
        (b"0*0\x05\x06\x03+ep\x03!\x00" + bytes(32), "no PEM block"),  # DER, not PEM
    ],
)
def test_a_key_file_that_is_no_pem_key_says_what_it_is(
    made: tuple[Warm, Path], tmp_path: Path, content: bytes, said: str
) -> None:
    """A trusted key file that was empty, an OpenSSH public key (`~/.ssh/id_ed25519.pub`, the
    Ed25519 key a user has at hand) or a DER key was refused with `cryptography`'s own words,
    `Unable to load PEM file. See https://cryptography.io/en/latest/faq/... MalformedFraming`,
    naming none of these. The line says what the file is, still one line and exit 2."""
    warm, good = made
    key = tmp_path / "ci.pub"
    key.write_bytes(content)
    line = _refused_trusting(warm, key, good)
    assert "cryptography.io" not in line and f"{key}: not a PEM public key ({said}" in line, line


def test_a_blob_stored_as_text_is_named_so_not_by_sqlite_s_words(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A blob whose data an edit stored as text (`CAST(data AS TEXT)`, or `||` in SQL, which
    makes text of bytes) was read by a select Python could not decode: `warm check` and a
    production miss said `corrupt bundle (Could not decode to UTF-8 column 'CASE WHEN
    length(data) <= ? THEN data END' with text '\\x7fELF...')`, warm's own SQL and the
    binary's first bytes. It is never served still, and now said to be text, not binary."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    with sqlite3.connect(bundle) as conn:
        conn.execute("UPDATE blobs SET data = CAST(data AS TEXT)")
    conn.close()
    done = warm("check", bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Could not decode" not in done.stdout and "CASE WHEN" not in done.stdout, done.stdout
    assert "is text, not binary" in done.stdout, done.stdout


def test_a_tune_kernel_key_stored_as_text_is_named_so_not_by_sqlite_s_words(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Alike, a `tune_kernels` key (32 bytes a tune's candidates name by id) stored as a text
    that is not UTF-8: `warm verify`, `check` and `stats` named the tune corrupt in SQLite's
    and Python's words, `kernel id 1: Could not decode to UTF-8 column 'CASE WHEN length(key)
    = 32 THEN key END' with text '...'`. The tune is corrupt still, said in warm's words, as of
    a key of another size: `kernel id 1 is not one the bundle holds`."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    with sqlite3.connect(bundle) as conn:
        conn.execute(f"UPDATE tune_kernels SET key = CAST(x'{'ff' * 32}' AS TEXT) WHERE id = 1")
    conn.close()
    done = warm("verify", bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Could not decode" not in done.stdout and "CASE WHEN" not in done.stdout, done.stdout
    assert "(candidates: kernel id 1 is not one the bundle holds)" in done.stdout, done.stdout
