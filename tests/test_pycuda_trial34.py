"""A GPU engineer's trial of `warm run SCRIPT --pycuda --arch sm_90` on PyCUDA code written as
real projects write it: `main(argv=None)` with argparse, names PyCUDA has and the GPU-less
stand-ins do not (`from pycuda.compiler import DynamicSourceModule`), `gpuarray` arithmetic.
Each must pre-build what a GPU run compiles, or stop on one line naming what is not served.
The real CLI in a subprocess, real NVRTC.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.bundle.store import Bundle

if find_nvrtc() is None:  # pragma: no cover - make test installs NVRTC
    pytest.skip("NVRTC not installed", allow_module_level=True)

HEAD = """
import argparse
import sys
import numpy as np
import pycuda.autoinit
import pycuda.driver as cuda
from pycuda.compiler import SourceModule

SRC = "__global__ void fill(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1.0f; }"
"""


def _prebuild(warm: Warm, script: Path, bundle: Path):
    return warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)


def _prebuilt_entries(warm: Warm, script: Path, bundle: Path) -> set[str]:
    """The entries of the kernels a pre-build of `script` stored (it must succeed)."""
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 0, proc.stderr
    with Bundle.open(bundle) as b:
        return {k.entry for k in b.kernels()}


def test_main_taking_argv_with_a_default_is_called_without_the_runtime(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`def main(argv=None): parser.parse_args(argv)` is the usual testable script; warm
    passed its runtime as argv (`TypeError: 'Runtime' object is not iterable`)."""
    script = workload_file(
        HEAD
        + """
def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=64)
    args = p.parse_args(argv)
    x = cuda.mem_alloc(4 * args.n)
    SourceModule(SRC).get_function("fill")(x, np.int32(args.n), block=(args.n, 1, 1))

if __name__ == "__main__":
    main(sys.argv[1:])
""",
        "argv_default.py",
    )
    bundle = tmp_path / "a.warm"
    assert _prebuilt_entries(warm, script, bundle) == {"fill"}


@pytest.mark.parametrize(
    ("line", "named", "where"),
    [
        ("from pycuda.compiler import DynamicSourceModule", "pycuda.compiler", "import"),
        ("from pycuda.driver import module_from_buffer", "pycuda.driver", "import"),
        ("    from pycuda.gpuarray import arange", "pycuda.gpuarray", "CompileOnly"),
    ],
)
def test_a_name_the_stand_ins_lack_imported_from_them_is_named_as_theirs(
    warm: Warm, workload_file, tmp_path: Path, line: str, named: str, where: str
) -> None:
    """`from pycuda.compiler import DynamicSourceModule` said only `cannot import name ...
    (unknown location)`, as if pycuda were broken, not that warm's stand-in lacks it."""
    at_import = where == "import"
    tail = f"{line}\n\ndef main():\n    pass\n" if at_import else f"\ndef main():\n{line}\n"
    body = HEAD + tail
    script = workload_file(body, "lacking_from.py")
    proc = _prebuild(warm, script, tmp_path / "l.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    name = line.split()[-1]
    assert f"{named}.{name}" in said and "GPU-less stand-in" in said and "lacking_from.py:" in said
    assert "unknown location" not in said


def test_gpuarray_arithmetic_is_named_as_not_warms(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """The README promises gpuarray arithmetic fails on one line naming it; the stand-in
    said `TypeError: unsupported operand type(s) for *: 'GPUArray' and 'int'`, as if the
    script were wrong."""
    script = workload_file(
        HEAD
        + """
import pycuda.gpuarray as gpuarray

def main():
    x = gpuarray.to_gpu(np.ones(8, np.float32))
    y = 2 * x + 1
""",
        "arith.py",
    )
    proc = _prebuild(warm, script, tmp_path / "x.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    assert "arith.py:" in said and "GPUArray" in said and "not warm's" in said
    assert "unsupported operand" not in said


@pytest.mark.parametrize(
    "expression",
    ["x + x", "x - 1", "1.5 * x", "x / 2", "x ** 2", "-x", "abs(x)", "x < 0", "x.__iadd__(1)"],
)
def test_each_gpuarray_operator_is_named(expression: str) -> None:
    from warmcli.pycuda import PyCudaError
    from warmcli.pycuda.standins import GPUArray

    x = GPUArray(4, "float32")
    with pytest.raises(PyCudaError, match=r"GPUArray .*not warm's"):
        eval(expression, {"x": x})  # fixed test expressions


def test_the_primary_context_retained_by_hand_is_stood_in_for(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`Device(0).retain_primary_context()` then `push()`/`pop()`/`detach()` is how a PyCUDA
    script shares the context warm launches in (the device's primary one); the GPU-less
    stand-in refused it as needing a GPU, so such a script could not be pre-built."""
    script = workload_file(
        HEAD.replace("import pycuda.autoinit\n", "")
        + """
cuda.init()

def main():
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    try:
        x = cuda.mem_alloc(4 * 32)
        SourceModule(SRC).get_function("fill")(x, np.int32(32), block=(32, 1, 1))
        ctx.synchronize()
    finally:
        ctx.pop()
        ctx.detach()
""",
        "primary.py",
    )
    bundle = tmp_path / "p.warm"
    assert _prebuilt_entries(warm, script, bundle) == {"fill"}


@pytest.mark.parametrize(
    ("mangled", "advice"),
    [("_Z6squareIfEvPT_", "get that kernel by its name"), ("_Z5plainPf", "get_function('plain')")],
)
def test_a_mangled_name_is_refused_as_one_not_as_no_such_kernel(
    warm: Warm, workload_file, tmp_path: Path, mangled: str, advice: str
) -> None:
    """With `no_extern_c=True` PyCUDA code gets a C++ kernel by its mangled name; warm said
    `no such kernel in it`, though the module defines it: the name is one warm does not
    serve (README), and the line must say so and how to get the kernel."""
    script = workload_file(
        HEAD
        + f'''
mod = SourceModule("""
template <typename T> __global__ void square(T *x) {{ x[threadIdx.x] *= x[threadIdx.x]; }}
template __global__ void square<float>(float *);
__global__ void plain(float *x) {{ x[threadIdx.x] = 1.f; }}
""", no_extern_c=True)

def main():
    mod.get_function("{mangled}")(cuda.mem_alloc(128), block=(32, 1, 1))
''',
        "mangled.py",
    )
    proc = _prebuild(warm, script, tmp_path / "m.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    assert "mangled.py:" in said and f"get_function('{mangled}')" in said
    assert "mangled" in said.split("get_function", 1)[1] and 'extern "C"' in said
    assert said.endswith(advice) and "no such kernel" not in said


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ('options=[b"-use_fast_math"]', "options"),
        ("options=[None]", "options"),
        ('options=["-DX=1", 5]', "options"),
        ("include_dirs=[None]", "include_dirs"),
    ],
)
def test_an_option_that_is_no_text_is_refused_naming_it(
    warm: Warm, workload_file, tmp_path: Path, arguments: str, named: str
) -> None:
    """An option of bytes or None said `'NoneType' object has no attribute 'startswith'`,
    naming no option; `include_dirs=[None]` was built as `-INone` without a word."""
    script = workload_file(
        HEAD + f"\ndef main():\n    SourceModule(SRC, {arguments})\n", "options_type.py"
    )
    proc = _prebuild(warm, script, tmp_path / "o.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    assert "options_type.py:" in said and f"SourceModule({named}=" in said
    assert "has no attribute" not in said and "bytes-like" not in said


def test_device_to_device_copies_and_async_memsets_are_stood_in_for(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`memcpy_dtod` (a scratch copy of an input before an in-place kernel) and the async
    memsets move no data back to the host: the GPU-less stand-in refused them as needing
    a GPU, so such a script could not be pre-built."""
    script = workload_file(
        HEAD
        + """
def main():
    a, b = cuda.mem_alloc(128), cuda.mem_alloc(128)
    s = cuda.Stream()
    cuda.memset_d32_async(a, 0, 32, s)
    cuda.memset_d8_async(b, 0, 128, s)
    cuda.memcpy_dtod(b, a, 128)
    cuda.memcpy_dtod_async(b, a, 128, s)
    SourceModule(SRC).get_function("fill")(b, np.int32(32), block=(32, 1, 1), stream=s)
""",
        "dtod.py",
    )
    bundle = tmp_path / "d.warm"
    assert _prebuilt_entries(warm, script, bundle) == {"fill"}


def test_a_pycuda_module_run_with_dash_m_falls_back_to_its_main(warm: Warm, tmp_path: Path) -> None:
    """`warm run app.py --pycuda` calls a script's `main()`; `warm run -m app.bench --pycuda`
    of the same code in a package said `defines no function workload(runtime)`."""
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bench.py").write_text(
        HEAD
        + """
def main(argv=None):
    x = cuda.mem_alloc(4 * 32)
    SourceModule(SRC).get_function("fill")(x, np.int32(32), block=(32, 1, 1))

if __name__ == "__main__":
    main()
"""
    )
    bundle = tmp_path / "m.warm"
    proc = warm(
        "run", "-m", "app.bench", "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with Bundle.open(bundle) as b:
        assert {k.entry for k in b.kernels()} == {"fill"}


@pytest.mark.parametrize(
    "launch",
    [
        "grid=(1000 / 256, 1)",  # Python 3's true division: a float grid
        "grid=(0, 1)",
        "shared=-1",
    ],
)
def test_a_launch_size_production_refuses_fails_the_prebuild(
    warm: Warm, workload_file, tmp_path: Path, launch: str
) -> None:
    """Launches are discarded in a GPU-less pre-build, and their grid, block and shared
    size were not checked there: the pre-build passed and production's first launch failed
    on `grid and block take 1 to 3 positive integer sizes`. Arguments are checked in the
    first pass that makes a mistake; so must these be."""
    script = workload_file(
        HEAD
        + f"""
def main():
    x = cuda.mem_alloc(4 * 32)
    SourceModule(SRC).get_function("fill")(x, np.int32(32), block=(32, 1, 1), {launch})
""",
        "sizes.py",
    )
    bundle = tmp_path / "s.warm"
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    assert "sizes.py:" in said and "CompileOnly" in said
    assert any(m in said for m in ("grid and block take", "shared takes", "PyCUDA's launch takes"))
    assert not bundle.exists()


def test_what_the_stand_in_package_lacks_is_named_as_its(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`pycuda.VERSION` (a script's version check) said `module 'pycuda' has no attribute
    'VERSION'`, as if pycuda were broken, where its modules' lacks are named as warm's."""
    script = workload_file(HEAD + "\ndef main():\n    assert pycuda.VERSION >= (2022, 1)\n", "v.py")
    proc = _prebuild(warm, script, tmp_path / "v.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    assert "v.py:" in said and "pycuda.VERSION" in said and "GPU-less stand-in" in said


def test_a_stream_has_pycudas_stream_api(warm: Warm, workload_file, tmp_path: Path) -> None:
    """`drv.Stream()` under the stand-ins was warm's own stream: `s.wait_for_event(e)`
    failed on `'Stream' object has no attribute 'wait_for_event'`, and `is_done()` too."""
    script = workload_file(
        HEAD
        + """
def main():
    s = cuda.Stream()
    e = cuda.Event()
    x = cuda.mem_alloc(4 * 32)
    f = SourceModule(SRC).get_function("fill")
    f(x, np.int32(32), block=(32, 1, 1), stream=s)
    e.record(s)
    s.wait_for_event(e)
    while not s.is_done():
        pass
    f.prepare("Pi").prepared_async_call((1, 1), (32, 1, 1), s, x, 32)
    s.synchronize()
    s.get_flags()
""",
        "streams.py",
    )
    proc = _prebuild(warm, script, tmp_path / "s.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()  # all but what it lacks was stood in for
    assert "streams.py:23" in said and "pycuda.driver.Stream.get_flags" in said, said
