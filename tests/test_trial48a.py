"""A CI pre-build user's trial of warm, from the README only (round 48): a small CUDA package
with a `kernels/` folder of headers named by `-I`, warmed for `--arch sm_90` by NVRTC and
nvcc on a machine with no GPU, then broken the ways a user breaks it. The real CLI, each
command a process of its own (a fork of one that imported the CLI once, `tests/forked_cli.py`:
what each says and stores is tested here, not how a process starts), real NVRTC and nvcc.

What it found: a kernel whose `-I` folder lacks the header it includes (a typo, a file not
yet added) was told by NVRTC's hint that NVRTC reads no header from the working folder and
to name it with `-I`, which it did, the header being in no folder at all (now: where NVRTC
looked, and to check the name); a template
instance named as CuPy's name expressions name it (`scale<float>`) was refused as "not a C
identifier", with no word of what the README says to do instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401 (each `warm` command forked)

from warmcli import Kernel
from warmcli.backends.cuda.nvrtc import find_nvrtc

NEEDS_NVRTC = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

MISSING_HEADER = r'''
import os
from warmcli import Kernel
DEVICE = "cuda"
KDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
K = Kernel("""#include "nothere.cuh"
extern "C" __global__ void nh(float *y) { y[0] = ONE; }
""", "nh", "P", language="cuda", options=(f"-I{KDIR}",))
def workload(rt):
    rt.launch(K, rt.buffer(4, "float32"), grid=(1, 1, 1), block=(1, 1, 1))
'''


@NEEDS_NVRTC
def test_a_header_in_no_folder_is_not_blamed_on_the_working_folder(
    warm: Warm, tmp_path: Path
) -> None:
    """The header is in neither the kernel's `-I` folder nor the working folder: NVRTC's own
    `cannot open source file` is followed by where NVRTC looked; the hint that NVRTC reads
    no header from the working folder, and to name it with `-I` (the kernel names its folder
    already), misled. Where the header does lie in the working folder, that hint is given."""
    (tmp_path / "kernels").mkdir()
    workload = tmp_path / "w.py"
    workload.write_text(MISSING_HEADER)
    args = ("run", workload, "--arch", "sm_90", "--compiler", "nvrtc", "-b", tmp_path / "b.warm")
    proc = warm(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'cannot open source file "nothere.cuh"' in proc.stderr
    assert "reads no header from the working folder" not in proc.stderr, proc.stderr
    assert "check its name; one elsewhere: name its folder with -I" in proc.stderr
    assert "Traceback" not in proc.stderr
    (tmp_path / "nothere.cuh").write_text("#define ONE 1.0f\n")
    proc = warm(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "reads no header from the working folder: name it with -I" in proc.stderr


@pytest.mark.parametrize("entry", ["scale<float>", "scale<float, 128>", "ns::scale"])
def test_a_name_expression_entry_says_what_to_declare_instead(entry: str) -> None:
    """CuPy's `name_expressions` name a template instance (`scale<float>`); warm's entry is one
    `extern "C"` function, and the refusal says so, as the README does."""
    with pytest.raises(ValueError) as err:
        Kernel("", entry, "Pi", language="cuda")
    text = str(err.value)
    assert f"kernel entry {entry!r} is not a C identifier" in text
    assert 'extern "C" __global__ function per instance' in text
    with pytest.raises(ValueError) as plain:
        Kernel("", "2scale", "Pi", language="cuda")
    assert "extern" not in str(plain.value)


TWO_COMPILERS = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """extern "C" __global__ void scale%d(float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= %d.0f; }"""
KS = [Kernel(SRC % (i, i), "scale%d" % i, "Pi", language="cuda") for i in range(6)]
def workload(rt):
    y = rt.buffer(64, "float32")
    for k in KS:
        rt.launch(k, y, 64, grid=(1, 1, 1), block=(64, 1, 1))
'''


@NEEDS_NVRTC
def test_stats_lists_each_labels_builds_by_compiler_in_one_order(
    warm: Warm, tmp_path: Path
) -> None:
    """A bundle warmed with NVRTC, then `--compiler nvcc`: `warm stats` listed one label's two
    builds by key, so nvcc's came first for some labels and NVRTC's for others, in a column
    a reader scans for which is which."""
    nvcc_or_skip()
    workload = tmp_path / "w.py"
    workload.write_text(TWO_COMPILERS)
    bundle = tmp_path / "b.warm"
    for compiler in ("nvrtc", "nvcc"):
        args = ("run", workload, "--arch", "sm_90", "--no-ptx", "--compiler", compiler)
        proc = warm(*args, "-b", bundle, "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    kernels = warm.json("stats", bundle)["kernels"]
    assert len(kernels) == 12
    built = [k["toolchain"].partition(":")[0] for k in kernels]
    assert built == ["nvcc", "nvrtc"] * 6, built
    table = warm("stats", bundle).stdout
    rows = [line.split()[2] for line in table.splitlines() if " scale" in line]
    assert rows == ["nvcc", "nvrtc"] * 6, table


TUNED = r'''
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = """extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < PER; k++) if (i * PER + k < n) y[i * PER + k] += a * x[i * PER + k]; }"""
def launch(rt, kernel, a, x, y, n, *, stream=None):
    per = int(kernel.define("PER"))
    grid = ((n // per + 127) // 128, 1, 1)
    rt.launch(kernel, a, x, y, n, grid=grid, block=(128, 1, 1), stream=stream)
T = Tunable("axpy", {f"per{p}": Kernel(SRC, "axpy", "fPPi", language="cuda", defines={"PER": p})
                     for p in (1, 2)}, launch)
def workload(rt):
    x = rt.upload(np.arange(1024, dtype=np.float32)); y = rt.buffer(1024, "float32")
    rt.tune(T, 2.0, x, y, 1024)
'''


@NEEDS_NVRTC
def test_explain_lists_every_build_of_the_candidates(warm: Warm, tmp_path: Path) -> None:
    """`warm stats --explain OP` narrows to the tunable's candidates' kernels: it listed only
    the builds the tune record names (NVRTC's cubins, keyed when the tune was first met), not
    their PTX kept beside them nor nvcc's builds of the same kernels that a later
    `--compiler nvcc` run stored, which `warm stats` lists under the same labels."""
    nvcc_or_skip()
    workload = tmp_path / "w.py"
    workload.write_text(TUNED)
    bundle = tmp_path / "b.warm"
    for compiler in ("nvrtc", "nvcc"):
        args = ("run", workload, "--arch", "sm_90", "--compiler", compiler, "-b", bundle, "-q")
        proc = warm(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    every = warm.json("stats", bundle)["kernels"]
    assert len(every) == 8  # 2 candidates x (cubin + PTX) x 2 compilers
    explained = warm.json("stats", bundle, "--explain", "axpy")["kernels"]
    assert sorted(k["key"] for k in explained) == sorted(k["key"] for k in every)
    table = warm("stats", bundle, "--explain", "axpy").stdout
    assert "Kernels (8)" in table and "compute_90" in table and "nvcc 13" in table, table


def test_a_cuda_workload_without_device_says_how_to_pick_cuda(warm: Warm, tmp_path: Path) -> None:
    """A CUDA workload that forgot `DEVICE = "cuda"`, run with no `--arch` on a machine with no
    GPU, ran on the host device and failed with only `the host device compiles C kernels,
    not 'cuda' ones`: no word of DEVICE, --device or --arch."""
    workload = tmp_path / "w.py"
    workload.write_text(TWO_COMPILERS.replace('DEVICE = "cuda"\n', ""))
    proc = warm("run", workload, "-b", tmp_path / "b.warm", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the host device compiles C kernels, not 'cuda' ones" in proc.stderr
    assert 'DEVICE = "cuda"' in proc.stderr and "--arch sm_90" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "b.warm").exists()


def _immutable(folder: Path) -> bool:
    """`folder` made immutable (`chattr +i`: no file made or removed there, even by root, as
    on a read-only mount); False where the system cannot (no root, no such attribute)."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def test_a_bundle_whose_folder_takes_no_journal_is_said_so(warm: Warm, tmp_path: Path) -> None:
    """A bundle and its lock writable, in a folder where no file can be made (immutable: its
    journal cannot be): `warm run` said `SQLite could not open the bundle or its journal (too
    many open files?)`, blaming the descriptors. It says the folder is not writable; the
    bundle is unchanged."""
    folder = tmp_path / "ro"
    folder.mkdir()
    workload = tmp_path / "w.py"
    workload.write_text(TWO_COMPILERS)
    bundle = folder / "b.warm"
    proc = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q", "--no-ptx")
    assert proc.returncode == 0, proc.stderr
    before = bundle.read_bytes()
    workload.write_text(TWO_COMPILERS.replace("%d.0f", "%d.5f"))
    if not _immutable(folder):
        pytest.skip("cannot make a folder immutable here (chattr +i needs root)")
    try:
        proc = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q")
    finally:
        import subprocess

        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "too many open files" not in proc.stderr, proc.stderr
    assert "its folder is not writable" in proc.stderr, proc.stderr
    assert bundle.read_bytes() == before


RELATIVE_INCLUDE = r'''
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel("""#include "common.cuh"
extern "C" __global__ void rel(float *y) { y[threadIdx.x] = ONE; }
""", "rel", "P", language="cuda", options=("-Ikernels",))
def workload(rt):
    rt.launch(K, rt.buffer(32, "float32"), grid=(1, 1, 1), block=(32, 1, 1))
'''


@NEEDS_NVRTC
def test_a_header_not_found_is_said_so_not_changed(warm: Warm, tmp_path: Path) -> None:
    """A relative `-Ikernels` is the working folder's: `warm verify --workload` started from
    another folder finds no `common.cuh` there, a miss (right), which it named `(changed:
    common.cuh)`, an edit nobody made. It says the header is not found here."""
    project = tmp_path / "proj"
    (project / "kernels").mkdir(parents=True)
    (project / "kernels" / "common.cuh").write_text("#define ONE 1.0f\n")
    workload = project / "w.py"
    workload.write_text(RELATIVE_INCLUDE)
    bundle = tmp_path / "b.warm"
    proc = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verify = ("verify", bundle, "--workload", workload, "--arch", "sm_90")
    proc = warm(*verify, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "miss: kernel rel: headers:" in proc.stdout, proc.stdout
    assert "(not found here: common.cuh)" in proc.stdout, proc.stdout
    (project / "kernels" / "common.cuh").write_text("#define ONE 2.0f\n")
    proc = warm(*verify, cwd=project)
    assert proc.returncode == 1 and "(changed: common.cuh)" in proc.stdout, proc.stdout


TWO_BROKEN = r"""
from warmcli import Kernel
DEVICE = "cuda"
def source(i):
    end = {3: "", 7: " +"}.get(i, ";")
    return ('extern "C" __global__ void k%d(float *y, int n) {\n  int j = threadIdx.x;\n'
            '  if (j < n) y[j] = %d.0f%s\n}\n' % (i, i, end))
KS = [Kernel(source(i), "k%d" % i, "Pi", language="cuda") for i in range(10)]
def workload(rt):
    y = rt.buffer(32, "float32")
    for k in KS:
        rt.launch(k, y, 32, grid=(1, 1, 1), block=(32, 1, 1))
"""


@NEEDS_NVRTC
def test_every_failed_compile_is_said_when_the_run_kept_what_it_stored(
    warm: Warm, tmp_path: Path
) -> None:
    """Two kernels of ten fail to compile in one batch: the run stops at the first one launched
    (k3, its log beneath its line) and says the other (k7) in a note before it, as it does
    where nothing was stored. Where the batch stored the eight that built, the error said
    what it kept and the notes were lost: k7's failure came to light one run later."""
    workload = tmp_path / "w.py"
    workload.write_text(TWO_BROKEN)
    bundle = tmp_path / "b.warm"
    proc = warm("run", workload, "--arch", "sm_90", "--no-ptx", "-b", bundle, "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("warm: note: compile of k7 (key "), proc.stderr
    assert lines[0].endswith("failed: k7.cu(4): error: expected an expression"), proc.stderr
    assert lines[1].startswith("warm: error: workload raised during CompileAndAutotune: "), lines
    assert "KernelCompileError: kernel k3 failed to compile for sm_90; 8 kernel(s)" in lines[1]
    assert 'k3.cu(4): error: expected a ";"' in proc.stderr and "k3 (key" not in proc.stderr


VARIANTS = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """extern "C" __global__ void fill(float *y, int n) {
#if BS > 256
#error block size too large
#endif
  int j = threadIdx.x; if (j < n) y[j] = BS;
}"""
KS = [Kernel(SRC, "fill", "Pi", language="cuda", defines={"BS": b}) for b in (64, 512, 1024)]
def workload(rt):
    y = rt.buffer(32, "float32")
    for k in KS:
        rt.launch(k, y, 32, grid=(1, 1, 1), block=(32, 1, 1))
'''


@NEEDS_NVRTC
def test_a_variant_failing_alike_is_still_said(warm: Warm, tmp_path: Path) -> None:
    """Kernels made in a loop over block sizes, two of which stop at one `#error`: the note of
    the second (BS=1024) was taken for the error's own compile, its log's line being the same
    text, and left out; a note is left out only where the error names its kernel."""
    workload = tmp_path / "w.py"
    workload.write_text(VARIANTS)
    proc = warm("run", workload, "--arch", "sm_90", "--no-ptx", "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("warm: note: compile of fill[BS=1024] (key "), proc.stderr
    assert lines[1].startswith("warm: error: "), proc.stderr
    assert "kernel fill[BS=512] failed to compile for sm_90" in lines[1]
    assert "fill[BS=512] (key" not in proc.stderr
