"""Stop 38's `warm verify` and `warm check` against what production does: a PTX row whose
blob is no PTX of its arch is unsound to verify and removed by clean; a tune whose
`tune_kernels` row is malformed is judged alike by check and production; the wording of
check on a machine with no compiler. Real CLI in a subprocess, real cc, NVRTC compile-only.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fuzz34 import MATMUL, SERVE, matmul_bundle, serve

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cuda_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of the CUDA example warmed for sm_90 (compile-only, NVRTC), made once."""
    nvrtc_release_or_skip()
    import os

    folder = tmp_path_factory.mktemp("cuda38")
    bundle = folder / "cuda.warm"
    warm = Warm(dict(os.environ, WARM_HOME=str(folder / "home")))
    argv = ("run", ROOT / "examples" / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle)
    done = warm(*argv)
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    return bundle


def test_verify_names_a_ptx_row_whose_blob_is_a_cubin(
    warm: Warm, tmp_path: Path, cuda_once: Path
) -> None:
    """`warm verify` checked each blob against its hash and each host kernel's binary for
    its symbol, but not that a PTX row (arch `compute_90`) holds PTX: a bundle whose PTX
    rows named their cubin's blob was called sound, while every newer GPU (`warm check
    --arch sm_100`: `not PTX`) compiled each kernel. Such a row is a problem now (exit 1),
    and `warm clean` removes it as corrupt; what is left is sound."""
    bundle = tmp_path / "cubin-as-ptx.warm"
    bundle.write_bytes(cuda_once.read_bytes())
    with sqlite3.connect(bundle) as conn:
        conn.execute(
            "UPDATE kernels SET sha256 = (SELECT c.sha256 FROM kernels c WHERE c.arch = 'sm_90' "
            "AND c.symbol = kernels.symbol) WHERE arch = 'compute_90'"
        )
    conn.close()
    done = warm("verify", bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not PTX" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    cleaned = warm("clean", bundle)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "8" in cleaned.stdout and "corrupt" in cleaned.stdout, cleaned.stdout
    assert warm("verify", bundle).returncode == 0
    with sqlite3.connect(bundle) as conn:
        left = conn.execute("SELECT arch, count(*) FROM kernels GROUP BY arch").fetchall()
    conn.close()
    assert left == [("sm_90", 8)], left


def test_verify_names_a_ptx_row_holding_another_archs_ptx(
    warm: Warm, tmp_path: Path, cuda_once: Path
) -> None:
    """A `compute_90` row whose blob is PTX that targets another SM (`.target sm_100`) is
    not PTX of its arch: production on an sm_90 GPU could not JIT it. verify names it."""
    bundle = tmp_path / "other-arch.warm"
    bundle.write_bytes(cuda_once.read_bytes())
    with sqlite3.connect(bundle) as conn:
        blobs = conn.execute(
            "SELECT DISTINCT b.sha256, b.data FROM blobs b JOIN kernels k ON k.sha256 = b.sha256 "
            "WHERE k.arch = 'compute_90'"
        ).fetchall()
        for sha, data in blobs:  # each PTX retargeted, stored under its own hash
            other = bytes(data).replace(b".target sm_90", b".target sm_100")
            new = hashlib.sha256(other).hexdigest()
            conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (new, len(other), other))
            conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
    conn.close()
    done = warm("verify", bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sm_100" in done.stdout + done.stderr, done.stdout + done.stderr


def test_check_and_production_agree_on_a_pick_whose_recorded_build_is_gone(
    warm: Warm, tmp_path: Path
) -> None:
    """A measured tune names the build its pick was measured on (`tune_kernels`); one whose
    row there names a key no kernel of the bundle has (`randomblob(32)`) was called not
    servable by `warm check` (`absent`) while production served the pick unmeasured and
    unchecked on its own build, whatever build it was measured on. A pick is served only
    where the build it was measured on would be served here: one the bundle no longer
    holds, not this process's, is measured again in production too; check and production
    agree, and production computes what a cold start computes."""
    bundle = matmul_bundle(warm, tmp_path / "gone.warm")
    with sqlite3.connect(bundle) as conn:
        # every build a pick may name (which one each tune picked follows the timings: under
        # load the three picks were not always one build, and one tune lacked, not three)
        conn.execute("UPDATE tune_kernels SET key = randomblob(32)")
    conn.close()
    check = warm("check", bundle)
    said = check.stdout + check.stderr
    assert check.returncode == 1 and "not in the bundle" in check.stdout, said
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_REPORT="1")
    served = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert served.returncode == 0, served.stderr[-800:]
    assert "served everything" not in served.stderr, served.stderr
    assert "lacked 0 kernel(s) and 3 tune(s)" in served.stderr, served.stderr
    explain = dict(env, WARM_EXPLAIN="1")
    said = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=explain, cwd=ROOT
    )
    assert "one the bundle no longer holds" in said.stderr, said.stderr
    cold = serve(warm, None)
    assert cold.returncode == 0, cold.stderr[-800:]
    assert served.stdout == cold.stdout


def test_check_with_no_compiler_names_no_compiler_here_and_agrees_with_production(
    warm: Warm, tmp_path: Path
) -> None:
    """A bundle merged from one warmed plainly and one warmed with `COMPILER_PATH` set:
    with no compiler here (`WARM_CC` names none), `warm check` said a pick was measured on
    a build `this compiler with its own programs` is not, on a machine with no compiler; it
    names the build served here now. Production with no compiler chose among the two
    builds by the order of a set of strings (`PYTHONHASHSEED`): some processes re-measured
    each tune, others served it. It chooses as `warm check` does now, in every process."""
    plain = matmul_bundle(warm, tmp_path / "plain.warm")
    (tmp_path / "programs").mkdir()
    env = dict(warm.env, COMPILER_PATH=str(tmp_path / "programs"))
    other = Warm(env)("run", MATMUL, "-b", tmp_path / "other.warm")
    assert other.returncode == 0, other.stdout[-800:] + other.stderr[-800:]
    mixed = tmp_path / "mixed.warm"
    merged = warm("merge", plain, tmp_path / "other.warm", "-o", mixed)
    assert merged.returncode == 0, merged.stdout[-800:] + merged.stderr[-800:]
    none = dict(warm.env, WARM_CC=str(tmp_path / "no-cc"))
    check = Warm(none)("check", mixed)
    assert "no compiler" in check.stdout.splitlines()[0], check.stdout
    assert "this compiler" not in check.stdout, check.stdout
    servable = check.returncode == 0
    reports = set()
    for seed in range(6):
        env = dict(none, WARM_BUNDLE=str(mixed), WARM_REPORT="1", PYTHONHASHSEED=str(seed))
        served = subprocess.run(
            [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=ROOT
        )
        assert served.returncode == 0, served.stderr[-800:]
        reports.add("served everything" in served.stderr)
    assert reports == {servable}, (reports, check.stdout)
