"""Hostile review of stop 60's trust work (trust60's merge and the small fixes beside it):
faults found through another door than the one fixed, each shown by a test that failed
before its fix. Real bundles made by the host example and signed by `warm keygen`'s keys,
the real CLI in subprocesses, the system C compiler; no timings."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from test_readme54 import SERVE
from test_review54b import IN_TEMPORARY_FOLDERS
from test_trust60 import production_trusting

import warmcli.bundle.signed as signed_module
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import load_public_key
from warmcli.bundle.store import Bundle


def _signed_copy(made: tuple[Warm, Path], tmp_path: Path, edit: str) -> Path:
    """A copy of the made bundle signed by a new key `ci` (its `.pub` in `tmp_path`), then
    edited by the SQL `edit`."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("keygen", tmp_path / "ci").returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "ci").returncode == 0
    with sqlite3.connect(bundle) as conn:
        conn.execute(edit)
    conn.close()
    return bundle


def _verified_corrupt(made: tuple[Warm, Path], tmp_path: Path, assignment: str) -> str:
    """`warm verify` of a signed copy whose signatures an `UPDATE ... SET assignment` edited:
    exit 1 (a corrupt entry named), never in SQLite's words nor with warm's SQL: what it said."""
    bundle = _signed_copy(made, tmp_path, f"UPDATE signatures SET {assignment}")
    done = made[0]("verify", bundle)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "decode" not in said and "SELECT" not in said, said
    return said


def test_a_signature_row_without_a_key_id_never_has_its_long_list_read(
    made: tuple[Warm, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signatures' lists are read within `MAX_BLOB_BYTES` all together, shortest first,
    ties broken by key id: a row whose key id is NULL (its `TEXT PRIMARY KEY` lets SQLite
    store one) compared as unknown with itself, so its own list was left out of its sum and
    a list of any length was read whole beside a short one (70,000 bytes past a limit of
    65,536 here; a gigabyte in a bundle made to cost memory). It is read as none now, as any
    list past the limit. (The limit is made small: no test writes a bundle over 256 MiB.)"""
    row = "(NULL, zeroblob(32), zeroblob(64), zeroblob(70000), 1.0)"  # no key id, over the limit
    bundle = _signed_copy(made, tmp_path, f"INSERT INTO signatures VALUES {row}, {row}")
    monkeypatch.setattr(signed_module, "MAX_BLOB_BYTES", 65536)
    read: list[int] = []  # the length of every list the signatures' select handed Python
    few = signed_module.SignedRows._few

    def counted(self: Any, select: str, most: int, what: str, params: Any = ()) -> Any:
        rows = few(self, select, most, what, params)
        if what == "signatures":
            read.extend(len(r[4]) for r in rows if r[4] is not None)
        return rows

    monkeypatch.setattr(signed_module.SignedRows, "_few", counted)
    with Bundle.open(bundle) as opened:
        report = signature_report(opened, [load_public_key(tmp_path / "ci.pub")])
    assert report.vouched and not report.uncovered, report
    assert read and max(read) <= 65536, read  # the trusted key's list alone


def _sign_under(warm: Warm, trusted: Path, bundle: Path, key: Path) -> Any:
    """`warm sign bundle --key key` with `WARM_TRUSTED_KEYS=trusted`."""
    warm.env["WARM_TRUSTED_KEYS"] = str(trusted)
    try:
        return warm("sign", bundle, "--key", key)
    finally:
        del warm.env["WARM_TRUSTED_KEYS"]


def _signers(bundle: Path) -> int:
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        found = conn.execute("SELECT count(*) FROM signatures").fetchone()[0]
    conn.close()
    return int(found)


def test_sign_under_trusted_keys_keeps_run_and_merge_s_rule(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Under `WARM_TRUSTED_KEYS`, `run --key` and `merge --key` refuse a key that is not one of
    them (what it signs would be refused there) and never vouch for a row no trusted key
    signed (run builds it again, merge refuses the input), but `warm sign` signed with any
    key (exit 0, a signature the same machine then refused) and vouched for every row: an
    entry anyone edited in a signed bundle was served once a trusted key re-signed it. It
    keeps their rule now, in one line, exit 2, nothing written; signing a bundle they signed
    whole with another trusted key (a rotation's step 2) is as before."""
    warm, good = made
    for name in ("ci", "ci2", "other"):
        assert warm("keygen", tmp_path / name).returncode == 0
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("ci", "ci2"):
        shutil.copyfile(tmp_path / f"{name}.pub", keys / f"{name}.pub")
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("sign", bundle, "--key", tmp_path / "ci").returncode == 0

    untrusted = _sign_under(warm, keys, bundle, tmp_path / "other")
    assert untrusted.returncode == 2, untrusted.stdout + untrusted.stderr
    assert untrusted.stderr.count("\n") == 1, untrusted.stderr
    assert "its public key is not one of WARM_TRUSTED_KEYS" in untrusted.stderr, untrusted.stderr
    assert _signers(bundle) == 1

    rotated = _sign_under(warm, keys, bundle, tmp_path / "ci2")  # signed whole by ci: signed
    assert rotated.returncode == 0, rotated.stderr
    assert _signers(bundle) == 2

    with sqlite3.connect(bundle) as conn:  # a row edited after the signatures: none covers it
        conn.execute("UPDATE manifest SET value = value || ' ' WHERE key = 'warm_version'")
    conn.close()
    added = _sign_under(warm, keys, bundle, tmp_path / "ci")
    assert added.returncode == 2, added.stdout + added.stderr
    assert added.stderr.count("\n") == 1, added.stderr
    assert "not signed by a trusted key" in added.stderr, added.stderr
    assert "warm sign vouches only for what trusted keys signed" in added.stderr, added.stderr
    assert _signers(bundle) == 2
    assert warm("sign", bundle, "--key", tmp_path / "ci").returncode == 0  # keys unset: vouched


def test_a_path_of_an_empty_string_trusts_no_key_of_the_working_folder(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """147d1fd9 refused `trusted_keys=[""]`, whose `Path("")` is `.`, the working folder, where
    every `*.pub` was trusted; but `Path("")` itself (a key path read from an unset variable
    as a `Path`, as a caller who types paths writes it) is already `.`, which it let through:
    a bundle signed by the key whose `.pub` an attacker left in the working folder was served.
    A `Path` of `.` names no key file either (`Path("")` is one): refused in one line."""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("keygen", tmp_path / "attacker.key").returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "attacker.key").returncode == 0
    unset = '[Path(os.environ.get("KEY", ""))]'  # KEY unset; attacker.key.pub lies in cwd
    done = production_trusting(warm, unset, bundle, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("trusted_keys=: Path('.') (as Path('') is) names no key"), (
        done.stdout
    )


def test_a_pragma_dependency_in_a_folder_removed_since_is_built_where_launched_again(
    warm: Warm, tmp_path: Path, workload_file: Any
) -> None:
    """6e2ae906 counted `??/` as a possible include beside `include` and `\\`, but GCC's
    `#pragma GCC dependency "local.h"` reads a file by the include search too, `CPATH=.` and
    all, without any of them: a unit queued in a folder the workload removed was built stale,
    `warm run` exit 2, `local.h: No such file or directory`. Such a unit is queued again where
    it is launched, as one that includes."""
    source = "FIRST = True\n" + IN_TEMPORARY_FOLDERS.replace(
        '#include "local.h"', '#pragma GCC dependency "local.h"\\n#define VAL 100'
    ).replace('options=("-I.",)', "options=()")
    assert "dependency" in source and "include" not in source.split("SRC")[1], source
    path, bundle = workload_file(source), tmp_path / "b.warm"
    here = warm.with_env(CPATH=".")
    done = here("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr
    assert here.production(SERVE, path, bundle=bundle) == [0, 101]


@pytest.mark.parametrize("column", ["rows", "public_key", "signature"])
def test_a_signature_blob_stored_as_text_is_named_so_not_by_sqlite_s_words(
    made: tuple[Warm, Path], tmp_path: Path, column: str
) -> None:
    """c08eb6fb read a kernel's blob and a tune kernel's key only where SQLite holds a blob, so
    that one an edit stored as text (`CAST(... AS TEXT)`) is never decoded; the signatures'
    blobs were still selected for Python to decode: `warm verify` (and merge, and production
    under trusted keys) said `corrupt bundle (Could not decode to UTF-8 column 'CASE WHEN (SELECT
    sum(t.n) FROM ...`, warm's own SQL, exit 2. Such a signature is a corrupt signature entry
    now, named so, as one of another type: verify exits 1 and names it."""
    said = _verified_corrupt(made, tmp_path, f"{column} = CAST({column} AS TEXT)")
    assert f"({column}: not a blob within the limit)" in said, said


@pytest.mark.parametrize("column", ["key_id", "signed_at"])
def test_a_signature_text_that_is_not_utf8_is_named_so_not_by_sqlite_s_words(
    made: tuple[Warm, Path], tmp_path: Path, column: str
) -> None:
    """The same door for a signature's key id and date: a text of bytes that are not UTF-8
    (`CAST(x'ff00aa' AS TEXT)`) made `warm verify` say `corrupt bundle (Could not decode to
    UTF-8 column 'CASE WHEN length(key_id) <= 4096 THEN key_id END' ...)`, exit 2, where a
    kernel's entry name so stored is named `not UTF-8`. A text SQL cannot vouch is ASCII is
    read as none now: a corrupt signature entry, verify exit 1."""
    said = _verified_corrupt(made, tmp_path, f"{column} = CAST(x'ff00aa' AS TEXT)")
    assert "corrupt signature entry" in said and f"({column}: " in said, said


@pytest.mark.parametrize("value", ["'x' || hex(zeroblob(40000))", "zeroblob(80000)"])
def test_a_signature_date_of_any_length_is_never_read(
    made: tuple[Warm, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Each column of a signature is read within its bound (the module doc: "each key id,
    public key and signature only within its bound"), but its date, `signed_at`, was read as
    it was, of any length: a text or blob an attacker made a gigabyte was read whole by verify,
    merge, sign and production. It is read within `MAX_NAME_CHARS` now, else as none (a
    corrupt signature entry, as any value of the wrong type)."""
    bundle = _signed_copy(made, tmp_path, f"UPDATE signatures SET signed_at = {value}")
    read: list[object] = []
    few = signed_module.SignedRows._few

    def kept(self: Any, select: str, most: int, what: str, params: Any = ()) -> Any:
        rows = few(self, select, most, what, params)
        read.extend(r[3] for r in rows if what == "signatures")
        return rows

    monkeypatch.setattr(signed_module.SignedRows, "_few", kept)
    with Bundle.open(bundle) as opened:
        report = signature_report(opened, None)
    assert read == [None], [len(v) if isinstance(v, str | bytes) else v for v in read]
    assert report.corrupt and "(signed_at: " in report.corrupt[0], report.corrupt
