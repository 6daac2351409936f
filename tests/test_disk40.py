"""A full disk, a read-only disk: each refusal is one line and a non-zero exit, and the
bundle already stored is left byte for byte as it was, with no journal, `-wal` or
temporary file beside it. A full disk is `RLIMIT_FSIZE` here (`ulimit -f`, in the child:
SQLite meets EFBIG where a full tmpfs gives it ENOSPC, and leaves the same state), so the
tests run unprivileged; the real CLI in a subprocess (each refused command started, under
its limit, strace or mount namespace; the inputs it starts from and the verdicts read after
it a fork of a process that imported the CLI once, `tests/forked_cli.py`), real SQLite
files, the real C compiler. The bundle's bytes and the folder's listing are looked at
before any other warm command opens the bundle (a read rolls a journal left behind back,
and hides it).
"""

from __future__ import annotations

import hashlib
import resource
import shutil
import subprocess
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from big_bundle import build_big
from conftest import EXAMPLES, ROOT, Warm, nvrtc_release_or_skip
from forked_cli import ForkedWarm
from full_disk import in_private_mount, limited, one_line
from test_remote import Store, http_store  # noqa: F401  (the fixture)

from warmcli.bundle.remote import cache_dir


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def forty(
    made: tuple[Warm, Path], tmp_path_factory: pytest.TempPathFactory, forking_servers: Any
) -> Path:
    """`b.warm` (and the `b.warm.lock` its run leaves) of `warm run` of 40 of the many
    kernels example, in `made`'s warm home, once for the module (a fork of a process that
    imported the CLI once: it only makes the input): what `_forty` copies for each test
    that starts from it, which then writes only its own copy."""
    folder = tmp_path_factory.mktemp("forty")
    warm = ForkedWarm(Warm(dict(made[0].env, WARM_EXAMPLE_KERNELS="40")), forking_servers)
    workload = EXAMPLES / "many_kernels_host.py"
    assert warm("run", workload, "-b", folder / "b.warm", "-q").returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == ["b.warm", "b.warm.lock"]
    return folder


def _forty(forty: Path, bundle: Path) -> None:
    """`bundle` as `warm run` of the 40 kernels leaves it (`forty`'s, copied with its lock)."""
    for name in ("b.warm", "b.warm.lock"):
        shutil.copy(forty / name, bundle.with_name(bundle.name + name[len("b.warm") :]))


def test_a_write_the_disk_refuses_mid_transaction_leaves_no_journal(
    made: tuple[Warm, Path], tmp_path: Path, forty: Path
) -> None:
    """A re-warm whose transaction met a full disk (here a size limit) said "nothing was
    written, the bundle is unchanged" and left the bundle grown, with a hot `-journal`
    beside it: SQLite had stopped the transaction in its error state, and rolls such a
    journal back only at the connection's next read, which never came. Now the bundle is
    its old bytes and no journal is left at exit."""
    warm = Warm(dict(made[0].env))
    folder = tmp_path / "d"
    folder.mkdir()
    bundle = folder / "b.warm"
    workload = EXAMPLES / "many_kernels_host.py"
    warm.env["WARM_EXAMPLE_KERNELS"] = "40"
    _forty(forty, bundle)
    before = _digest(bundle)
    # (352 KiB of 40 kernels, 432 KiB of 100, 864 KiB of 400, measured (stop 49): 120 pass
    # the 400 KiB limit at commit, some 60 KiB past it, within SQLite's page cache, which
    # SQLite rolls back itself: the journal left by a cache spilled mid-transaction is
    # test_review43h's, which fails without rolled_back. 400 kernels passed a 450 KiB limit
    # as surely, compiling 280 kernels more; the line asserted below says the limit was met)
    env = {"WARM_EXAMPLE_KERNELS": "120"}
    proc = limited(warm, 400 * 1024, "run", workload, "-b", bundle, "-q", env=env)
    line = one_line(proc)
    assert "nothing was written, the bundle is unchanged" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["b.warm", "b.warm.lock"]
    assert _digest(bundle) == before


def test_a_remote_copy_whose_memo_cannot_be_kept_is_served_not_a_bare_errno(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
    forked: Any,
) -> None:
    """A download published in WARM_HOME whose ETag memo (`meta.json`) could not be written
    after it (a full disk: the copy took the last bytes; here a folder in its place, as
    unprivileged as that gets) ended `warm check URL` with `warm: error: [Errno 28] No
    space left on device` (naming no file, nor the URL), and a production process with a
    bare `OSError` traceback. The copy is checked and whole: it is served; the next fetch,
    finding no memo of it, downloads it again."""
    warm, good = made
    store, base, _ = http_store
    store.files["/b.warm"] = good.read_bytes()
    url = f"{base}/b.warm"
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"))
    folder = cache_dir(url).relative_to(cache_dir(url).parents[1])  # remote/<hash>
    meta = tmp_path / "home" / folder / "meta.json"
    (meta / "x").mkdir(parents=True)  # os.replace onto it fails, as a write to a full disk
    proc = forked(Warm(env))("check", url)
    assert proc.returncode == 0, proc.stderr
    assert "every entry is servable here" in proc.stdout, proc.stdout
    assert "Errno" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in meta.parent.iterdir()) == ["bundle.warm", "lock", "meta.json"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_remote_copy_that_fills_warm_home_is_served(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The same on a real full disk: WARM_HOME a tmpfs the size of the bundle (mounted in
    a mount namespace of the command's own; skipped where none can be mounted)."""
    warm, good = made
    store, base, _ = http_store
    store.files["/b.warm"] = good.read_bytes()
    home = tmp_path / "home"
    home.mkdir()
    check = f"{sys.executable} -m warmcli check {base}/b.warm"
    script = f"mount -t tmpfs -o size={good.stat().st_size} tmpfs {home} || exit 99; {check}"
    proc = in_private_mount(script, dict(warm.env, WARM_HOME=str(home)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "every entry is servable here" in proc.stdout, proc.stdout


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (fault injection)")
def test_a_run_whose_last_used_times_the_disk_refuses_keeps_and_says_what_it_stored(
    made: tuple[Warm, Path], tmp_path: Path, forty: Path, forked: Any
) -> None:
    """`warm run` stores what it built (one transaction), then moves the last-used times of
    what the bundle served (another). The disk refusing that second one (a full disk a
    moment later, a failing one: here ENOSPC injected into its journal's sync by strace)
    said "nothing was written, the bundle is unchanged", exit 2, over a bundle that held
    every new kernel. As production's write-back does, losing only those times is no
    failure once the store is committed: exit 0, and it says what it stored."""
    warm = Warm(dict(made[0].env, WARM_EXAMPLE_KERNELS="40"))
    bundle = tmp_path / "b.warm"
    workload = EXAMPLES / "many_kernels_host.py"
    _forty(forty, bundle)
    journal = f"{bundle}-journal"  # its 3rd sync: the 2nd transaction's (2 syncs each)
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", journal, "-e", "trace=fdatasync"]
    strace += ["-e", "inject=fdatasync:error=ENOSPC:when=3"]
    proc = subprocess.run(
        [*strace, sys.executable, "-m", "warmcli", "run", workload, "-b", bundle, "-q",
         "--no-verify"],
        capture_output=True, text=True, env=dict(warm.env, WARM_EXAMPLE_KERNELS="60"),
        cwd=ROOT, timeout=300,
    )  # fmt: skip
    if proc.stderr.startswith("strace:"):
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()}")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "stored 20 new kernel(s)" in proc.stdout, proc.stdout
    assert len(forked(warm).json("stats", bundle)["kernels"]) == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.warm", "b.warm.lock"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (fault injection)")
def test_a_run_whose_signature_the_disk_refuses_says_what_it_stored_unsigned(
    made: tuple[Warm, Path], tmp_path: Path, forty: Path, forked: Any
) -> None:
    """`warm run -k KEY` stores, then signs in a transaction of its own. The disk refusing
    the signature (ENOSPC injected into that transaction's journal sync) said "nothing was
    written, the bundle is unchanged" over a bundle holding the new entries, unsigned. Now
    exit 2 says they are stored (kept) and not signed, and to sign again."""
    warm = Warm(dict(made[0].env, WARM_EXAMPLE_KERNELS="40"))
    bundle, key = tmp_path / "b.warm", tmp_path / "k.pem"
    assert forked(warm)("keygen", key).returncode == 0
    workload = EXAMPLES / "many_kernels_host.py"
    _forty(forty, bundle)
    journal = f"{bundle}-journal"  # syncs 1-2: the store, 3-4: last-used times, 5: signing
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", journal, "-e", "trace=fdatasync"]
    strace += ["-e", "inject=fdatasync:error=ENOSPC:when=5"]
    proc = subprocess.run(
        [*strace, sys.executable, "-m", "warmcli", "run", workload, "-b", bundle, "-q",
         "--no-verify", "-k", key],
        capture_output=True, text=True, env=dict(warm.env, WARM_EXAMPLE_KERNELS="60"),
        cwd=ROOT, timeout=300,
    )  # fmt: skip
    if proc.stderr.startswith("strace:"):
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()}")
    line = one_line(proc)
    assert "nothing was written" not in line and "unchanged" not in line, line
    assert "stored 24 new entries (kept)" in line and "not signed" in line, line
    assert "warm sign" in line, line
    assert len(forked(warm).json("stats", bundle)["kernels"]) == 60


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (fault injection)")
def test_a_run_whose_second_devices_store_the_disk_refuses_says_what_the_first_kept(
    made: tuple[Warm, Path], tmp_path: Path, forked: Any
) -> None:
    """A run over two devices (`--arch sm_80 --arch sm_90`, compile-only) stores each
    device's entries in a transaction of its own. The disk refusing the second (ENOSPC
    injected into its journal's sync) said "nothing was written, the bundle is unchanged"
    over a new bundle holding the first device's 8 kernels and 6 tunes. Now it says
    what the earlier store kept, and that the rest is not stored."""
    nvrtc_release_or_skip()
    warm, bundle = Warm(dict(made[0].env)), tmp_path / "c.warm"
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", f"{bundle}-journal"]
    strace += ["-e", "trace=fdatasync", "-e", "inject=fdatasync:error=ENOSPC:when=3"]
    proc = subprocess.run(
        [*strace, sys.executable, "-m", "warmcli", "run", EXAMPLES / "saxpy_cuda.py",
         "--arch", "sm_80", "--arch", "sm_90", "-b", bundle, "-q", "--compiler", "nvrtc"],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    if proc.stderr.startswith("strace:"):
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()}")
    line = one_line(proc)
    assert "nothing was written" not in line and "unchanged" not in line, line
    assert "stored 8 kernel(s) and 6 tune(s) (kept)" in line and "the rest is not" in line
    stats = forked(warm).json("stats", bundle)
    assert (len(stats["kernels"]), len(stats["tunes"])) == (8, 6)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (fault injection)")
def test_a_journal_the_disk_will_not_delete_is_no_corrupt_bundle(
    made: tuple[Warm, Path], tmp_path: Path, forty: Path
) -> None:
    """Deleting the rollback journal is a transaction's commit. A disk refusing it (a file
    system remounted read-only after an error: EROFS injected into the unlink by strace)
    was said as "corrupt bundle (disk I/O error)": the bundle is sound, and its write,
    never committed, is rolled back. Now it is a write the disk refused, as any other."""
    warm = Warm(dict(made[0].env, WARM_EXAMPLE_KERNELS="40"))
    bundle = tmp_path / "b.warm"
    workload = EXAMPLES / "many_kernels_host.py"
    _forty(forty, bundle)
    before = _digest(bundle)
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", f"{bundle}-journal"]
    strace += ["-e", "trace=unlink", "-e", "inject=unlink:error=EROFS:when=1"]
    proc = subprocess.run(
        [*strace, sys.executable, "-m", "warmcli", "run", workload, "-b", bundle, "-q"],
        capture_output=True, text=True, env=dict(warm.env, WARM_EXAMPLE_KERNELS="60"),
        cwd=ROOT, timeout=300,
    )  # fmt: skip
    if proc.stderr.startswith("strace:"):
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()}")
    line = one_line(proc)
    assert "corrupt" not in line and "a write to the disk failed" in line, line
    assert "the bundle is unchanged" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.warm", "b.warm.lock"]
    assert _digest(bundle) == before


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (fault injection)")
def test_a_clean_whose_vacuum_the_disk_refuses_leaves_no_journal(
    made: tuple[Warm, Path], tmp_path: Path, forty: Path, forked: Any
) -> None:
    """`warm clean` removes (one transaction), then vacuums. The disk refusing the vacuum's
    commit (EIO injected into its journal's unlink) left `b.warm-journal` beside the bundle
    at exit, hot: SQLite's error state, as for a store (the next open rolled it back). Now
    it is rolled back before the one line that says the removal is kept."""
    warm = Warm(dict(made[0].env, WARM_EXAMPLE_KERNELS="40"))
    bundle = tmp_path / "b.warm"
    _forty(forty, bundle)
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", f"{bundle}-journal"]
    strace += ["-e", "trace=unlink", "-e", "inject=unlink:error=EIO:when=2"]
    proc = subprocess.run(
        [*strace, sys.executable, "-m", "warmcli", "clean", bundle, "--max-size", "1K"],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    if proc.stderr.startswith("strace:"):
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()}")
    line = one_line(proc)
    assert "(kept), but the file was not vacuumed" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.warm", "b.warm.lock"]
    assert forked(warm)("verify", bundle, "-q").returncode == 0


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_full_temporary_folder_is_named_not_the_bundles_disk(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm verify` reads a large bundle with SQLite sorting in its temporary files (in
    TMPDIR). A full TMPDIR said "<bundle>: the disk is full: nothing was written, the
    bundle is unchanged": the bundle's disk, which had room. It names the folder that is
    full and what to do (a tmpfs mounted in a mount namespace of the command's own, filled;
    skipped where none can be mounted). The bundle: 10,000 kernels and 100 tunes, built
    with SQL (`build_big`; a `warm run` of 2,000 host kernels was built to the same end),
    over twice the size from which verify's sort spills to TMPDIR here (5,000 did, 2,000
    not)."""
    warm = Warm(dict(made[0].env))
    bundle, tmp = build_big(tmp_path / "big.warm", 10_000, 100), tmp_path / "tmp"
    tmp.mkdir()
    verify = f"{sys.executable} -m warmcli verify {bundle} -q"
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {tmp} || exit 99; "
        f"head -c 65536 /dev/zero > {tmp}/filler 2>/dev/null; {verify}"
    )
    proc = in_private_mount(script, dict(warm.env, TMPDIR=str(tmp)), timeout=120)
    line = one_line(proc)
    assert f"the disk is full where SQLite keeps its temporary files ({tmp}" in line, line
    assert "set TMPDIR to a folder with room" in line, line


def test_a_write_back_bundle_the_disk_will_not_make_leaves_no_lock(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Production writing back (WARM_BUNDLE_WRITE=1) into a bundle not there yet makes it at
    the first `runtime()`. The disk refusing it (here a file size limit) raised the one-line
    `BundleError` as documented, but left `new.warm.lock` behind: `warm run`'s first run
    removes the lock of a bundle it could not make, and so does this now."""
    folder = tmp_path / "d"
    folder.mkdir()
    code = (
        "import warmcli\n"
        "try:\n    warmcli.runtime('host')\n"
        "except warmcli.BundleError as exc:\n    print(exc)\n"
    )
    env = dict(made[0].env, WARM_BUNDLE=str(folder / "new.warm"), WARM_BUNDLE_WRITE="1")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=120, preexec_fn=cap,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "a write to the disk failed" in proc.stdout, proc.stdout + proc.stderr
    assert list(folder.iterdir()) == []


def test_a_key_pair_the_disk_cannot_hold_is_not_left_half_made(
    made: tuple[Warm, Path], tmp_path: Path, forked: Any
) -> None:
    """`warm keygen KEY` on a full disk (here a file size limit of 64 bytes: the private key
    is larger) said `warm: error: [Errno 27] File too large` (no file named) and left KEY
    empty, so every later `warm keygen KEY` refused it ("exists; keygen never overwrites a
    key") and a run's `-k KEY` could not read it. Now one line names the file, and no file
    of the pair is left."""
    warm = made[0]
    key = tmp_path / "k.pem"
    line = one_line(limited(warm, 64, "keygen", key))
    assert f"{key}: cannot write key" in line, line
    assert list(tmp_path.iterdir()) == []
    assert forked(warm)("keygen", key).returncode == 0  # and with room, the pair is made
