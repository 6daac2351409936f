"""trial49a: what a CI engineer pre-building CUDA for `--arch sm_90` on a machine with no GPU
met, each through the real CLI in a subprocess (NVRTC from the venv, real SQLite bundles):
the README's synopsis writes `[--arch sm_90 ...]`, and `--arch sm_90 sm_80` (two
architectures after one `--arch`) was refused as `a workload takes no arguments (sm_80)`
by `run` and `verify`, and as `Got unexpected extra argument(s) (sm_80)` by `check`, neither
saying that each architecture takes its own `--arch`; and `warm verify B --workload app.py`
of a CUDA workload, without `--arch`, told to use `warm run --arch sm_90` (which had built B).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm

CUDA = """from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('extern "C" __global__ void one(float *x) { x[threadIdx.x] = 1; }', "one", "P",
           language="cuda")

def workload(rt):
    rt.launch(K, rt.buffer(32, "float32"), grid=(1,), block=(32,))
"""


@pytest.mark.parametrize("command", ["run", "verify", "check"])
def test_two_architectures_after_one_arch_say_one_arch_each(
    warm: Warm, tmp_path: Path, command: str
) -> None:
    """`warm run app.py --arch sm_90 sm_80` (and verify's, check's): one line saying to
    give each architecture its own `--arch`, exit 2, nothing written; not that the
    workload takes no arguments."""
    app = tmp_path / "app.py"
    app.write_text(CUDA)
    bundle = tmp_path / "b.warm"
    given = {
        "run": ["run", app, "--bundle", bundle],
        "verify": ["verify", bundle, "--workload", app],
        "check": ["check", bundle],
    }[command]
    done = warm(*given, "--arch", "sm_90", "sm_80", "compute_75")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "takes no arguments" not in lines[0] and "unexpected extra" not in lines[0]
    assert "--arch sm_80" in lines[0] and "one --arch each" in lines[0], lines[0]
    assert "compute_75" in lines[0], lines[0]
    assert not bundle.exists()


def test_a_workload_argument_that_is_no_architecture_is_refused_as_before(
    warm: Warm, tmp_path: Path
) -> None:
    """A word after the workload that reads as no architecture (`8`) still says a workload
    takes no arguments, with `--arch` given or not; and an architecture word with no
    `--arch` anywhere is the workload's argument, refused as before."""
    app = tmp_path / "app.py"
    app.write_text(CUDA)
    for extra in (["--arch", "sm_90", "8"], ["sm_80"]):
        done = warm("run", app, "--bundle", tmp_path / "b.warm", *extra)
        assert done.returncode == 2, done.stderr
        assert "a workload takes no arguments" in done.stderr, done.stderr


def test_verify_of_a_cuda_workload_without_arch_names_verify_too(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm verify B --workload app.py` (a CUDA workload whose DEVICE its kernels' module
    set, not the workload's own file, so `--device auto` picks the host) said `without a
    GPU, warm run --arch sm_90 pre-builds them` after `warm run` had already pre-built
    them: it says `--arch sm_90` is taken by `warm verify --workload` too."""
    (tmp_path / "kernels.py").write_text(CUDA.replace("def workload", "def _unused"))
    app = tmp_path / "app.py"
    app.write_text(
        "from kernels import K\n\n"
        "def workload(rt):\n"
        '    rt.launch(K, rt.buffer(32, "float32"), grid=(1,), block=(32,))\n'
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", app, "--arch", "sm_90", "--bundle", bundle, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = warm("verify", bundle, "--workload", app, "-q", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DeviceError" in lines[0], done.stderr
    assert "warm verify --workload" in lines[0] and "--arch sm_90" in lines[0], lines[0]
