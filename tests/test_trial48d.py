"""A new user's trial of the README's "PyCUDA code" on a machine with no GPU and no pycuda:
unmodified PyCUDA scripts pre-built with `warm run SCRIPT --pycuda --arch sm_90`. What
differed from the README, or said too little to act on, is pinned here. The real CLI
(forked), real NVRTC, real SQLite bundles.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

if find_nvrtc() is None:  # pragma: no cover - make test installs NVRTC
    pytest.skip("NVRTC not installed", allow_module_level=True)

HEAD = """
import argparse
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

SRC = "__global__ void fill(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1; }"
mod = SourceModule(SRC)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=128)
    return p.parse_args()


def main(args):
    x = drv.mem_alloc(args.n * 4)
    mod.get_function("fill")(x, np.int32(args.n), block=(args.n, 1, 1), grid=(1, 1))
"""


def _prebuild(warm: Warm, script: Path, bundle: Path):
    return warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)


def test_main_passed_parsed_args_by_its_block_says_what_warm_passed_it(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`if __name__ == "__main__": main(parse_args())`, the usual script: warm never runs
    that block and passes `main` its runtime, so the script failed on
    `AttributeError: 'Runtime' object has no attribute 'n'`, saying nothing of why or what
    to do. It must say what its block passes and how to warm it, in one line, store nothing."""
    script = workload_file(HEAD + '\nif __name__ == "__main__":\n    main(parse_args())\n')
    bundle = tmp_path / "b.warm"
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert "'Runtime' object has no attribute 'n'" in line, line
    assert "calls main(parse_args())" in line, line
    assert "warm passed main its runtime" in line, line
    assert "Traceback" not in proc.stderr
    assert not bundle.exists()


def test_main_passed_a_name_by_its_block_names_it(warm: Warm, workload_file, tmp_path: Path):
    """The same for `args = parse_args()` then `sys.exit(main(args))`: the block's argument
    as written (`args`) is named."""
    script = workload_file(
        "import sys\n"
        + HEAD
        + '\nif __name__ == "__main__":\n    args = parse_args()\n    sys.exit(main(args))\n'
    )
    proc = _prebuild(warm, script, tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    assert "calls main(args)" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_main_that_uses_what_warm_passes_it_is_unchanged(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A `main(rt)` whose block passes something else but that works with the runtime it is
    given (the README's "else the runtime") still warms: the hint is only for a failure."""
    script = workload_file(
        HEAD.replace("def main(args):", "def main(args):\n    args = parse_args()")
        + '\nif __name__ == "__main__":\n    main(parse_args())\n'
    )
    bundle = tmp_path / "b.warm"
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 0, proc.stderr
    assert "bundle is complete" in proc.stdout


PRIMARY = """
import numpy as np
import pycuda.autoprimaryctx
import pycuda.driver as drv
from pycuda.autoprimaryctx import context, device
from pycuda.compiler import SourceModule

SRC = "__global__ void fill(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1; }"


def main():
    assert device.compute_capability() == (9, 0)
    x = drv.mem_alloc(128 * 4)
    SourceModule(SRC).get_function("fill")(x, np.int32(128), block=(128, 1, 1), grid=(1, 1))
    context.synchronize()
"""


def test_autoprimaryctx_is_a_stand_in_as_autoinit_is(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`import pycuda.autoprimaryctx`, PyCUDA's autoinit on the device's primary context
    (the one warm launches in), failed a GPU-less pre-build at import (`not in warm's
    GPU-less stand-in`), where `pycuda.autoinit` is one: it is the same stand-in now, its
    `context` and `device` too; it stores what the autoinit script stores."""
    bundle, other = tmp_path / "b.warm", tmp_path / "plain.warm"
    proc = _prebuild(warm, workload_file(PRIMARY), bundle)
    assert proc.returncode == 0, proc.stderr
    assert "bundle is complete" in proc.stdout
    plain = workload_file(PRIMARY.replace("autoprimaryctx", "autoinit"), "plain.py")
    assert _prebuild(warm, plain, other).returncode == 0
    assert _kernels(bundle) == _kernels(other)


def _kernels(bundle: Path) -> set[tuple[str, str]]:
    from warmcli.bundle.store import Bundle

    with Bundle.open(bundle) as b:
        return {(k.entry, k.key) for k in b.kernels()}


def test_devices_says_why_an_installed_pycuda_lists_no_gpu(tmp_path: Path) -> None:
    """`pip install 'warmcli[cuda]'` on a machine whose pycuda cannot load the driver
    (libcuda missing: a CI box with no GPU): `warm devices` listed the host only and said
    nothing, where a missing pycuda is said (`pycuda is not installed: ...`) and `warm run
    --device cuda` says why (`CUDA devices need pycuda and an NVIDIA driver (libcuda...)`).
    It says that same reason. A fake pycuda package (no pycuda here): its driver module
    fails to import as PyCUDA's does without libcuda; the rest is the real CLI."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    fake = tmp_path / "fake" / "pycuda"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "driver.py").write_text(
        'raise ImportError("libcuda.so.1: cannot open shared object file: No such file")\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{fake.parent}", WARM_HOME=str(tmp_path / "h"))
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "devices"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "no CUDA device: CUDA devices need pycuda and an NVIDIA driver" in said, said
    assert "libcuda.so.1: cannot open shared object file" in said, said
    assert "pycuda is not installed" not in said


GPUARRAY = """
import numpy as np
import pycuda.autoinit
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

SRC = "__global__ void twice(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2; }"


def main():
    x = gpuarray.zeros((8, 8), dtype=np.float32)
    assert x.flags.c_contiguous and not x.flags.f_contiguous and x.flags.forc
    assert x.T.flags.f_contiguous and not x.T.flags.c_contiguous
    SourceModule(SRC).get_function("twice")(x, np.int32(64), block=(64, 1, 1), grid=(1, 1))
    AFTER
"""


def test_gpuarray_flags_are_its_layout_and_arithmetic_says_to_run_on_a_gpu(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A stand-in `GPUArray`'s `flags` (PyCUDA's `c_contiguous`, `f_contiguous`, `forc`,
    which code checks before a launch) failed the pre-build: `GPUArray.flags: a GPU-less
    stand-in only has a shape ...; elementwise and reduction kernels of pycuda.gpuarray
    are not warm's`, though flags are shape and no kernel. They are the stand-in's layout
    now. Its arithmetic, refused, says what the README says it does: run the script on a
    GPU, without --arch."""
    ok = workload_file(GPUARRAY.replace("AFTER", "pass"), "flags.py")
    proc = _prebuild(warm, ok, tmp_path / "a.warm")
    assert proc.returncode == 0, proc.stderr
    arith = workload_file(GPUARRAY.replace("AFTER", "x = x * 2"), "arith.py")
    bundle = tmp_path / "b.warm"
    proc = _prebuild(warm, arith, bundle)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "GPUArray *: " in proc.stderr, proc.stderr
    assert "run the script on a GPU (warm run --pycuda, without --arch)" in proc.stderr
    assert not bundle.exists()


IDLE = """
import pycuda.autoinit
from pycuda.compiler import SourceModule

mod = SourceModule("__global__ void k(float *x) { x[threadIdx.x] = 1; }")


def main():
    print("no launch today")
"""


def test_a_main_that_ran_and_launched_nothing_is_not_told_its_block_did_not_run(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`if __name__ == "__main__": main()` with a `main()` that launched nothing: warm ran
    that `main` (its print shows each pass), yet its note said `the workload did nothing:
    its if __name__ == "__main__": block does not run under warm ...: call that code from
    there`, which is what warm did. A block that only calls the entry gets no such note (the
    run still says it launched nothing); one with work of its own still does."""
    only = workload_file(IDLE + '\nif __name__ == "__main__":\n    raise SystemExit(main())\n')
    proc = _prebuild(warm, only, tmp_path / "a.warm")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("no launch today") == 3, proc.stdout
    assert "__main__" not in proc.stdout, proc.stdout
    assert "launched nothing and tuned nothing" in proc.stdout, proc.stdout
    more = IDLE + '\nif __name__ == "__main__":\n    import pycuda.driver as drv\n'
    more += '    mod.get_function("k")(drv.mem_alloc(64), block=(16, 1, 1))\n    main()\n'
    proc = _prebuild(warm, workload_file(more, "more.py"), tmp_path / "b.warm")
    assert proc.returncode == 0, proc.stderr
    assert "the workload did nothing: its `if __name__" in proc.stdout, proc.stdout
