"""warm when the machine misbehaves: a hangup (SIGHUP: a closed terminal, an ssh session
that drops) is answered as SIGTERM is, one line and exit 130 keeping what was stored,
never death by the signal leaving warm's temporary files; an interrupted compile leaves
none of the compiler's own temporary files in `TMPDIR`. The real CLI in a subprocess, a
real cc (behind a stand-in `WARM_CC` that marks where it is), real bundles.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import ROOT, Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, its commands forked)
from full_disk import in_private_mount
from memory_limit import ended_as_promised, stats_json_under
from test_reliability import compiler_wrapper
from test_remote import Store, http_store  # noqa: F401  (a fixture)

# A workload whose tune pass stores its kernels, then (where WARM_TEST_MARK names a file)
# says so there and waits to be stopped.
SLEEPS = """\
import os, time
from warmcli import Kernel
from warmcli.execution.process_mode import current_process_mode

DEVICE = "host"
KS = [Kernel(f"void k{i}(float *x) {{ x[0] += {i}.0f; }}", f"k{i}", "P") for i in range(4)]

def workload(rt):
    x = rt.buffer(4)
    for k in KS:
        rt.launch(k, x)
    rt.synchronize()
    if current_process_mode().value == "CompileAndAutotune" and "WARM_TEST_MARK" in os.environ:
        open(os.environ["WARM_TEST_MARK"], "w").close()
        time.sleep(120)
"""


def _start(warm: Warm, *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "warmcli", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warm.env, cwd=ROOT,
    )  # fmt: skip


def _wait_for(found: object, proc: subprocess.Popen[str], what: str) -> None:
    """Until `found()`, while `proc` runs: a generous bound (it costs nothing when things
    work; 120 s ran out once in 19 runs at a load of 17 on 2 cores: the 20,000-row
    merge had not made its temporary file yet, the run's wait not the merge at fault)."""
    deadline = time.monotonic() + 600
    while not found():  # type: ignore[operator]
        assert proc.poll() is None, f"warm ended before {what}: {proc.stderr.read()}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.02)


def _private_tmp(warm: Warm, tmp_path: Path) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    warm.env["TMPDIR"] = str(tmp)
    return tmp


@pytest.mark.parametrize("name", ["calendar.py", "sleeps.py"])
def test_a_hangup_to_warm_run_is_an_interrupt_that_keeps_what_was_stored(
    warm: Warm, tmp_path: Path, name: str
) -> None:
    """(`calendar.py` hides Python's module: the run makes a `warm-workers-*` stub folder,
    which a SIGHUP that killed warm by the signal left in TMPDIR.)"""
    tmp = _private_tmp(warm, tmp_path)
    path = tmp_path / name
    path.write_text(SLEEPS)
    mark, bundle = tmp_path / "mark", tmp_path / "b.warm"
    warm.env["WARM_TEST_MARK"] = str(mark)
    proc = _start(warm, "run", path, "--bundle", bundle)
    _wait_for(mark.exists, proc, "the tune pass")
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip() == "warm: interrupted: 4 kernel(s) and 0 tune(s) stored are kept", err
    assert not list(tmp.iterdir()), "warm left temporary files"
    assert len(warm.json("stats", bundle)["kernels"]) == 4
    warm.env.pop("WARM_TEST_MARK")
    again = warm("run", path, "--bundle", bundle)
    assert again.returncode == 0, again.stderr
    assert not list(tmp.iterdir())


@pytest.fixture(scope="module")
def big_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of 20,000 kernels and 20,000 tunes, built once per module: each test that
    reads one copies it (`_big`), so none sees another's leftovers."""
    return build_big(tmp_path_factory.mktemp("big") / "big.warm", 20000, 20000)


def _big(big_once: Path, tmp_path: Path) -> Path:
    return Path(shutil.copyfile(big_once, tmp_path / "big.warm"))


@pytest.fixture(scope="module")
def tunes_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle large in tunes only: 100 kernels and `PARALLEL_TUNES` (20,000) tunes, the
    count from which `warm verify`, `stats --json` and `diff` read the tunes in a pool of
    forked readers, built once per module and copied by each test (`_big`)."""
    from warmcli.bundle.checking import PARALLEL_TUNES

    return build_big(tmp_path_factory.mktemp("tunes") / "big.warm", 100, PARALLEL_TUNES)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_an_interrupted_merge_into_a_new_bundle_leaves_no_file(
    warm: Warm, tmp_path: Path, sig: signal.Signals, big_once: Path
) -> None:
    """A hangup killed `warm merge`, leaving its `.merge` file, journal and lock; an
    interrupt left the new bundle's lock: one line, exit 130, nothing left now."""
    big = _big(big_once, tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = _start(warm, "merge", big, "-o", out_dir / "m.warm")

    def merging() -> bool:
        return any(p.name.endswith(".merge") for p in out_dir.iterdir())

    _wait_for(merging, proc, "the merge's temporary file")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip() == "warm: interrupted", err
    assert not list(out_dir.iterdir())


def test_an_interrupted_compile_leaves_no_compiler_temporary_file(
    warm: Warm, tmp_path: Path
) -> None:
    """A compiler stopped mid compile (killed, as an interrupt stops every compiler) leaves
    the temporary files it made (gcc's `ccXXXXXX.s`) where its `TMPDIR` is: warm's own
    scratch folder, removed with it, never the user's TMPDIR."""
    tmp = _private_tmp(warm, tmp_path)
    started = tmp_path / "started"
    warm.env["WARM_CC"] = str(
        compiler_wrapper(
            tmp_path,
            f': > "$(mktemp "${{TMPDIR:-/tmp}}/ccXXXXXX.s")"; : > {started}; sleep 300',
        )
    )
    path = tmp_path / "sleeps.py"
    path.write_text(SLEEPS)
    proc = _start(warm, "run", path, "--bundle", tmp_path / "b.warm")
    _wait_for(started.exists, proc, "the compiler started")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=300)
    assert proc.returncode == 130
    assert not list(tmp.iterdir()), "a compiler's temporary file was left"


# A kernel whose source is larger than the tmpfs below: the compiler's scratch source
# (batch.c, in TMPDIR) cannot be written.
BIG_SOURCE = """\
from warmcli import Kernel

DEVICE = "host"
K = Kernel("/*" + "x" * 300_000 + "*/ void k(float *x) { x[0] += 1.0f; }", "k", "P")

def workload(rt):
    rt.launch(K, rt.buffer(4))
"""


def _on_small_tmpfs(
    warm: Warm, folder: str, size: str, command: str, listing: str = ""
) -> subprocess.CompletedProcess[str]:
    """`command` run with a tmpfs of `size` mounted on `folder` (a shell word), in a mount
    namespace of its own, then what is left in that folder listed (on stdout, or where
    `listing` sends it); skipped where no tmpfs can be mounted (not root)."""
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {folder} || exit 99; "
        f"{command}; rc=$?; ls -A {folder} {listing}; exit $rc"
    )
    proc = in_private_mount(script, warm.env, timeout=300)
    return proc


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_compile_whose_scratch_files_cannot_be_written_names_the_temporary_folder(
    warm: Warm, tmp_path: Path
) -> None:
    """A full TMPDIR (a small tmpfs, mounted in a mount namespace of the command's own)
    was said as the workload's own error, naming no folder: `workload raised during
    CompileAndAutotune: big.py:7: OSError: [Errno 28] No space left on device`."""
    tmp = _private_tmp(warm, tmp_path)
    path = tmp_path / "big.py"
    path.write_text(BIG_SOURCE)
    run = f"{sys.executable} -m warmcli run {path} --bundle {tmp_path / 'b.warm'}"
    proc = _on_small_tmpfs(warm, '"$TMPDIR"', "128k", run, ">&2")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()  # (and nothing left in TMPDIR: no line)
    assert f"the temporary folder {tmp}" in line, line
    assert "No space left on device" in line and "TMPDIR" in line, line
    assert "workload raised" not in line and "ScratchError" not in line, line  # the machine's


def test_what_a_refused_scratch_file_says_to_do_follows_why() -> None:
    """(Pure wording.) Too many open files is no folder's fault: a hint to set TMPDIR to
    a folder with room was wrong there."""
    from warmcli.backends.batch import scratch_refused

    def said(number: int) -> str:
        return str(scratch_refused(OSError(number, os.strerror(number))))

    assert said(errno.ENOSPC).endswith("set TMPDIR to a folder with room")
    assert said(errno.EROFS).endswith("set TMPDIR to a folder warm may write")
    emfile = said(errno.EMFILE)
    assert "TMPDIR" not in emfile and "ulimit -n" in emfile, emfile


def test_a_reader_pool_that_cannot_start_for_want_of_descriptors_never_hangs_warm(
    warm: Warm, tmp_path: Path, tunes_once: Path
) -> None:
    """`warm verify` of a large bundle under `ulimit -n 16` said `[Errno 24] Too many open
    files` and then hung forever at exit: the one worker forked before the pool's next pipe
    was refused waited for work that never came, and Python's exit waited for it. A pool
    that cannot start is given up (what it started is ended) and the caller reads the parts
    itself, as where a worker dies. (Large in tunes, the pool's threshold: its kernels do
    not start one.)"""
    big = _big(tunes_once, tmp_path)
    ends = []
    for megabytes in (50, 90, 130, 170):
        ends.append(ended_as_promised(stats_json_under(warm, big, megabytes), megabytes))
    assert 2 in ends, ends


def test_a_failed_merge_into_a_new_bundle_leaves_no_lock_file(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """As a failed first `warm run` leaves neither the bundle nor its lock: a merge into a
    new OUT past a file size limit (a full disk alike) left `OUT.lock` behind."""
    warm, good = made
    out = tmp_path / "out" / "m.warm"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "merge", good, "-o", out],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, preexec_fn=limit, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "nothing was merged" in proc.stderr, proc.stderr
    # nor the folder made for OUT (test_leftovers40b): no lock, no temporary file in it
    assert not out.parent.exists(), "a lock (or a temporary file, or the folder) was left"


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_failed_pull_into_a_new_bundle_leaves_no_lock_file(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A pull into a new PATH on a full disk (a small tmpfs, in a mount namespace of the
    command's own) left `PATH.lock` behind."""
    warm, good = made
    store, base, _ = http_store
    store.files["/b.warm"] = good.read_bytes()
    dest = tmp_path / "dest"
    dest.mkdir()
    pull = f"{sys.executable} -m warmcli pull {base}/b.warm {dest / 'new.warm'}"
    proc = _on_small_tmpfs(warm, str(dest), "64k", pull)
    assert proc.returncode == 2, proc.stderr
    assert "nothing pulled" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "", "left in PATH's folder: " + proc.stdout


def test_a_sigkilled_warm_run_leaves_no_stub_folder_its_worker_outlived(
    warm: Warm, tmp_path: Path
) -> None:
    """`kill -9` of `warm run` (its worker then stops, by the parent-death signal, and
    stores what it had) left the `warm-workers-*` stub folder in TMPDIR: removed by the
    process that made it at its exit, which SIGKILL skips. The worker removes it then."""
    tmp = _private_tmp(warm, tmp_path)
    path = tmp_path / "calendar.py"
    path.write_text(SLEEPS)
    mark, bundle = tmp_path / "mark", tmp_path / "b.warm"
    warm.env["WARM_TEST_MARK"] = str(mark)
    proc = _start(warm, "run", path, "--bundle", bundle)
    _wait_for(mark.exists, proc, "the tune pass")
    assert [p.name[:13] for p in tmp.iterdir()] == ["warm-workers-"]
    proc.kill()
    proc.communicate(timeout=300)
    deadline = time.monotonic() + 30
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list(tmp.iterdir()), "the stub folder was left"
    warm.env.pop("WARM_TEST_MARK")
    assert warm("run", path, "--bundle", bundle).returncode == 0
    assert len(warm.json("stats", bundle)["kernels"]) == 4
