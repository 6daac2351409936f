"""The bundle's trust guards that no other test held (stop 53's mutation review, part 1).

Each guard here was disabled on purpose (the smallest edit: the mutant named in each test)
and the suite still passed; each test fails with its mutant and passes without it, through
the real CLI or a real production process over a bundle an attacker edited with sqlite3:
a signature that names a trusted key it was not made by, a key id that is not its key's, a
blob whose entry lies about its size, a name past its limit hidden behind a NUL (SQLite's
`length()` stops at one: only warm's own check of the text read sees it), a schema object
whose name, quoted by SQLite's own error, holds terminal escapes (only a production process
showed it: the CLI escapes each error line itself), and a host library in warm's cache that
another writer could change after it was compared.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, SERVE_MATMUL
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, each command forked)

from warmcli.backends.host.libraries import DIRECTORY
from warmcli.bundle.file import SCHEMA_BYTES, SCHEMA_CALLS, SCHEMA_STEPS

SERVE = (
    SERVE_MATMUL.format(examples=str(EXAMPLES))
    + "import json; print(json.dumps([len(r.kernels), len(r.tunes)]))\n"
)


def _copy(good: Path, path: Path) -> Path:
    shutil.copyfile(good, path)
    return path


# The trusted key's public half: RFC 8032's first Ed25519 test key (nothing here signs with it)
TRUSTED = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
SPKI = bytes.fromhex("302a300506032b6570032100")  # what precedes it in its PEM's DER


@pytest.fixture(scope="module")
def signed(made: tuple[Any, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The trusted public key's file (`trusted.pub`), and a copy of `made`'s bundle signed by
    an attacker's key that `warm keygen` made (`by-theirs`)."""
    warm, good = made
    base = tmp_path_factory.mktemp("signed")
    pem = base64.b64encode(SPKI + TRUSTED).decode()
    (base / "trusted.pub").write_text(
        f"-----BEGIN PUBLIC KEY-----\n{pem}\n-----END PUBLIC KEY-----\n"
    )
    assert warm("keygen", base / "theirs").returncode == 0
    bundle = _copy(good, base / "by-theirs.warm")
    done = warm("sign", bundle, "--key", base / "theirs")
    assert done.returncode == 0, done.stderr
    return {"trusted.pub": base / "trusted.pub", "by-theirs": bundle}


def _relabelled(signed: dict[str, Path], path: Path, *, with_key: bool) -> Path:
    """A copy (at `path`) of the bundle `theirs` signed, its signature row relabelled as an
    attacker edits it: with the trusted key's id (its raw public key's sha256, 16 hex
    digits, as `warm verify` names it), and with that public key too (`with_key`)."""
    key_id = hashlib.sha256(TRUSTED).hexdigest()[:16]
    with sqlite3.connect(_copy(signed["by-theirs"], path)) as conn:
        conn.execute("UPDATE signatures SET key_id = ?", (key_id,))
        if with_key:
            conn.execute("UPDATE signatures SET public_key = ?", (TRUSTED,))
    conn.close()
    return path


def test_a_signature_naming_a_trusted_key_it_was_not_made_by_is_refused(
    made: tuple[Any, Path], signed: dict[str, Path], tmp_path: Path
) -> None:
    # Mutant: `StoredSignature.valid` without `key.verify(...)`. A signature row made by
    # the attacker's key, relabelled with the trusted key's id and public key, was valid:
    # `warm check` under WARM_TRUSTED_KEYS served every row (test_signing's forged row kept
    # the attacker's key id, so the key id check alone refused it).
    warm, _ = made
    forged = _relabelled(signed, tmp_path / "forged.warm", with_key=True)
    trusting = warm.with_env(WARM_TRUSTED_KEYS=str(signed["trusted.pub"]))
    checked = trusting("check", forged)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "bundle refused" in checked.stderr and len(checked.stderr.splitlines()) == 1


def test_a_signature_labelled_with_another_keys_id_is_named_invalid(
    made: tuple[Any, Path], signed: dict[str, Path], tmp_path: Path
) -> None:
    # Mutant: `StoredSignature.valid` returning True without comparing the key id with its
    # key's. The attacker's own valid signature, labelled with the release key's id, was
    # reported by `warm verify` as a valid signature by the release key.
    warm, _ = made
    forged = _relabelled(signed, tmp_path / "forged.warm", with_key=False)
    verified = warm("verify", forged)
    assert verified.returncode == 1, verified.stdout
    assert "INVALID" in verified.stdout, verified.stdout


def test_a_blob_whose_entry_lies_about_its_size_is_never_served(
    made: tuple[Any, Path], tmp_path: Path
) -> None:
    # Mutant: `Bundle.blob` without its `size != length` refusal. A kernel's blob (its bytes
    # the genuine build's, hashing to its name) whose entry says one byte more was served:
    # `warm check` said every entry servable while `warm verify` named the blob.
    warm, good = made
    lying = _copy(good, tmp_path / "lying.warm")
    with sqlite3.connect(lying) as conn:
        (sha,) = conn.execute("SELECT sha256 FROM kernels ORDER BY rowid LIMIT 1").fetchone()
        (blob,) = conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha,)).fetchone()
        conn.execute("UPDATE blobs SET size = size + 1 WHERE sha256 = ?", (sha,))
    conn.close()
    checked = warm("check", lying, "--json")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    (said,) = {u["detail"] for u in json.loads(checked.stdout)["unservable"]}
    assert said.endswith(f"blob {sha[:16]} is {len(blob)} bytes, its entry says {len(blob) + 1}")


def test_a_name_past_its_limit_behind_a_nul_is_named_not_read_as_a_kernel(
    made: tuple[Any, Path], tmp_path: Path
) -> None:
    # Mutant: `rows._text` without its length check. The SELECT reads a name only where
    # SQLite's `length()` is within the limit, but `length()` counts up to a text's first
    # NUL: a device of a NUL and 5,000 characters was read whole and listed as a kernel's.
    warm, good = made
    hidden = _copy(good, tmp_path / "hidden.warm")
    device = "\0" + "x" * 5000
    with sqlite3.connect(hidden) as conn:
        conn.execute("UPDATE kernels SET device = ? WHERE rowid = 1", (device,))
        assert conn.execute("SELECT length(device) FROM kernels WHERE rowid = 1").fetchone() == (0,)
    conn.close()
    verified = warm("verify", hidden)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert "device: 5001 characters, over the limit of 4096" in verified.stdout, verified.stdout


def _home_copy(made: tuple[Any, Path], tmp_path: Path) -> tuple[Any, Path, Path]:
    """`made`'s warm with a copy of its home (the host libraries its run loaded, in
    `DIRECTORY`), that folder, and a copy of its bundle."""
    warm, good = made
    home = tmp_path / "home"
    shutil.copytree(warm.env["WARM_HOME"], home, symlinks=True)
    return warm.with_env(WARM_HOME=str(home)), home / DIRECTORY, _copy(good, tmp_path / "b.warm")


def test_a_cached_host_library_another_writer_could_change_is_written_again(
    made: tuple[Any, Path], tmp_path: Path
) -> None:
    # Mutants: `_load_verified` without `st_nlink == 1`, and without `private(st)`. A
    # library file in warm's cache that is also another name's (a hard link) or that others
    # may write holds the genuine bytes when compared, yet can change after: it was loaded
    # as it was. Each such file is written again (one name, 0600) before it loads: the
    # example's production run loads both its libraries, the one hard-linked, the other
    # open to all.
    there, folder, bundle = _home_copy(made, tmp_path)
    libraries = sorted(folder.glob("*.so"))
    assert len(libraries) == 2
    twin, genuine = tmp_path / "twin.so", libraries[0].read_bytes()
    os.link(libraries[0], twin)
    libraries[1].chmod(0o666)
    assert there.production(SERVE, bundle=bundle) == [0, 0]  # every kernel served
    for library in libraries:
        st = library.stat()
        assert st.st_nlink == 1 and not st.st_mode & 0o077, (library.name, oct(st.st_mode))
    assert twin.read_bytes() == genuine  # the other name's file, kept as it was


def test_sqlites_words_quoting_a_bundles_name_reach_a_production_log_escaped(
    made: tuple[Any, Path], tmp_path: Path
) -> None:
    # Mutant: `_sqlite_errors` without `printable(exc)`. SQLite's own error quotes the name
    # of the schema object it could not parse: a bundle's table named with an OSC title and
    # a clear-screen sequence reached the production process's exception (its traceback,
    # its log) raw; warm's CLI escapes each error line itself, so only production showed it.
    warm, good = made
    name = "evil\x1b]0;PWNED\x07\x1b[2J"
    hostile = _copy(good, tmp_path / "hostile.warm")
    with sqlite3.connect(hostile, isolation_level=None) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "INSERT INTO sqlite_master VALUES ('table', ?, ?, 0, 'CREATE TABLE t garbage')",
            (name, name),
        )
    conn.close()
    said = warm.production(
        "import json, warmcli\n"
        "try:\n"
        "    warmcli.runtime('host')\n"
        "except warmcli.WarmError as exc:\n"
        "    print(json.dumps(str(exc)))\n",
        bundle=hostile,
    )
    assert "corrupt bundle" in said and "\\x1b]0;PWNED\\x07" in said, said
    assert not any(c in said for c in "\x1b\x07"), said


@pytest.mark.parametrize("entries", [1, 5000])
def test_a_schema_entry_past_the_bound_or_entries_by_the_thousand_are_refused_unloaded(
    made: tuple[Any, Path], tmp_path: Path, entries: int
) -> None:
    # Mutant `substr(sql, 1, 4096)` read whole survived: SQLite's own load of the schema
    # read every entry whole before warm's check (a 200 MB statement: 231 MB peak), and
    # parsed every entry (200,000 small tables: 68 s of CPU for `warm stats`). Each
    # connection now bounds what SQLite reads (`SCHEMA_BYTES`) and the steps of its load
    # (`SCHEMA_CALLS` * `SCHEMA_STEPS`) till the schema is warm's: refused unread (27 MB
    # peak; 0.14 s), named so.
    warm, good = made
    hostile = _copy(good, tmp_path / "hostile.warm")
    padding = "a" * (100 << 10) if entries == 1 else ""
    with sqlite3.connect(hostile, isolation_level=None) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("BEGIN")  # (one transaction: one sync)
        conn.executemany(
            "INSERT INTO sqlite_master VALUES ('table', ?1, ?1, 0, ?2)",
            ((f"t{n}", f"CREATE TABLE t{n} (x /*{padding}*/)") for n in range(entries)),
        )
        conn.execute("COMMIT")
    conn.close()
    refused = warm("stats", hostile)
    assert refused.returncode == 2, refused.stdout
    steps = SCHEMA_CALLS * SCHEMA_STEPS
    why = f"an entry over {SCHEMA_BYTES} bytes" if entries == 1 else f"not loaded in {steps} steps"
    assert refused.stderr.strip().endswith(f"refused: its schema is not warm's ({why})"), (
        refused.stderr
    )
