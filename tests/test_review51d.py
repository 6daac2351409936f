"""A hostile review of stop 51's latest changes (faults51's migration in Python, its full-disk
reading of CANTOPEN and of a lock's ENOSPC; review51c's keying changes). It found:

- the migration of a format 1 or 2 bundle, its rows now read by Python, failed whole on a
  row holding a text that is not UTF-8 (an operation, a device, a format-2 candidates value
  stored as text): `warm clean`, the remedy for a corrupt entry, said `corrupt bundle (Could
  not decode to UTF-8 column 'operation' ...)`, exit 2, and so did every write. The SQL
  migration before it copied such a value as it is, a corrupt entry for the reader to name
  (the module doc's promise). Each row is copied by SQL again, Python binding only the values
  it converts (a key, a checksum, candidates).
- that migration read a thousand rows at a time whole, candidates over `MAX_PACKED_BYTES`
  (kept as they are) too: a format-1 bundle of 8 rows of 32 MiB cost 341 MB to open for write
  (84 MB before faults51: SQL never handed Python an oversize value). Python reads only what
  it may convert, one row at a time, holding 16 MiB of converted values at most: 85 MB.
- `cannot_open` read a file system that counts no blocks (`f_blocks` 0: a tmpfs of `size=0`,
  which is unbounded, some FUSE ones) as having none free: a journal SQLite could not open for
  want of a descriptor was `the disk is full (no room for its journal)` there, a wrong lead
  where the disk has all the room asked. Blocks are judged only where they are counted, as
  inodes were.
- `profile.is_plain` took any `$(NAME)` as a toolkit folder, the environment's too: nvcc
  reads `-I$(R51D)` in its profile as `$R51D` says, its spaces splitting it, so with
  `R51D="/tmp/inc -DR51D=3"` and then `=7`, `warm run --compiler nvcc` stored two cubins under
  one key (f6e77bd8...: 50d5e998... and b8bd38e2...), the profile keyed as a toolkit's own. A
  folder setting may name only what the profile set above it and nvcc's own names, and only
  `PATH` and `LD_LIBRARY_PATH` may add (`+=`: the environment's value first); a profile's
  digest (nvcc's identity, its `--dryrun` memo) covers the values of the variables it names.
- a `WARM_CC` wrapper script tuning for its CPU was keyed with it only where a word of it read
  `-march=native` whole: `exec cc -march="native" "$@"` (its words `-march=` and `native`) or
  `A=native; exec cc -march=$A "$@"` was served on any CPU. A script naming `-m(arch|tune|cpu)=`
  and a word `native` is keyed with the CPU now (a comment saying so too, as before: a miss on
  another CPU, never another's build).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from forked_cli import forked_warm  # noqa: F401
from full_disk import in_private_mount
from test_compact_tunes import _format1, _tune

from warmcli.bundle.store import Bundle


def _rows(path: Path) -> list[tuple[object, ...]]:
    """The two values not UTF-8 that the test stores, their type and bytes."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT typeof(operation), hex(operation) FROM tunes WHERE rowid = 2 UNION ALL "
            "SELECT typeof(candidates), hex(candidates) FROM tunes WHERE rowid = 3"
        ).fetchall()


@pytest.mark.parametrize("version", [1, 2])
def test_a_row_not_utf8_is_copied_by_the_migration_and_cleaned(warm, tmp_path: Path, version):
    path = tmp_path / "old.warm"
    _format1(path, [_tune(i) for i in range(3)], version=version)
    with sqlite3.connect(path) as conn:  # an operation, and candidates as text, not UTF-8
        conn.execute("UPDATE tunes SET operation = CAST(x'ff41' AS TEXT) WHERE rowid = 2")
        conn.execute("UPDATE tunes SET candidates = CAST(x'80' AS TEXT) WHERE rowid = 3")
    before = _rows(path)
    assert before == [("text", "FF41"), ("text", "80")]
    with Bundle.open(path, write=True):  # migrated (as warm run, clean, sign... open it)
        pass
    assert _rows(path) == before  # these two copied as they were
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)
        assert conn.execute("SELECT typeof(key) FROM tunes").fetchall() == [("blob",)] * 3
    done = warm("clean", path)
    assert done.returncode == 0, done.stderr
    assert "removed 0 kernel(s) and 2 tune(s)" in done.stdout, done.stdout


_NO_DESCRIPTOR = """
import os, sys
from warmcli.bundle.store import Bundle, BundleError
Bundle.create(sys.argv[1]).close()
bundle, held = Bundle.open(sys.argv[1], write=True), []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    os.close(held.pop())  # one left: for the write lock, none for the journal
try:
    with bundle.transaction() as conn:
        conn.execute("INSERT INTO manifest VALUES ('x', 'y')")
except BundleError as exc:
    print(exc)
"""


def test_a_journal_wanting_a_descriptor_on_a_disk_counting_no_blocks_is_not_a_full_disk(
    warm, tmp_path: Path
) -> None:
    """A tmpfs of `size=0,nr_inodes=0` (no bound on either: statvfs counts none), the bundle
    on it open for write, every descriptor but one taken: the journal cannot be opened."""
    mnt, code = tmp_path / "mnt", tmp_path / "no_descriptor.py"
    mnt.mkdir()
    code.write_text(_NO_DESCRIPTOR)
    script = (
        f"mount -t tmpfs -o size=0,nr_inodes=0 tmpfs {mnt} || exit 99; "
        f"{sys.executable} {code} {mnt}/b.warm"
    )
    proc = in_private_mount(script, warm.env)
    said = proc.stdout + proc.stderr
    assert "could not open the bundle or its journal (too many open files?)" in said, said
    assert "disk is full" not in said, said


def test_a_profile_naming_the_environment_is_no_toolkits_own() -> None:
    """The profile of the venv's nvcc is a toolkit's own; edited to name a variable of the
    environment (or to add to a folder nvcc then takes from the environment first), not."""
    from warmcli.backends.cuda.profile import is_plain

    (shipped,) = (ROOT / ".venv").glob("lib/python*/site-packages/nvidia/cu*/bin/nvcc.profile")
    text = shipped.read_bytes()
    assert is_plain(text)
    for edit in (
        (b'"-I$(TOP)/include"', b'"-I$(TOP)/include" -I$(R51D)'),
        (b'"-I$(TOP)/include"', b'"-I$(HOME)/include"'),
        (b"= $(TOP)/nvvm/libdevice", b"= $(LIBDEVICE)/libdevice"),
        (b"NVVMIR_LIBRARY_DIR =", b"NVVMIR_LIBRARY_DIR +="),
        (b"$(CICC_PATH):", b"$(CICC_PATH):$(MY_BIN):"),
    ):
        assert edit[0] in text and not is_plain(text.replace(*edit)), edit


def test_a_profiles_digest_covers_the_environment_it_names(tmp_path: Path, monkeypatch) -> None:
    from warmcli.backends.cuda.profile import digest

    (shipped,) = (ROOT / ".venv").glob("lib/python*/site-packages/nvidia/cu*/bin/nvcc.profile")
    edited = tmp_path / "nvcc.profile"
    edited.write_bytes(shipped.read_bytes().replace(b'"-I$(TOP)/include"', b"-I$(R51D)"))
    got = {}
    for value in ("/tmp/inc -DR51D=3", "/tmp/inc -DR51D=7"):
        monkeypatch.setenv("R51D", value)
        got[value] = digest(str(tmp_path / "nvcc")), digest(str(shipped.parent / "nvcc"))
    (three, own), (seven, own_too) = got.values()
    assert three != seven and own == own_too, got


_TINY = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void f(long *o) { o[0] = 1; }", "f", "P")
def workload(rt):
    rt.launch(K, rt.upload(np.zeros(1, dtype=np.int64)))
"""


@pytest.mark.parametrize("tuning", ['-march="native"', "-march=$A"])
def test_a_wrapper_tuning_for_its_cpu_however_quoted_is_keyed_with_it(warm, tmp_path, tuning):
    script, code, bundle = tmp_path / "cc", tmp_path / "tiny.py", tmp_path / "b.warm"
    script.write_text(f'#!/bin/sh\nA=native\nexec cc {tuning} "$@"\n')
    script.chmod(0o755)
    code.write_text(_TINY)
    proc = warm.with_env(WARM_CC=str(script))("run", code, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    with sqlite3.connect(bundle) as db:
        (toolchain,) = db.execute("select toolchain from kernels").fetchone()
    assert "wrapper script" in toolchain and " +native " in toolchain, toolchain


def test_a_migration_reads_no_oversize_candidates_into_python(tmp_path: Path) -> None:
    """10 format-1 tunes whose candidates are a byte over `MAX_PACKED_BYTES` (40 MiB in all,
    kept as they are): the migration's Python allocations stay far under them."""
    import tracemalloc

    from warmcli.bundle.candidates import MAX_PACKED_BYTES

    path = tmp_path / "old.warm"
    _format1(path, [_tune(i) for i in range(10)])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tunes SET candidates = zeroblob(?)", (MAX_PACKED_BYTES + 1,))
    tracemalloc.start()
    try:
        with Bundle.open(path, write=True):
            pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak  # before: 10 values of 4 MiB held at once
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        got = conn.execute("SELECT count(*), min(length(candidates)) FROM tunes").fetchone()
    assert got == (10, MAX_PACKED_BYTES + 1), got
