"""trial49a: what a CI engineer pre-building CUDA for `--arch sm_90` on a machine with no GPU
met, each through the real CLI in a process of its own (NVRTC from the venv, real SQLite
bundles; a command a fork of a process that imported the CLI once, `tests/forked_cli.py`,
but the one run under `prlimit`, which starts `python -m warmcli` itself):
the README's synopsis writes `[--arch sm_90 ...]`, and `--arch sm_90 sm_80` (two
architectures after one `--arch`) was refused as `a workload takes no arguments (sm_80)`
by `run` and `verify`, and as `Got unexpected extra argument(s) (sm_80)` by `check`, neither
saying that each architecture takes its own `--arch`; and `warm verify B --workload app.py`
of a CUDA workload, without `--arch`, told to use `warm run --arch sm_90` (which had built B).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, its commands forked)

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


SLOW = """from warmcli import Kernel
DEVICE = "cuda"
SRC = r'''
extern "C" __global__ void heavy(float *x) {
    float v = x[threadIdx.x];
    #pragma unroll
    for (int k = 0; k < 3000; k++) v = v * 1.0001f + (float)(k % SEED);
    x[threadIdx.x] = v;
}'''
KS = [Kernel(SRC, "heavy", "P", language="cuda", defines={"SEED": s}) for s in range(3, 11)]

def workload(rt):
    x = rt.buffer(32, "float32")
    for k in KS:
        rt.launch(k, x, grid=(1,), block=(32,))
"""


def test_kernels_timed_out_alike_are_one_note_not_one_each(warm: Warm, tmp_path: Path) -> None:
    """`--compile-timeout 0.1` over eight kernels NVRTC takes ~0.4 s each printed, before the
    run's error line, seven `warm: note: compile of heavy[SEED=N] (key K) timed out: NVRTC
    did not finish within 0.1 s; ...` lines, the same text but the label (a 300-kernel
    workload: 299 lines). A note said of several kernels alike is said once whole, then one
    line counting and naming the others."""
    app = tmp_path / "slow.py"
    app.write_text(SLOW)
    bundle = tmp_path / "b.warm"
    done = warm(
        "run", app, "--arch", "sm_90", "--no-ptx", "--compile-timeout", "0.1", "-b", bundle, "-q"
    )
    assert done.returncode == 2, done.stderr
    notes = [n for n in done.stderr.splitlines() if n.startswith("warm: note: compile of ")]
    assert "timed out compiling" in done.stderr.splitlines()[-2], done.stderr
    assert len(notes) == 2, done.stderr  # the first whole, then the others counted
    assert "NVRTC did not finish within 0.1 s" in notes[0], notes
    more = notes[1].removeprefix("warm: note: compile of ")
    count = int(more.split(" ", 1)[0])
    assert count >= 1 and f"{count} more kernel(s) timed out alike: heavy[SEED=" in more, more


HOST_HEADER = """from warmcli import Kernel
DEVICE = "host"
K = Kernel('#include "ops/common.h"\\nvoid two(float *x) { x[0] = TWO; }', "two", "P",
           options=("-Iinclude",))

def workload(rt):
    rt.launch(K, rt.buffer(32, "float32"))
"""

CUDA_HEADER = """from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('#include "ops/common.h"\\nextern "C" __global__ void two(float *x) '
           '{ x[threadIdx.x] = TWO; }', "two", "P", language="cuda", options=("-I", "include"))

def workload(rt):
    rt.launch(K, rt.buffer(32, "float32"), grid=(1,), block=(32,))
"""


@pytest.mark.parametrize("compiler", ["cc", "nvrtc", "nvcc"])
def test_a_relative_include_folder_missing_from_the_working_folder_is_named(
    warm: Warm, tmp_path: Path, compiler: str
) -> None:
    """A workload whose kernel says `-Iinclude` (its headers in `proj/include/ops/`), run from
    the folder above (`warm run proj/app.py`, as a CI step from the repository root), failed
    with the compiler's `No such file or directory` (NVRTC's `cannot open source file`, and a
    hint to check the header's name or name its folder with -I, which it had). It names the
    -I folder that is none here, as the absolute path it was read as."""
    proj = tmp_path / "proj"
    (proj / "include" / "ops").mkdir(parents=True)
    (proj / "include" / "ops" / "common.h").write_text("#define TWO 2.0f\n")
    (proj / "app.py").write_text(HOST_HEADER if compiler == "cc" else CUDA_HEADER)
    args = ("-q",) if compiler == "cc" else ("--arch", "sm_90", "--compiler", compiler, "-q")
    done = warm("run", "app.py", "-b", tmp_path / "a.warm", *args, cwd=proj)
    assert done.returncode == 0, done.stderr  # from its own folder: found
    done = warm("run", "proj/app.py", "-b", tmp_path / "b.warm", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "ops/common.h" in done.stderr, done.stderr
    missing = f"warm: -Iinclude names no folder: {tmp_path / 'include'} (a relative -I"
    assert missing in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


MANY = """import os
from warmcli import Kernel
DEVICE = "cuda"
KS = [Kernel('extern "C" __global__ void k(float *x) { x[threadIdx.x] = V; }', "k", "P",
             language="cuda", defines={"V": v}) for v in range(int(os.environ["N"]))]

def workload(rt):
    x = rt.buffer(32, "float32")
    for k in KS:
        rt.launch(k, x, grid=(1,), block=(32,))
"""


def test_a_refused_write_whose_rollback_was_refused_says_the_journal_is_needed(
    warm: Warm, tmp_path: Path
) -> None:
    """A re-warm under a file size limit below the bundle's own size (`prlimit --fsize`,
    as a CI runner's quota) said `nothing was written, the bundle is unchanged`, but the
    file had changed (its digest another) and was whole only with the `-journal` the refused
    rollback left beside it: a CI step caching the bundle file alone, as README's CI cache
    section advises, cached a `corrupt bundle`. It says the journal is needed, and what
    plays it back; after that the bundle is its old self."""
    app = tmp_path / "many.py"
    app.write_text(MANY)
    bundle = tmp_path / "b.warm"
    warm.env["N"] = "300"
    done = warm("run", app, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    copy = (tmp_path / "copy.warm", bundle.read_bytes())
    limit = bundle.stat().st_size // 3
    warm.env["N"] = "320"
    command = ["prlimit", f"--fsize={limit}", sys.executable, "-m", "warmcli", "run"]
    done = subprocess.run(
        [*command, str(app), "--arch", "sm_90", "-b", str(bundle), "-q"],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "a write to the disk failed" in lines[0], done.stderr
    journal = Path(f"{bundle}-journal")
    assert journal.stat().st_size > 0  # the rollback refused too: the file needs it
    assert "the bundle is unchanged" not in lines[0], lines[0]
    assert f"whole only with {journal.name}" in lines[0], lines[0]
    assert f"warm stats {bundle}" in lines[0], lines[0]
    copy[0].write_bytes(bundle.read_bytes())  # the bundle alone, as a cache would keep it
    assert "corrupt bundle" in warm("stats", copy[0]).stderr  # (why the line says so)
    assert warm("stats", bundle).returncode == 0  # played back, as the line says
    assert not journal.exists() and bundle.read_bytes() == copy[1]
