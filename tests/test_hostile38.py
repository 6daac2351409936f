"""Stop 38's hostile bundles and environments against the day's new code: a tune's recorded
pick build judged by `serving.why_not` (`BundleLookup.measured_otherwise`, `warm check`),
toolchain identities naming `COMPILER_PATH`/`GCC_EXEC_PREFIX`, escaped invisible characters.
What broke is kept here: each command exits 0 or says one line and exits non-zero, prints no
escape byte, and production computes the numbers a cold start computes.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fuzz34 import MATMUL, SERVE
from test_hostile37 import ESCAPES, peak_of

from warmcli.records import tune_key

ROOT = Path(__file__).resolve().parents[1]


def test_a_long_compiler_path_is_a_toolchain_warm_reads_back(warm: Warm, tmp_path: Path) -> None:
    """`COMPILER_PATH` (and `GCC_EXEC_PREFIX`) name cc's programs in its toolchain identity,
    whole: one of 5,000 characters made an identity over the 4,096 characters a bundle's
    toolchain holds, so `warm run` stored six kernels it then refused as corrupt (`toolchain:
    5162 characters, over the limit`), exited 1, and production compiled them all. A long
    value is named by its length and digest now: the run is complete, production compiles
    nothing."""
    folder = tmp_path / ("p" * 5000)
    env = dict(warm.env, COMPILER_PATH=str(folder))
    run = Warm(env)("run", MATMUL, "-b", tmp_path / "long.warm")
    assert run.returncode == 0, run.stdout[-800:] + run.stderr[-800:]
    assert "corrupt" not in run.stdout + run.stderr
    served = dict(env, WARM_BUNDLE=str(tmp_path / "long.warm"), WARM_REPORT="1")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=served, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-800:]
    assert "served everything: compiled 0 kernels, tuned 0 operations" in proc.stderr, proc.stderr


def test_a_rewarm_builds_again_a_ptx_row_that_holds_no_ptx(warm: Warm, tmp_path: Path) -> None:
    """While warming, a CUDA kernel whose cubin the bundle holds is held only with the PTX
    the run keeps (`_kept_ptx_held`): that asked only whether a PTX row exists, so a bundle
    whose `compute_90` rows name their cubin's blob (sound: its hash checks) was kept as it
    was by `warm run --arch sm_90 -b`, which said the bundle complete, while every newer GPU
    (`warm check --arch sm_100`: `not PTX`) compiled each kernel. A held row's blob must be
    PTX of its arch now, else it is built again."""
    bundle = tmp_path / "cuda.warm"
    argv = ("run", ROOT / "examples" / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle)
    assert warm(*argv).returncode == 0
    with sqlite3.connect(bundle) as conn:
        conn.execute(
            "UPDATE kernels SET sha256 = (SELECT c.sha256 FROM kernels c WHERE c.arch = 'sm_90' "
            "AND c.label = kernels.label) WHERE arch = 'compute_90'"
        )
    conn.close()
    done = warm(*argv)
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    with sqlite3.connect(bundle) as conn:
        heads = conn.execute(
            "SELECT substr(b.data, 1, 4) FROM kernels k JOIN blobs b ON b.sha256 = k.sha256 "
            "WHERE k.arch = 'compute_90'"
        ).fetchall()
    conn.close()
    assert len(heads) == 8 and all(head != b"\x7fELF" for (head,) in heads), heads
    done = warm("check", "--arch", "sm_100", bundle)
    assert "not PTX" not in done.stdout, done.stdout


def test_check_with_no_compiler_reads_a_kernels_builds_once(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """With no compiler here, `warm check` judges a tune's pick against the build production
    is served, found among every build of the pick's entry: read again for each tune, so
    103 tunes naming one pick over 100,000 rows of its entry took 3 minutes, and 1,000 tunes
    over 50,000 rows (a 40 MB bundle) ran for a quarter of an hour. Each kernel's served
    build is found once per device now: the check ends in seconds."""
    bundle = host_bundle(tmp_path / "many.warm")  # as `warm run MATMUL -b` makes it
    with sqlite3.connect(bundle) as conn:
        # 20,000 rows of the pick's entry (malformed: their keys are no keys): the read per
        # tune put back, the check still runs past the 120 s below (checked, suite39)
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
            "INSERT INTO kernels SELECT printf('%064x', i), device, backend, arch, entry, label, "
            "symbol, sha256, toolchain, components, compile_log, seconds, created, last_used "
            "FROM kernels, n WHERE label = 'matmul[TILE=64]'"
        )
        row = conn.execute("SELECT * FROM tunes LIMIT 1").fetchone()
        _, operation, shape, device, checksum, *rest = row
        tunes = []
        for i in range(1000):  # 1,000 well-formed tunes of other shapes, one pick
            key = tune_key(operation, f"{shape} #{i}", device, checksum.hex())
            tunes.append((bytes.fromhex(key), operation, f"{shape} #{i}", device, checksum, *rest))
        conn.executemany("INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", tunes)
    conn.close()
    no_cc = warm.with_env(WARM_CC=str(tmp_path / "no-cc"))  # (forked, as `warm`'s commands)
    # a hang: ended after 120 s (seconds, fixed; ~15 minutes, not)
    done = no_cc("check", bundle, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
    lines = done.stdout.splitlines()
    assert "no compiler" in lines[0] and "1003 tune(s)" in lines[1], lines[:2]


@pytest.fixture(scope="module")
def run_peak(tmp_path_factory: pytest.TempPathFactory, made_once: Path) -> int:
    """The peak (KiB) of `warm run` of the example over its own bundle, complete (conftest's
    `made_once`, copied): what the huge-value tests compare a run's with (each measured this
    same command on this same bundle before; measured once for both)."""
    folder = tmp_path_factory.mktemp("base38")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(folder / "home"), COLUMNS="200")
    bundle = Path(shutil.copyfile(made_once / "good.warm", folder / "plain.warm"))
    argv = [sys.executable, "-m", "warmcli", "run", str(MATMUL), "-b", str(bundle)]
    code, _, err, peak = peak_of(argv, env)
    assert code == 0, err[-800:]
    return peak


def test_a_huge_manifest_run_is_never_read_whole_by_a_run(
    warm: Warm, tmp_path: Path, run_peak: int, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm run -b` records its run in the manifest's `run` row, read again in its last
    transaction whole, whatever its size (every reader refuses one over its bound): a 64 MB
    value made the run hold ~130 MB more. Read within `MAX_NAME_CHARS` now (no record warm
    writes is longer), the run stays flat, and the row is still replaced as before."""
    argv = [sys.executable, "-m", "warmcli", "run", MATMUL, "-b"]
    base = run_peak
    bundle = host_bundle(tmp_path / "huge.warm")  # as `warm run MATMUL -b` makes it
    with sqlite3.connect(bundle) as conn:
        conn.execute("UPDATE manifest SET value = printf('%.*c', 64 << 20, 'a') WHERE key = 'run'")
    conn.close()
    code, _, err, peak = peak_of([*map(str, argv), str(bundle)], warm.env)
    assert code == 0 and "Traceback" not in err, err[-800:]
    assert peak < base + 24 * 1024, (base, peak)  # KiB: not the 64 MB value, twice
    with sqlite3.connect(bundle) as conn:
        held = conn.execute("SELECT length(value) FROM manifest WHERE key = 'run'").fetchone()
    conn.close()
    assert held is None  # (a value no record: no run recorded, as before)


def test_a_rows_huge_value_is_never_loaded_to_compare_it(
    warm: Warm, tmp_path: Path, run_peak: int, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm run -b` keeps a kernel or tune row the bundle holds alike (another writer's),
    compared in SQL, column by column: a 64 MB label or pick was loaded whole to compare it,
    so a bundle with one of each made the run hold ~66 MB more. SQLite refuses a value over
    `MAX_VALUE_BYTES` there now: such a row is no row alike, replaced, never loaded."""
    argv = [sys.executable, "-m", "warmcli", "run", str(MATMUL), "-b"]
    base = run_peak
    bundle = host_bundle(tmp_path / "huge.warm")  # as `warm run MATMUL -b` makes it
    with sqlite3.connect(bundle) as conn:
        conn.execute("UPDATE kernels SET label = printf('%.*c', 64 << 20, 'a') WHERE rowid = 1")
        conn.execute("UPDATE tunes SET pick = printf('%.*c', 64 << 20, 'a') WHERE rowid = 1")
    conn.close()
    code, _, err, peak = peak_of([*argv, str(bundle)], warm.env)
    assert code == 0 and "Traceback" not in err, err[-800:]
    assert peak < base + 24 * 1024, (base, peak)  # KiB: not the two 64 MB values
    verified = warm("verify", bundle)  # (forked: its peak is not measured)
    assert verified.returncode == 0, verified.stdout[
        -800:
    ]  # both rows written again, as this run's
    said = verified.stdout + verified.stderr
    assert not any(bad in said for bad in ESCAPES), said[-800:]


def test_long_nvcc_flags_are_a_toolchain_warm_reads_back(warm: Warm, tmp_path: Path) -> None:
    """As `COMPILER_PATH` for cc, what nvcc reads from the environment (`NVCC_APPEND_FLAGS`)
    is named in its identity: 5,000 characters of options made `warm run --compiler nvcc`
    store kernels it refused as corrupt (`toolchain: 5143 characters, over the limit`) and
    exit 1. A long value is named by its length and digest now."""
    env = dict(warm.env, NVCC_APPEND_FLAGS="-DLONG=" + "a" * 5000)
    bundle = tmp_path / "nvcc.warm"
    argv = ("run", ROOT / "examples" / "saxpy_cuda.py", "--arch", "sm_90", "--compiler", "nvcc")
    done = Warm(env)(*argv, "-b", bundle)
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    assert "corrupt" not in done.stdout + done.stderr
