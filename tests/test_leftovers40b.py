"""Small wrongs noticed at stop 40 and left, each now right: a pull into a folder not
there yet (made as `merge -o` makes OUT's, its own folder only), a merge or pull that the
disk refuses into a new folder (no empty folder left, and no "OUT is unchanged" of an OUT
that never was). The real CLI in a subprocess, real SQLite files, the real C compiler; a
full disk is `RLIMIT_FSIZE` (`ulimit -f`), as in test_disk40.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import EXAMPLES, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from full_disk import in_private_mount, limited, one_line
from test_remote import Store, http_store  # noqa: F401  (the fixture)

from warmcli.kernel_parts import key_of


def test_a_pull_makes_the_bundles_own_folder_as_merge_does(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    """`warm pull URL missing/new.warm` said "cannot take the write lock ...: No such file
    or directory" where `warm merge -o missing/new.warm` makes the folder. One rule now, for
    every command writing a new bundle path: its own folder is made, no more (a mistyped
    path above it is one line, and nothing is made)."""
    warm, good = made
    store, base, _ = http_store
    store.files["/b.warm"] = good.read_bytes()
    target = tmp_path / "missing" / "new.warm"
    proc = warm("pull", f"{base}/b.warm", target)
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes() == good.read_bytes()
    deeper = tmp_path / "x" / "y" / "new.warm"
    line = one_line(warm("pull", f"{base}/b.warm", deeper))
    assert "no directory" in line and "creates only the bundle's own directory" in line, line
    assert not (tmp_path / "x").exists()


def test_a_merge_the_disk_refuses_into_a_new_folder_leaves_nothing(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm merge -o sub/new.warm` on a full disk said the never-existing OUT "is
    unchanged" and left the empty `sub/` it made behind. Now it says OUT was not made, and
    the folder it made is gone."""
    warm, good = made
    out = tmp_path / "sub" / "new.warm"
    line = one_line(limited(warm, 8 * 1024, "merge", good, "-o", out))
    assert "unchanged" not in line and f"{out} was not made" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_pull_the_disk_refuses_into_a_new_folder_leaves_nothing(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The same for a pull: its copy into a folder it made, refused by the disk, leaves
    neither the folder nor its lock, and says no PATH was made."""
    warm, good = made
    store, base, _ = http_store
    store.files["/b.warm"] = good.read_bytes()
    assert warm("check", f"{base}/b.warm").returncode == 0  # the download itself fits
    out = tmp_path / "sub" / "new.warm"
    line = one_line(limited(warm, 8 * 1024, "pull", f"{base}/b.warm", out))
    assert "nothing pulled" in line and "as it was" not in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_run_the_disk_refuses_into_a_new_folder_leaves_no_empty_folder(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm run -b sub/b.warm` on a full disk removed the bundle it could not make and its
    lock, but left the empty `sub/` it made: the same rule as a merge's and a pull's now."""
    warm, _ = made
    out = tmp_path / "sub" / "b.warm"
    line = one_line(limited(warm, 8 * 1024, "run", EXAMPLES / "matmul_host.py", "-b", out))
    assert "a write to the disk failed" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


FAT = r'''"""Host kernels with fat binaries (a 48 KiB table each): blob-heavy, as cubins are."""
import os

from warmcli import Kernel, Runtime

DEVICE = "host"
SOURCE = """
static const unsigned int table[12288] = {ID, 1, 2, 3};
void step(float *x, int n) { for (int j = 0; j < n; j++) x[j] += (float)table[j % 12288]; }
"""
FIRST = int(os.environ["WARM_FAT_FIRST"])  # one batch (one binary) of 30 per run
IDS = range(FIRST, FIRST + 30)
KERNELS = [Kernel(SOURCE, "step", "Pi", defines={"ID": i}, name=f"fat{i}") for i in IDS]


def workload(rt: Runtime) -> None:
    x = rt.buffer(64, "float32")
    for k in KERNELS:
        rt.launch(k, x, 64)
'''


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_clean_on_a_nearly_full_disk_commits_its_removal_and_vacuums_later(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm clean` on a full disk could free nothing: SQLite (built with secure_delete on)
    zeroes every page a removal frees, so the removal's journal held each freed binary's
    pages, about what it removes ("the disk is full: nothing was written"). Refused so,
    the removal is made again with freed pages not zeroed (`secure_delete = FAST`): it
    journals only the pages it rewrites, and commits with 1 MiB free; its vacuum, which
    needs about the size left, is refused (the removal kept, said so). And no later clean
    vacuumed the file (it had nothing to remove): now one does, where the file holds free
    pages and the disk room."""
    (tmp_path / "fat.py").write_text(FAT)
    bundle = tmp_path / "b.warm"
    for first in ("0", "30", "60"):  # three binaries of 1.5 MB: --max-size 2M keeps one
        warm.env["WARM_FAT_FIRST"] = first
        assert warm("run", tmp_path / "fat.py", "-b", bundle, "-q").returncode == 0
    disk = tmp_path / "disk"
    disk.mkdir()
    size = bundle.stat().st_size // 1024 + 1024  # KiB: the bundle, and 1 MiB free
    clean = f"{sys.executable} -m warmcli clean {disk}/b.warm --max-size 2M"
    script = (
        f"mount -t tmpfs -o size={size}k tmpfs {disk} || exit 99; cp {bundle} {disk}; "
        f"{clean} 2>&1; echo rc=$?; stat -c size=%s {disk}/b.warm; "
        f"mount -o remount,size={2 * size}k {disk}; {clean} 2>&1; echo rc=$?; "
        f"stat -c size=%s {disk}/b.warm"
    )
    proc = in_private_mount(script, warm.env, timeout=120)
    said, full, roomy = proc.stdout.split("rc=")  # each clean's lines, then its exit and size
    assert "(kept), but the file was not vacuumed: the disk is full" in said, said
    assert full.startswith(f"2\nsize={bundle.stat().st_size}\n"), full  # free pages inside it
    assert roomy.startswith("0\n") and "clean: removed 0 kernel(s)" in full, full + roomy
    left = int(roomy.rsplit("size=", 1)[1])
    assert left < bundle.stat().st_size // 2, (left, roomy)


def test_checks_line_under_a_long_table_says_what_json_holds(warm: Warm, tmp_path: Path) -> None:
    """Over 1,000 unservable entries, `warm check` said "the first 1,000 of 1,200 are
    grouped above (warm check --json lists them)": untrue, `--json` names the same first
    1,000 (and counts them all). Now the line says so. 1,200 unservable: 1,000 kernels and
    200 tunes built for sm_80 and sm_90, checked for an sm_75 GPU (`build_big`: written
    with SQL; a signed bundle that a run of 1,010 compiled kernels added to, unsigned, under
    WARM_TRUSTED_KEYS, was made to the same end: test_readme_trial18 checks that case)."""
    bundle = build_big(tmp_path / "s.warm", 1000, 200)
    doc = json.loads(warm("check", bundle, "--arch", "sm_75", "--json").stdout)
    assert (len(doc["unservable"]), doc["unservable_count"]) == (1000, 1200), doc
    text = warm("check", bundle, "--arch", "sm_75").stdout
    said = "the first 1,000 of 1,200 are grouped above (warm check --json names the same 1,000:"
    assert said in text and "lists them" not in text, text[-400:]


HOST_SCALE = """from warmcli import Kernel, Runtime

DEVICE = "host"
SOURCE = "void scale(float *x, int n) { for (int j = 0; j < n; j++) x[j] *= 2.0f; }"
K = Kernel(SOURCE, "scale", "Pi")


def workload(rt: Runtime) -> None:
    rt.launch(K, rt.buffer(64, "float32"), 64)
"""
CUDA_SCALE = """from warmcli import Kernel, Runtime

DEVICE = "cuda"
SOURCE = 'extern "C" __global__ void scale(float *x, int n) { x[threadIdx.x % n] *= 2.0f; }'
K = Kernel(SOURCE, "scale", "Pi", language="cuda")


def workload(rt: Runtime) -> None:
    rt.launch(K, rt.buffer(64, "float32"), 64, grid=1, block=64)
"""


def test_check_and_stats_tell_kernels_of_one_name_apart_by_one_rule(
    warm: Warm, tmp_path: Path
) -> None:
    """A host kernel and a CUDA kernel named `scale` (two sources): `warm stats` grouped
    sources by device, arch and label, so showed no `source` column (their device tells
    them apart), while `warm check` grouped by label alone across devices and added one.
    Both follow `sources_apart` now. Both unservable here: the CUDA one built for sm_90
    (checked for sm_80), the host one added unsigned to a signed bundle."""
    (tmp_path / "host.py").write_text(HOST_SCALE)
    (tmp_path / "cuda.py").write_text(CUDA_SCALE)
    bundle, key = tmp_path / "b.warm", tmp_path / "k.key"
    assert warm("keygen", key).returncode == 0
    made = warm("run", tmp_path / "cuda.py", "--arch", "sm_90", "--no-ptx", "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr
    assert warm("sign", bundle, "--key", key).returncode == 0
    assert warm("run", tmp_path / "host.py", "-b", bundle, "-q").returncode == 0
    stats = warm("stats", bundle)
    assert stats.returncode == 0 and " source " not in stats.stdout, stats.stdout
    warm.env["WARM_TRUSTED_KEYS"] = f"{key}.pub"
    check = warm("check", bundle, "--arch", "sm_80")
    assert check.returncode == 1 and "2 not servable here" in check.stdout, check.stdout
    assert " source " not in check.stdout, check.stdout


def _hostile_ptx_rows(bundle: Path, count: int) -> None:
    """`count` PTX rows added to `bundle` as a hostile hand would: each a copy of its PTX
    row for another kernel (its content hash, and the key that gives, made up), its symbol
    naming no cubin of that kernel."""
    conn = sqlite3.connect(bundle)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(kernels)")]
    query = "SELECT * FROM kernels WHERE arch LIKE 'compute_%'"
    row = dict(zip(columns, conn.execute(query).fetchone(), strict=True))
    parts, rows = json.loads(row["components"]), []
    for i in range(count):
        parts["kernel"] = content = hashlib.sha256(b"%d" % i).hexdigest()
        made = dict(
            row,
            key=key_of(content, row["arch"], "", row["toolchain"]),
            symbol=f"warm_{content[-16:]}_{row['entry']}",
            components=json.dumps(parts, sort_keys=True),
            label=f"hostile{i}",
        )
        rows.append(tuple(made[c] for c in columns))
    conn.executemany(f"INSERT INTO kernels VALUES ({','.join('?' * len(columns))})", rows)
    conn.commit()
    conn.close()


def test_ptx_rows_naming_no_cubin_leave_every_other_rows_verdict_its_own(
    warm: Warm, tmp_path: Path
) -> None:
    """A PTX row whose symbol names no cubin of its kernel (a hostile bundle's) is each
    judged so, and however many come before it, a real PTX row built beside another SM's
    cubin (`--arch sm_80 --ptx compute_90`) is found and served by JIT: a search of every
    SM is never cut short by what rows came before (a process-wide budget of such searches
    had judged it corrupt past 256, and a merge would have dropped it). What such rows cost
    is for `make bench`, not this test."""
    (tmp_path / "cuda.py").write_text(CUDA_SCALE)
    bundle = tmp_path / "b.warm"
    made = warm(
        "run", tmp_path / "cuda.py", "--arch", "sm_80", "--ptx", "compute_90", "-b", bundle, "-q"
    )
    assert made.returncode == 0, made.stderr
    _hostile_ptx_rows(bundle, 600)
    proc = warm("check", bundle, "--arch", "sm_100", "--json")
    doc = json.loads(proc.stdout)
    assert (doc["unservable_count"], doc["ptx_jit_count"]) == (600, 1), doc["unservable"][:2]
    assert all("is the symbol of no cubin" in m["detail"] for m in doc["unservable"])
