"""Review of stop 36's merged change: the next case over of each fix, attacked for real.

Real parts only: the CLI in subprocesses, the system cc, SQLite files.

- A tune row another writer "stored alike since this writer opened the bundle" is kept,
  not rewritten (`tune_row.write_tune_row`). A row from elsewhere stamped in the future
  (`updated` past now: a bundle from another machine, or a clock that jumped) read as
  stored since: a run re-measuring it under WARM_TRUSTED_KEYS (its row no trusted key
  covers) kept the foreign row, said "0 new tune(s)", and signed it with the trusted key.
- A PyCUDA file-scope global named `x`..`w` is no longer renamed per kernel (a header the
  source includes may read a vector's `.w`). Two template-built modules, each with its own
  `__constant__ float w[4]` (a filter's weights) and no `#include`, have their kernels
  built into one cubin, which a device loads once: both modules' `w` was one symbol `w`
  there, so module A's `get_global("w")` was module B's (the weights B set read by A's
  kernel; a miss, compiling A alone, had A's own). A source that includes nothing has no
  header for the rename to reach: its `x`..`w` are renamed again.
- A `#define` of the source was never renamed; one made in a branch (`#ifdef FIXED_GAIN`
  `#define gain 2.0f` `#else` `__constant__ float gain;`) left `gain` one symbol for two
  modules in one cubin. An `#ifndef KNAME` default still names its kernel.
- A precision switch read as "no signature" where two declarations are at file scope read
  only the first where each branch opens the body (`... a) {` `#else` `... a) {`): a float
  call of the float branch was refused ("a float32 scalar for a parameter declared
  float64").
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import DiscardedReadWarning, ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.cubin import cubin_globals
from warmcli.pycuda import SourceModule, bound_runtime
from warmcli.pycuda.source import mangled_global
from warmcli.pycuda.standins import GPUArray
from warmcli.runtime.runtime import Runtime

TUNED = r"""
import numpy as np
import pytest
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = ("void scale(const float *x, float *y, int n) "
       "{ for (int r = 0; r < REPEAT; r++) for (int i = 0; i < n; i++) y[i] = x[i] * 2.0f; }")
def launch_t(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)
T = Tunable(name="t", launch=launch_t, candidates={
    f"c{i}": Kernel(SRC, "scale", "PPi", defines={"REPEAT": 1 + 3000 * i}, name="scale")
    for i in range(2)})
def workload(rt):
    x = rt.upload(np.arange(256, dtype=np.float32))
    y = rt.buffer(256, "float32")
    rt.tune(T, x, y, 256)
"""


def test_a_foreign_tune_row_stamped_in_the_future_is_measured_again_not_signed(
    warm: Warm, tmp_path: Path
) -> None:
    workload, bundle, key = tmp_path / "w.py", tmp_path / "b.warm", tmp_path / "k"
    workload.write_text(TUNED)
    assert warm("keygen", key).returncode == 0
    first = warm("run", workload, "-b", bundle, "-q", "--key", key)
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(bundle) as conn:  # the same pick, measured elsewhere, "in 2096"
        conn.execute("UPDATE tunes SET seconds = 777.0, measured_at = 1.0, updated = 4e9")
    conn.close()
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    again = trusting("run", workload, "-b", bundle, "-q", "--key", key)
    assert again.returncode == 0, again.stderr
    assert "and 1 new tune(s)" in again.stdout, again.stdout  # measured here, stored
    with sqlite3.connect(bundle) as conn:
        seconds, updated = conn.execute("SELECT seconds, updated FROM tunes").fetchone()
    conn.close()
    assert seconds != 777.0 and updated < 4e9  # this run's row, which its key signed


FILTER = """
__constant__ float w[4];
__global__ void filter_%s(float *y) { y[threadIdx.x] = w[0] * y[threadIdx.x] + w[3]; }
"""


# A gain fixed by a macro where FIXED_GAIN is set, else a `__constant__` the host sets.
GAINED = """
#ifdef FIXED_GAIN
#define gain 2.0f
#else
__constant__ float gain;
#endif
__global__ void filter_%s(float *y) { y[threadIdx.x] *= gain; }
"""


@pytest.mark.parametrize(
    "source, no_extern_c, name, size",
    [
        (FILTER, False, "w", 16),
        (FILTER.replace("__global__", 'extern "C" __global__'), True, "w", 16),
        (GAINED, False, "gain", 4),
    ],
)
def test_two_modules_globals_stay_apart_in_one_cubin(
    source: str, no_extern_c: bool, name: str, size: int
) -> None:
    mods = {e: SourceModule(source % e, no_extern_c=no_extern_c) for e in ("a", "b")}
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    served = []
    with bound_runtime(rt), warnings.catch_warnings():
        warnings.simplefilter("ignore", DiscardedReadWarning)
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                for entry, mod in mods.items():
                    f = mod.get_function(f"filter_{entry}")
                    f(GPUArray(64, np.float32), block=(64, 1, 1))
        c = collector.reader().compilation
        assert (c.compiled, c.failed, c.compiler_processes) == (2, 0, 1)  # one cubin
        for entry, mod in mods.items():
            assert mod.get_global(name)[1] == size
            f = mod.get_function(f"filter_{entry}")
            _, binary = rt.kernels.module(f.kernel(f.letters()))
            renamed = mod.kernel_source(f"filter_{entry}")[1].get(name, name)
            served.append(mangled_global(cubin_globals(binary), renamed))  # what get_global reads
    assert None not in served and served[0] != served[1], served


NAMED = """
#ifndef KNAME
#define KNAME fill_default
#endif
__global__ void KNAME(float *y) { y[threadIdx.x] = 1.0f; }
"""


@pytest.mark.parametrize("options, name", [([], "fill_default"), (["-DKNAME=fill_64"], "fill_64")])
def test_a_kernel_named_by_a_macro_with_a_default_is_got_and_compiled(
    options: list[str], name: str
) -> None:
    mod = SourceModule(NAMED, options=options)
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt), warnings.catch_warnings():
        warnings.simplefilter("ignore", DiscardedReadWarning)
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                mod.get_function(name)(GPUArray(64, np.float32), block=(64, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (1, 0)


# A precision switch whose branches each open the kernel's body: only the first
# declaration is at file scope once the directives are dropped.
PRECISION = """
#ifdef USE_DOUBLE
__global__ void scale(double *y, double a) {
#else
__global__ void scale(float *y, float a) {
#endif
  y[threadIdx.x] *= a;
}
"""


def test_a_kernel_opened_in_two_preprocessor_branches_takes_its_arguments() -> None:
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    for options, dtype in (([], np.float32), (["-DUSE_DOUBLE"], np.float64)):
        f = SourceModule(PRECISION, options=options).get_function("scale")
        with bound_runtime(rt), warnings.catch_warnings():
            warnings.simplefilter("ignore", DiscardedReadWarning)
            for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
                with ProcessModeOverride(mode) as collector:
                    f(GPUArray(64, dtype), dtype(2), block=(64, 1, 1))
        c = collector.reader().compilation
        assert (c.compiled, c.failed) == (1, 0)
