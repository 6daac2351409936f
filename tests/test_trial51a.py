"""A new user's trial (stop 51): a PyCUDA application (string templates, headers of its own
beside it, `options=[...]`, `no_extern_c`, several kernels a module, `prepare` and
`prepared_call`, launch sizes from data, a kernel that fails to compile) pre-built on a
machine with no GPU (`warm run --pycuda --arch sm_90`/`sm_80`, NVRTC and nvcc from the venv,
`WARM_CUDA_COMPILER`, `--compiler`), then inspected (`stats`, `check --arch`, `verify`,
`diff`, `--json`), in a fresh `HOME` and `WARM_HOME`. Real NVRTC, the real CLI (forked),
real SQLite bundles. What it found:
- builds of one label that differ only in their options (a `-D` of a module that includes a
  header, which stays an option) were listed by `warm stats` and `warm diff` in their keys'
  order after label, source and toolchain: a kernel's `sm_90` cubins came in one order of
  options and its `compute_90` PTX in another (and a header edit's builds likewise), where
  the README promises one order. They are ordered by options, defines and headers now
  (each cut to what a line shows, as every text ordered "numbers as numbers" is now: a
  bundle's label or options of megabytes, ordered whole, cost 40 bytes of memory a
  character, `warm stats` 176 MB for a 3 MB label).
- PyCUDA's compile-fallback idiom (`except drv.CompileError:` around a launch) failed the
  pre-build with `pycuda.driver.CompileError: not in warm's GPU-less stand-in ...: run the
  script on a GPU`, which would not help: warm compiles at the launch and raises its own
  `KernelCompileError` there, never PyCUDA's, on a GPU too. The stand-in says so now (for
  `pycuda.compiler.CompileError` too), and the README's "PyCUDA code" does.
- after an edit of a header a kernel includes, and a run again, `warm stats` listed the
  kernel's old and new builds as rows that read alike (label, options, compiler: all the
  same), and `warm diff` of an older commit's bundle and a newer one listed "only in A" and
  "only in B" rows that read alike: a `headers` column (the head of the digest of the
  headers it read; `headers_sha256` in `--json`) tells them apart now, shown where one
  kernel has builds of several, as the `source` column is for several sources.
- `warm run` over a bundle holding another compiler's builds of its kernels notes that it
  builds its own, naming the other toolchain cut at 120 characters, with no mark: nvcc's
  identity lost its host compiler there (`... host compiler x86_64-lin'`), the one part
  that tells two nvcc 13.0 builds apart. It is named whole now (as any text a line shows:
  cut past 512 characters, saying its length).
- what a user with a GPU then gets: `--pycuda` swaps warm's `SourceModule` in for `warm
  run`'s passes only, so the unmodified script run in production (`WARM_BUNDLE=b.warm python
  app.py`) imports no warm and is served nothing, silently (PyCUDA's nvcc compiles it all as
  before); the README's "Unmodified scripts" never said so. It does now, and this test reads
  that the hook is the passes' only (`warmcli.pycuda.hook` puts `sys.modules` back).
- a SourceModule including `<cuda_fp16.h>` (PyCUDA wraps its source in `extern "C" { }`
  unless `no_extern_c`, as warm does) failed under NVRTC with 40 errors `more than one
  instance of overloaded function ... has "C" linkage`, none naming the wrap: warm's line
  after NVRTC's log names `no_extern_c=True` now.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.cli.render.stats import kernel_order
from warmcli.printable import CUT_CHARS, natural
from warmcli.pycuda.hook import pycuda_modules
from warmcli.records import KernelRecord

if find_nvrtc() is None:  # pragma: no cover - make test installs NVRTC
    pytest.skip("NVRTC not installed", allow_module_level=True)

VARIANTS = (1, 2, 3, 10, 20)  # `-DK=10` after `-DK=2`: numbers as numbers

APP = """
import os
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = '''
#include "scale.cuh"
__global__ void scale(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * FACTOR * K;
}
'''


def main():
    n = 1000
    x = drv.mem_alloc(n * 4)
    for k in VARIANTS:
        f = SourceModule(SRC, options=["-DK=%d" % k], include_dirs=[HERE]).get_function("scale")
        f.prepare("Pi")
        block = 128
        f.prepared_call(((n + block - 1) // block, 1), (block, 1, 1), x, np.int32(n))
"""


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A PyCUDA app pre-built for sm_90 with one kernel under five `-DK=` options (a header
    included, so they stay options): its folder and bundle."""
    base = tmp_path_factory.mktemp("variants")
    _app(base, VARIANTS)
    return base, base / "b.warm"


def _prebuilt(warm: Warm, base: Path, bundle: Path) -> None:
    if not bundle.exists():
        done = warm("run", base / "app.py", "--pycuda", "--arch", "sm_90", "-q", "-b", bundle)
        assert done.returncode == 0, done.stderr


def test_one_kernels_builds_by_options_are_listed_in_one_order(
    warm: Warm, variants: tuple[Path, Path]
) -> None:
    """`warm stats` lists a kernel's cubins and its PTX in one order of its options (numbers
    as numbers), not in its keys' order, which differs between a cubin and its PTX."""
    base, bundle = variants
    _prebuilt(warm, base, bundle)
    proc = warm("stats", bundle, "--json")
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads(proc.stdout)["kernels"]
    want = [[f"-DK={k}", "-I<include folder>"] for k in VARIANTS]
    for arch in ("sm_90", "compute_90"):
        assert [k["options"] for k in kernels if k["arch"] == arch] == want, arch
    table = warm("stats", bundle)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines() if " scale " in line]
    shown = [[w for w in row if w.startswith("-DK=")] for row in rows]
    assert shown == [[f"-DK={k}"] for k in VARIANTS] * 2, table.stdout


FALLBACK = """
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule


def main():
    x = drv.mem_alloc(1024)
    try:
        mod = SourceModule("__global__ void fast(float *x) { x[threadIdx.x] = no_such(1.0f); }")
        mod.get_function("fast")(x, block=(256, 1, 1), grid=(1, 1))
    except drv.CompileError:
        mod = SourceModule("__global__ void slow(float *x) { x[threadIdx.x] = 1.0f; }")
        mod.get_function("slow")(x, block=(256, 1, 1), grid=(1, 1))
"""


def test_a_fallback_on_pycudas_compile_error_is_told_what_warm_raises(
    warm: Warm, tmp_path: Path
) -> None:
    """A failed compile is warm's `KernelCompileError`, at the launch, on a GPU too: the
    pre-build of a script catching `drv.CompileError` says that, not "run it on a GPU"."""
    (tmp_path / "app.py").write_text(FALLBACK)
    app, bundle = tmp_path / "app.py", tmp_path / "b.warm"
    proc = warm("run", app, "--pycuda", "--arch", "sm_90", "-q", "-b", bundle)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("warm: error:")]
    assert len(errors) == 1, proc.stderr
    said = "AttributeError: pycuda.driver.CompileError: warm's SourceModule compiles at a launch"
    assert said in errors[0]
    assert "raises warmcli.errors.KernelCompileError there" in errors[0]
    assert "run the script on a GPU" not in errors[0]
    assert "no_such" in proc.stderr  # the compiler's log, as a note


def _app(folder: Path, variants: tuple[int, ...] = (1,)) -> Path:
    (folder / "scale.cuh").write_text("#define FACTOR 2.0f\n")
    (folder / "app.py").write_text(APP.replace("VARIANTS", repr(variants)))
    return folder / "app.py"


def test_a_header_edits_builds_read_apart_in_stats_and_diff(warm: Warm, tmp_path: Path) -> None:
    """A kernel warmed, its header edited, warmed again: `warm stats` and `warm diff` show
    the builds' headers apart (the head of `headers_sha256`), which otherwise read alike."""
    _app(tmp_path)
    old, both = tmp_path / "old.warm", tmp_path / "both.warm"

    def prebuild(bundle: Path) -> None:
        done = warm("run", tmp_path / "app.py", "--pycuda", "--arch", "sm_90", "-q", "-b", bundle)
        assert done.returncode == 0, done.stderr

    prebuild(old)
    (tmp_path / "scale.cuh").write_text("#define FACTOR 3.0f\n")
    prebuild(both)  # (the edited header's builds only)
    digests = []
    for bundle in (old, both):
        kernels = json.loads(warm("stats", bundle, "--json").stdout)["kernels"]
        digests += list({k["headers_sha256"] for k in kernels})
    assert len(digests) == 2 and len(set(digests)) == 2, digests
    diff = warm("diff", old, both)
    assert diff.returncode == 0, diff.stderr
    rows = [line.split() for line in diff.stdout.splitlines() if " scale " in line]
    assert "headers" in diff.stdout and len(rows) == 4, diff.stdout
    heads = {d[:8] for d in digests}
    twice = sorted([*heads, *heads])  # each digest's cubin and PTX
    assert sorted(w for row in rows for w in row if w in heads) == twice, diff.stdout
    shutil.copyfile(old, tmp_path / "all.warm")
    prebuild(tmp_path / "all.warm")  # both edits' builds in one bundle
    stats = warm("stats", tmp_path / "all.warm")
    rows = [line.split() for line in stats.stdout.splitlines() if " scale " in line]
    assert len(rows) == 4, stats.stdout
    assert sorted(w for row in rows for w in row if w in heads) == twice, stats.stdout


def test_the_note_on_another_compilers_builds_names_it_whole(warm: Warm, tmp_path: Path) -> None:
    """A pre-build by NVRTC over nvcc's builds notes them naming nvcc's whole identity (its
    host compiler too), as `warm stats` does, not its first 120 characters."""
    app, bundle = _app(tmp_path), tmp_path / "b.warm"
    args = ("run", app, "--pycuda", "--arch", "sm_90", "-q", "-b", bundle)
    assert warm(*args, "--compiler", "nvcc").returncode == 0
    (nvcc,) = {
        k["toolchain"] for k in json.loads(warm("stats", bundle, "--json").stdout)["kernels"]
    }
    assert "; host compiler " in nvcc and len(nvcc) > 120, nvcc
    proc = warm(*args, "--compiler", "nvrtc")
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "this run builds its own" in line]
    assert len(notes) == 1 and f"built by {nvcc!r}: this run" in notes[0], proc.stdout


def test_the_readme_says_an_unmodified_script_is_served_only_with_warms_imports() -> None:
    """`--pycuda`'s `SourceModule` is the passes' only: once they end, `pycuda.compiler` is
    what it was (a production process of the unmodified script never meets warm), and the
    README's PyCUDA code says what production then gets."""
    before = {name: sys.modules.get(name) for name in ("pycuda", "pycuda.compiler")}
    with pycuda_modules(gpu_less=True):
        assert sys.modules["pycuda.compiler"].SourceModule.__module__ == "warmcli.pycuda.module"
    assert {name: sys.modules.get(name) for name in before} == before
    text = " ".join((ROOT / "README.md").read_text().split())
    said = (
        "`--pycuda` swaps them in for `warm run`'s passes only, so the script run unmodified "
        "on the GPU (`WARM_BUNDLE=b.warm python app.py`) imports no warm, reads no bundle, says "
        "nothing and compiles every kernel with PyCUDA's nvcc as before"
    )
    assert said in text


def test_what_a_kernel_is_ordered_by_is_cut_as_a_line_shows_it() -> None:
    """A bundle's label or options of megabytes (a row's texts may hold 4 Mi characters)
    are ordered by their first `CUT_CHARS`: never a sort key of millions of parts a row."""
    huge = json.dumps(["1a" * 1_500_000])
    parts = {"options": huge, "defines": huge, "headers": "ab" * 10**6, "source": "0" * 64}
    label = "1a" * 1_500_000
    record = KernelRecord("0" * 64, "sm_90", "cuda", "sm_90", "k", label, "s", "0" * 64, "t", parts)
    order = kernel_order(record)
    assert all(len(part) <= CUT_CHARS + 1 for part in (order[2], order[4], order[5]))
    assert order[6] == ""  # headers: a digest, or nothing
    assert natural("BLOCK=1024") > natural("BLOCK=128")  # numbers as numbers still


HALF = """
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

SRC = "#include <cuda_fp16.h>\\n__global__ void h(__half *x) { x[0] = __float2half(1.0f); }"


def main():
    SourceModule(SRC).get_function("h")(drv.mem_alloc(64), block=(1, 1, 1), grid=(1, 1))
"""


def test_a_cpp_header_in_pycudas_extern_c_wrap_names_no_extern_c(
    warm: Warm, tmp_path: Path
) -> None:
    """`<cuda_fp16.h>` in a wrapped source fails (as in PyCUDA): the line after NVRTC's
    log says why and what to pass."""
    (tmp_path / "app.py").write_text(HALF)
    args = ("run", tmp_path / "app.py", "--pycuda", "--arch", "sm_90", "-q")
    proc = warm(*args, "-b", tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    assert 'has "C" linkage' in proc.stderr
    hint = 'inside extern "C" { }, which PyCUDA\'s SourceModule wraps a source in: pass '
    assert hint + "no_extern_c=True" in proc.stderr.splitlines()[-1], proc.stderr
