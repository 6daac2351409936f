"""Review of the Dask/fleet merges (fleet40, dask40b): a `warm run --dask` re-run must
leave its bundle as a local re-run leaves it, send each shard only its part, and reach
every scheduler Dask's own client reaches (review40b).

Real parts only: the CLI in subprocesses, the test process's shared real local Dask cluster
(two worker processes on 127.0.0.1, `tests/dask_cluster.py`) and one of TLS of its own, the
system cc, real SQLite files, bundles of format 2 as test_format3 writes them. The one
stand-in: tunes made pending by rewriting their rows with warm's own row writer, as a
GPU-less pre-build (`--arch`) stores them, which this machine (no GPU) cannot make of a
host workload otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from dask_cluster import SharedCluster, scratch_in
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_format3 import _format2, _tune, sign_as_format2
from test_signed_migration import _signed_format2

from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.signing import _raw_public, load_private_key
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_row import interner, tune_values
from warmcli.warming.fanout import fan_out
from warmcli.warming.seeds import shard_seeds

distributed = pytest.importorskip("distributed")

MATMUL = EXAMPLES / "matmul_host.py"


@pytest.fixture(scope="module")
def scheduler(shared_cluster: SharedCluster) -> Iterator[str]:
    with shared_cluster.using() as address:
        yield address


def _tunes(warm: Warm, bundle: Path) -> list[tuple[str, str | None]]:
    return sorted((t["status"], t["pick"]) for t in warm.json("stats", bundle)["tunes"])


def _make_pending(path: Path) -> None:
    """Every tune of the bundle at `path` rewritten as a GPU-less pre-build stores it:
    pending, no pick, its candidates pending, never measured."""
    with Bundle.open(path) as bundle:
        tunes = list(bundle.each_tune(order=AS_STORED))
    conn = sqlite3.connect(path)
    with conn:
        intern = interner(conn, str(path))
        for tune in tunes:
            waiting = tuple(
                replace(c, status="pending", seconds=None, samples=()) for c in tune.candidates
            )
            pending = replace(
                tune, status="pending", pick=None, candidates=waiting, seconds=0.0, measured_at=0.0
            )
            conn.execute(
                "INSERT OR REPLACE INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                tune_values(pending, intern, 0.0),
            )
    conn.close()


def test_a_dask_rerun_measures_the_tunes_a_gpu_less_prebuild_left_pending(
    warm: Warm, scheduler: str, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A bundle pre-built without a GPU holds its tunes pending; the README says `warm run`
    on a machine that can measure them measures them. Locally it does. With `--dask` the
    shards measured them (each was sent its part, the pending tune in it), but the merge
    kept the bundle's own tune over every shard's (`as_run`: a held tune is a hit), so the
    bundle stayed pending and the run's own verify pass failed (exit 1: '3 tune(s) measured,
    not in the bundle'). A measured tune now replaces a pending one held, as locally."""
    bundle, local = host_bundle(tmp_path / "b.warm"), tmp_path / "l.warm"  # MATMUL's, warmed
    _make_pending(bundle)
    assert {s for s, _ in _tunes(warm, bundle)} == {"pending"}
    shutil.copy(bundle, local)
    here = warm("run", MATMUL, "-b", local, "-q")
    assert here.returncode == 0, here.stderr
    fanned = warm("run", MATMUL, "-b", bundle, "-q", "--dask", scheduler)
    assert fanned.returncode == 0, fanned.stdout + fanned.stderr
    assert "stored 0 new kernel(s) and 3 new tune(s)" in fanned.stdout
    statuses = [{s for s, _ in _tunes(warm, b)} for b in (bundle, local)]
    assert statuses == [{"measured"}, {"measured"}]
    again = warm("run", MATMUL, "-b", bundle, "-q", "--dask", scheduler)  # a hit now: kept
    assert again.returncode == 0 and "stored 0 new kernel(s) and 0 new tune(s)" in again.stdout


def _partly_signed_format2(base: Path, warm: Warm) -> tuple[Path, Path]:
    """A format-2 bundle warm 2 signed, then given a tune no key signed."""
    path, key = base / "two.warm", base / "key"
    _format2(path, [_tune(0), _tune(1)])
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO manifest VALUES (?, ?)",
            [("warm_version", "2.0"), ("created", "1.0"), ("updated", "1.0")],
        )
    assert warm("keygen", key).returncode == 0
    private = load_private_key(key)
    sign_as_format2(path, private, _raw_public(private.public_key()))
    _format2(base / "extra.warm", [_tune(2)])
    with sqlite3.connect(base / "extra.warm") as extra:
        row = extra.execute("SELECT * FROM tunes").fetchone()
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO tunes VALUES ({', '.join('?' * len(row))})", row)
    return path, key


def _unsigned(warm: Warm, path: Path) -> list[str]:
    """The lines of `warm verify` naming rows no trusted key signed."""
    said = warm("verify", path)
    lines = said.stdout.splitlines()
    return [ln.split(": ")[-1] for ln in lines if "not signed by a trusted key" in ln]


def test_a_dask_run_under_trusted_keys_signs_no_row_they_did_not_sign_of_an_older_format(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """`warm run --dask --key K` under WARM_TRUSTED_KEYS signs what they signed and what the
    run added (the README). Into a bundle of format 2 holding a tune no trusted key signed,
    it signed that tune too ('covers 20 of 20 row(s)'): `run_signs` told the rows the bundle
    held by their hashes as format 2 stores them, and the merge writes format 3, so every
    held row looked new. A local run leaves that tune unsigned; now `--dask` does too."""
    plain = warm  # (conftest's: no WARM_ variable but WARM_HOME in tmp_path; forked)
    path, key = _partly_signed_format2(tmp_path, plain)
    local = tmp_path / "local.warm"
    shutil.copy(path, local)
    trusted = plain.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    before = _unsigned(trusted, path)
    assert before == ["tunes 53d183f6dc1bf059"]
    here = trusted("run", MATMUL, "-b", local, "--key", key, "-q")
    assert here.returncode == 0, here.stderr
    assert _unsigned(trusted, local) == before
    fanned = trusted("run", MATMUL, "-b", path, "--key", key, "-q", "--dask", scheduler)
    assert fanned.returncode == 0, fanned.stdout + fanned.stderr
    assert _unsigned(trusted, path) == before


def test_under_trusted_keys_a_pending_tune_a_shard_measured_is_signed_as_the_runs(
    warm: Warm, scheduler: str, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A tune the bundle held pending and unsigned, measured by a shard, is what the run
    added: `--key` signs it, as a local run signs what it stores (left unsigned, it was
    not served under the trusted keys and the run's verify pass measured it again)."""
    plain = warm  # (conftest's: no WARM_ variable but WARM_HOME in tmp_path; forked)
    bundle, local, key = host_bundle(tmp_path / "b.warm"), tmp_path / "l.warm", tmp_path / "key"
    assert plain("keygen", key).returncode == 0  # (the bundle: MATMUL's, warmed)
    assert plain("sign", bundle, "--key", key).returncode == 0
    _make_pending(bundle)  # its tunes no longer signed
    shutil.copy(bundle, local)
    trusted = plain.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    assert len(_unsigned(trusted, bundle)[0].split(", ")) == 3
    here = trusted("run", MATMUL, "-b", local, "--key", key, "-q")
    assert here.returncode == 0, here.stdout + here.stderr
    fanned = trusted("run", MATMUL, "-b", bundle, "--key", key, "-q", "--dask", scheduler)
    assert fanned.returncode == 0, fanned.stdout + fanned.stderr
    for path in (local, bundle):
        assert _unsigned(trusted, path) == []
        assert {s for s, _ in _tunes(plain, path)} == {"measured"}


SHARED = """
from warmcli import Kernel

DEVICE = "host"
SOURCE = "static const char pad[1 << 20] = {1};\\nvoid k(float *x, int n) { x[0] += pad[n]; }"
KERNELS = [Kernel(SOURCE, "k", "Pi", defines={"UNUSED": i}, name=f"k{i}") for i in range(4)]


def workload(rt):
    x = rt.buffer(8, "float32")
    for kernel in KERNELS:
        rt.launch(kernel, x, 1)
"""


def test_a_seed_counts_a_binary_its_kernels_share_once(warm: Warm, tmp_path: Path) -> None:
    """A shard's part was measured as the sum of its kernels' binary sizes, a binary that
    several kernels share (host kernels built together share one shared library) counted
    once per kernel: 4 kernels in 2 binaries of 1 MiB made a 2 MiB part '4 MiB', over a
    3 MiB limit, so it was not sent and the shard built it all again (at the 256 MiB limit:
    8 kernels in 2 binaries of 42 MB, a part of 84 MB). The part is what it holds."""
    workload, bundle = tmp_path / "shared.py", tmp_path / "b.warm"
    workload.write_text(SHARED)
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    assert len({k["sha256"] for k in warm.json("stats", bundle)["kernels"]}) == 2  # shared
    seeds = shard_seeds(bundle, 1, tmp_path, limit=3 << 20)
    assert seeds.notes == [] and seeds.paths[0] is not None
    assert seeds.paths[0].stat().st_size < 3 << 20
    assert len(warm.json("stats", seeds.paths[0])["kernels"]) == 4


# Says it runs (`started` beside it), then runs on until the test says the second fan-out's
# shards are submitted (`done`), or 3 s at most: a second fan-out handed the first's shards
# gets their bundles.
SLOW = """
import os, time
from warmcli import Kernel

DEVICE = "host"
HALF = Kernel("void half(float *x, int n) { for (int i = 0; i < n; i++) x[i] /= 2; }",
              "half", "Pi")
STARTED, DONE = (os.path.join(os.path.dirname(os.path.abspath(__file__)), n)
                 for n in ("started", "done"))


def workload(rt):
    rt.launch(HALF, rt.buffer(8, "float32"), 8)
    open(STARTED, "w").close()
    until = time.monotonic() + 3
    while not os.path.exists(DONE) and time.monotonic() < until:
        time.sleep(0.02)
"""

OTHER = """
from warmcli import Kernel

DEVICE = "host"
TWICE = Kernel("void twice(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }",
               "twice", "Pi")


def workload(rt):
    rt.launch(TWICE, rt.buffer(8, "float32"), 8)
"""


def test_two_fan_outs_at_once_from_one_process_id_each_get_their_own_shards(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """A shard's task was keyed `warm-shard-I-of-N-PID`, and Dask runs a key once: a second
    `warm run --dask` with the same process id (two containers, each warm's PID 1 or alike,
    on one cluster) while the first ran was handed the first's shards, another workload's
    bundles, and merged them as its own. Each fan-out's keys are now its own."""
    slow, other = tmp_path / "slow.py", tmp_path / "other.py"
    started, done = tmp_path / "started", tmp_path / "done"
    slow.write_text(SLOW)  # (which writes `started` and reads `done` beside it)
    other.write_text(OTHER)
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
    first = threading.Thread(
        target=fan_out, args=(scheduler, [str(slow), "--no-verify"], folders[0])
    )
    first.start()
    try:
        _wait_for(started, 120)  # the first's shards run
        # (`done` once the second's shards are submitted: their workers are the first's)
        second = fan_out(
            scheduler, [str(other), "--no-verify"], folders[1],
            on_shard=lambda result, count: result is None and done.touch(),
        )  # fmt: skip
    finally:
        done.touch()
        first.join()
    labels = {k["label"] for p in second.paths for k in warm.json("stats", p)["kernels"]}
    assert labels == {"twice"}


PADDED = """
from warmcli import Kernel

DEVICE = "host"
SOURCE = "static const char pad[1 << 20] = {ID};\\nvoid k(float *x, int n) { x[0] += pad[n]; }"
KERNELS = [Kernel(SOURCE, "k", "Pi", defines={"ID": i + 1}, name=f"k{i}") for i in range(16)]


def workload(rt):
    x = rt.buffer(8, "float32")
    for kernel in KERNELS:
        rt.launch(kernel, x, 1)
"""

SEEDED = """
import resource, sys
from pathlib import Path
from warmcli.warming.seeds import shard_seeds
resource.setrlimit(resource.RLIMIT_FSIZE, ({most}, {most}))  # no file written past it
seeds = shard_seeds(Path(sys.argv[1]), 1, Path(sys.argv[2]), limit=1 << 20)
print(seeds.paths, seeds.notes)
"""


def test_a_part_over_the_limit_is_not_written_whole_first(warm: Warm, tmp_path: Path) -> None:
    """A seed was written whole into the caller's temporary folder and only then found over
    the limit and removed: a re-run of a 40 GB bundle over 4 workers wrote 40 GB (in a /tmp
    of memory, that much memory) to send nothing. A seed stops growing once past the limit
    (one binary more at most): here no file grows past 12 MiB writing a 16 MiB bundle's
    part."""
    workload, bundle = tmp_path / "padded.py", tmp_path / "b.warm"
    workload.write_text(PADDED)
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    assert bundle.stat().st_size > 16 << 20
    blobs = {k["sha256"] for k in warm.json("stats", bundle)["kernels"]}
    assert len(blobs) > 1  # each under 12 MiB
    (tmp_path / "seeds").mkdir()
    code = SEEDED.format(most=12 << 20)
    run = subprocess.run(
        [sys.executable, "-c", code, str(bundle), str(tmp_path / "seeds")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=warm.env,
    )
    assert run.returncode == 0, run.stderr
    assert "[None]" in run.stdout and "over the 1048576 sent" in run.stdout


def test_a_tls_scheduler_dask_reaches_is_reached(warm: Warm, tmp_path: Path) -> None:
    """The 5 s handshake (fleet40) connected without the TLS settings of Dask's config, which
    Dask's own `Client` takes: every `tls://` scheduler was 'unreachable: what answers there
    is no Dask scheduler (TypeError: TLS expects a `ssl_context` argument ...)', exit 2, where
    the run worked before. The handshake now connects as `Client` does."""
    from distributed.security import Security

    security = Security.temporary()
    env = dict(warm.env)
    for name, setting in (("ca_file", "CA_FILE"), ("client_cert", "CLIENT__CERT"),
                          ("client_key", "CLIENT__KEY")):  # fmt: skip
        (tmp_path / f"{name}.pem").write_text(getattr(security, f"tls_{name}"))
        env[f"DASK_DISTRIBUTED__COMM__TLS__{setting}"] = str(tmp_path / f"{name}.pem")
    workload, bundle = tmp_path / "other.py", tmp_path / "b.warm"
    workload.write_text(OTHER)
    with (
        scratch_in(tmp_path),
        distributed.LocalCluster(
            n_workers=1,
            processes=False,
            dashboard_address=":0",
            host="127.0.0.1",
            protocol="tls://",
            security=security,
        ) as cluster,
    ):
        done = Warm(env)("run", workload, "-b", bundle, "-q", "--dask", cluster.scheduler_address)
    assert done.returncode == 0, done.stderr
    assert "stored 1 new kernel(s)" in done.stdout


def test_a_dask_run_without_key_leaves_a_signed_older_format_bundle_as_it_was(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """Under WARM_TRUSTED_KEYS without `--key`, a local run refuses a signed bundle of an
    older format (its migration would leave the trusted signature stale) and leaves it
    byte-identical. `--dask` judged it by a read open only: it ran the shards, migrated and
    merged into it, and its own verify pass then refused it ('signature ... no longer covers
    the bundle'): a bundle production served under those keys was refused whole from then
    on. Now `--dask` refuses it first, as a local run does."""
    plain = warm  # (conftest's: no WARM_ variable but WARM_HOME in tmp_path; forked)
    path, key = _signed_format2(tmp_path, plain)
    before = path.read_bytes()
    trusted = plain.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    here = trusted("run", MATMUL, "-b", path, "-q")
    fanned = trusted("run", MATMUL, "-b", path, "-q", "--dask", scheduler)
    assert here.returncode == fanned.returncode == 2, fanned.stdout + fanned.stderr
    assert fanned.stderr == here.stderr and "bundle refused for writing" in here.stderr
    assert fanned.stdout == "" and path.read_bytes() == before


STALLS = """
import os, time
mark = os.environ.get("WARM_TEST_SHARD_STARTED")
if mark:
    open(mark, "w").close()
    time.sleep(60)
"""


def _wait_for(path: Path, seconds: float, run: subprocess.Popen[str] | None = None) -> None:
    """Until `path` exists; an assertion after `seconds`, or as soon as `run` has ended
    (with what it said). The bound is generous: under CI's load a Dask worker's start and a
    shard's took more than 30 s."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        if run is not None and run.poll() is not None:
            raise AssertionError(f"warm run ended first ({run.returncode}): {run.communicate()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _written_whole(file: Path) -> str:
    """The scheduler's address, once its file reads as whole JSON (30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return str(json.loads(file.read_text())["address"])
        except (ValueError, KeyError):
            assert time.monotonic() < deadline, file.read_text()
            time.sleep(0.02)


def test_a_scheduler_lost_mid_run_is_one_line_not_dasks_tracebacks(
    warm: Warm, tmp_path: Path
) -> None:
    """A scheduler that went away while shards ran ended the run with warm's one line
    ('dask scheduler ... lost', exit 2) after 35 lines of Dask's client logging the
    reconnect's tracebacks on stderr (ConnectionRefusedError, CommClosedError, ...). The
    fan-out's Dask logs no longer reach stderr: the line says it."""
    workload, mark, bundle = tmp_path / "stalls.py", tmp_path / "started", tmp_path / "b.warm"
    workload.write_text(STALLS)
    file = tmp_path / "scheduler.json"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    own = {**os.environ, "TMPDIR": str(tmp_path)}  # (Dask's scratch, the shard's: killed, left)
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
        env=own, **quiet,  # type: ignore[call-overload]
    )  # fmt: skip
    worker = run = None
    try:
        _wait_for(file, 120)
        address = _written_whole(file)
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(file),
             "--no-nanny", "--nthreads", "1", "--no-dashboard"],
            env={**own, "WARM_TEST_SHARD_STARTED": str(mark)},
            **quiet,  # type: ignore[call-overload]
        )  # fmt: skip
        run = subprocess.Popen(
            [sys.executable, "-m", "warmcli", "run", str(workload), "-b", str(bundle), "--dask",
             address],
            env=warm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _wait_for(mark, 120, run)
        os.killpg(scheduler.pid, signal.SIGKILL)
        out, err = run.communicate(timeout=30)
    finally:
        for proc in (run, worker, scheduler):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL) if proc is not run else proc.kill()
            if proc is not None:
                proc.wait()
    assert run.returncode == 2, out + err
    assert err.startswith(f"warm: error: dask scheduler {address} lost"), err
    assert len(err.strip().splitlines()) == 1, err
