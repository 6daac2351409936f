"""Review of stop 40's last merges: what a harsh look found wrong, each now right. A clean
that removes nothing on a bundle it cannot write (it vacuums a file holding free pages
since leftovers40b, and failed there where it had exited 0); `kernel_parts.arch_keys`
against `key_of` for every arch form. The real CLI in a subprocess, real SQLite files; a
read-only file system is a tmpfs remounted read-only in a mount namespace of its own.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from full_disk import in_private_mount

from warmcli.kernel_parts import arch_keys, key_of


def _free_pages(bundle: Path) -> int:
    """Leave free pages in `bundle` (what a vacuum a full disk refused leaves): a table
    filled and dropped, nothing of it left but its pages; returns how many are free."""
    with sqlite3.connect(bundle) as conn:
        conn.execute("CREATE TABLE filler (x)")
        conn.execute("INSERT INTO filler VALUES (zeroblob(400000))")
    with sqlite3.connect(bundle) as conn:
        conn.execute("DROP TABLE filler")
    with sqlite3.connect(bundle) as conn:
        return int(conn.execute("PRAGMA freelist_count").fetchone()[0])


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_clean_removing_nothing_on_a_read_only_bundle_still_exits_0(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm clean` of a bundle on a read-only mount, nothing to remove, exited 0; since a
    clean that removes nothing vacuums a file holding free pages it said "the file was not
    vacuumed: ... cannot take the write lock ...: Read-only file system" and exited 2 (as
    for a file this user may not write). A vacuum nothing asked for is skipped where the
    file cannot be written; the file is as it was."""
    warm, good = made
    bundle = tmp_path / "b.warm"
    shutil.copy(good, bundle)
    assert _free_pages(bundle) > 0
    disk = tmp_path / "disk"
    disk.mkdir()
    clean = f"{sys.executable} -m warmcli clean {disk}/b.warm"
    script = (
        f"mount -t tmpfs -o size=8m tmpfs {disk} || exit 99; cp {bundle} {disk}; "
        f"mount -o remount,ro {disk} || exit 99; {clean} 2>&1; echo rc=$?; "
        f"cmp {bundle} {disk}/b.warm && echo same"
    )
    proc = in_private_mount(script, warm.env, timeout=60)
    said, rest = proc.stdout.split("rc=")
    assert rest.startswith("0\n") and "clean: removed 0 kernel(s)" in said, proc.stdout
    assert rest.rstrip().endswith("same"), proc.stdout


def test_a_clean_removing_nothing_leaves_a_file_of_a_few_free_pages_as_it_is(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A clean that removes nothing vacuumed a file holding any free page: one page of 16 KiB
    free in a bundle of 300 MB had it rewrite all of it (1 s here; hours and the bundle's
    size again in free room for a large one, else "the disk is full", exit 2, where it had
    exited 0). Now only where its free pages are a tenth of the file or more (a removal
    whose vacuum was refused frees about what it removed)."""
    warm, good = made
    bundle = tmp_path / "b.warm"
    shutil.copy(good, bundle)
    with sqlite3.connect(bundle) as conn:  # a file of 4 MB (a manifest entry warm ignores)
        conn.execute("INSERT INTO manifest VALUES ('filler', ?)", ("x" * 4_000_000,))
        conn.execute("CREATE TABLE filler (x)")
    with sqlite3.connect(bundle) as conn:  # its one page freed
        conn.execute("DROP TABLE filler")
    conn.close()
    before = bundle.read_bytes()
    with sqlite3.connect(bundle) as conn:
        free, pages = conn.execute(
            "SELECT * FROM pragma_freelist_count, pragma_page_count"
        ).fetchone()
    conn.close()
    assert 0 < free * 10 < pages, (free, pages)
    proc = warm("clean", bundle)
    assert proc.returncode == 0 and "removed 0 kernel(s)" in proc.stdout, proc.stdout + proc.stderr
    assert bundle.read_bytes() == before


ARCHS = ("sm_90", "compute_90", "sm_90a", "x86_64", "", "é", "\u2028", '"', "\\", "\x00", "😀")
ARCHS += ("\ud800",)  # a lone surrogate


@pytest.mark.parametrize("headers", ["", "h.h:abc", '{"a.h": "\u00e9\\""}', "\ud7ff"])
def test_arch_keys_is_key_of_for_every_arch_form(headers: str) -> None:
    """`arch_keys` (a PTX row's search, leftovers40b) builds `key_of`'s JSON by hand: for
    any arch, headers present or absent, and text JSON escapes, each key is `key_of`'s."""
    content, toolchain = 'k\n"\u00e9\x01\U0001f600', "nvcc 12.4 \u00e9"
    for arch, key in arch_keys(content, ARCHS, headers, toolchain):
        assert key == key_of(content, arch, headers, toolchain), (arch, headers)


SECRET = r'''"""A host kernel whose binary (over a 16 KiB page) holds a string of its own: TAG."""
import os

from warmcli import Kernel, Runtime

DEVICE = "host"
TAG = os.environ["TAG"]
SOURCE = (
    "__attribute__((used)) static const unsigned int big[20000] = {1, 2, 3};\n"
    '__attribute__((used)) static const char tag[] = "' + TAG + '";\n'
    "void s_" + TAG + "(float *x, int n) { for (int j = 0; j < n; j++) x[j] += tag[j % 8]; }"
)
K = Kernel(SOURCE, "s_" + TAG, "Pi")


def workload(rt: Runtime) -> None:
    rt.launch(K, rt.buffer(64, "float32"), 64)
'''


def test_a_removed_binary_is_not_left_readable_in_the_file_before_its_vacuum(
    warm: Warm, tmp_path: Path
) -> None:
    """leftovers40b's `secure_delete = FAST` (so a removal on a nearly full disk journals
    only the rows) left every page a removal frees as it was: a clean whose vacuum was
    refused or interrupted (Ctrl-C, exit 130) left the removed kernel's binary readable in
    the file, as no clean before did (SQLite's default here zeroes them), in a bundle then
    pushed or shipped. The pages are zeroed again; `FAST` only where the disk refuses that
    journal (test_leftovers40b's full disk)."""
    (tmp_path / "secret.py").write_text(SECRET)
    bundle = tmp_path / "b.warm"
    for tag in ("MUSTNOTSHIPAAAA", "KEEPBBBBBBBBBBB"):
        warm.env["TAG"] = tag
        assert warm("run", tmp_path / "secret.py", "-b", bundle, "-q").returncode == 0
    assert bundle.read_bytes().count(b"MUSTNOTSHIPAAAA") > 0
    with sqlite3.connect(bundle) as conn:
        gone = [k for (k,) in conn.execute("SELECT key FROM kernels WHERE label LIKE '%MUST%'")]
    conn.close()
    assert len(gone) == 1
    from warmcli.bundle.store import Bundle

    with Bundle.open(bundle, write=True) as opened:  # the removal, its vacuum not yet made
        opened.delete(gone)
    assert bundle.read_bytes().count(b"MUSTNOTSHIPAAAA") == 0
    assert bundle.read_bytes().count(b"KEEPBBBBBBBBBBB") > 0


SLOW_REMOVER = """
import pathlib, sys, time
from warmcli.bundle.replacing import remove_new
real_unlink = pathlib.Path.unlink
def slow_unlink(self, missing_ok=False):  # a slow disk: each removal takes 1 s (real still)
    print("removing", self.name, flush=True)
    time.sleep(1.0)
    real_unlink(self, missing_ok=missing_ok)
pathlib.Path.unlink = slow_unlink
remove_new(pathlib.Path(sys.argv[1]))
"""
HOLDER = """
import pathlib, sys, time
from warmcli.bundle.lock import waiting_at_most, write_lock
from warmcli.errors import BundleError
try:
    with waiting_at_most(float(sys.argv[2])), write_lock(pathlib.Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(float(sys.argv[3]))
except BundleError:
    print("waited", flush=True)
"""


def test_a_failed_first_runs_lock_file_is_removed_before_its_lock_is_let_go(
    tmp_path: Path,
) -> None:
    """`remove_new` (a failed first run's cleanup) let its write lock go, then removed the
    lock file: a writer B that waited took the old file in between (still named: review40d's
    retake let it be), and a third writer C, come after the removal, made a new lock file
    and took it at once, B holding the old one: two writers. The file is removed under the
    lock now: B retakes the new file by its name, and C waits for B. Real processes and
    flock; only the remover's removals are slowed (1 s each) to open the window."""
    bundle = tmp_path / "b.warm"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}

    def start(script: str, *args: object) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", script, str(bundle), *map(str, args)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)

    a = start(SLOW_REMOVER)
    assert a.stdout is not None and a.stdout.readline() == "removing b.warm\n"
    b = start(HOLDER, 10, 4)  # waits for A's lock, then holds it 4 s
    assert a.wait(timeout=20) == 0
    assert b.stdout is not None and b.stdout.readline() == "held\n"
    c = start(HOLDER, 1, 0)  # B holds the lock: C waits 1 s, and gives up
    out, _ = c.communicate(timeout=20)
    b.kill()
    b.wait()
    assert out == "waited\n", out
