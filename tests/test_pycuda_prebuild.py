"""PyCUDA-style code warmed without a GPU: real nvcc, real bundle, the real CLI.

`examples/pycuda_style.py` and an unmodified PyCUDA script (`from pycuda.compiler import
SourceModule`, `main()`) are pre-built with `--pycuda --arch sm_90`; the bundle's cubins
must hold every kernel. In-process tests check what a launch does in each pass.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import DiscardedReadError, DiscardedReadWarning, ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.cubin import check_cubin, cubin_functions
from warmcli.backends.cuda.nvcc import find_nvcc
from warmcli.backends.toolchain import ToolchainError
from warmcli.bundle.store import Bundle
from warmcli.pycuda import Out, SourceModule, autotune, bound_runtime
from warmcli.pycuda.standins import GPUArray, StandInAllocation
from warmcli.runtime.runtime import Runtime

try:
    find_nvcc()
except ToolchainError as exc:  # pragma: no cover - make test installs nvcc
    pytest.skip(f"nvcc not found: {exc}", allow_module_level=True)

EXAMPLE = EXAMPLES / "pycuda_style.py"
UNMODIFIED = '''
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

mod = SourceModule("""
__global__ void multiply_them(float *dest, float *a, float *b)
{
  const int i = threadIdx.x;
  dest[i] = a[i] * b[i];
}
""")

def main():
    multiply_them = mod.get_function("multiply_them")
    a = np.random.randn(400).astype(np.float32)
    b = np.random.randn(400).astype(np.float32)
    dest = np.zeros_like(a)
    multiply_them(drv.Out(dest), drv.In(a), drv.In(b), block=(400, 1, 1), grid=(1, 1))
'''


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("pycuda")
    path = folder / "pycuda.warm"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(env | {"WARM_HOME": str(folder / "home")})
    proc = warm(
        "run", EXAMPLE, "--pycuda", "--arch", "sm_90", "--allow-discarded-reads",
        "--bundle", path, "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return path, json.loads(proc.stdout)


def test_example_prebuilds_every_kernel_into_sm90_cubins(example) -> None:
    path, doc = example
    _, second, verify = doc["passes"]
    assert doc["verified"] is True and verify["mode"] == "Verify (CompileOnly)"
    assert second["compilation"]["failed"] == 0 and verify["compilation"]["queued"] == 0
    assert second["autotune"]["pending"] == 1, "the block size is picked on a GPU later"
    with Bundle.open(path) as bundle:
        every = bundle.kernels()
        kernels = [k for k in every if k.arch == "sm_90"]  # the cubins; compute_90 is the PTX
        assert sorted(k.label for k in every if k.arch == "compute_90") == sorted(
            k.label for k in kernels
        ), "PTX kept beside each cubin for newer GPUs"
        assert sorted(k.label for k in kernels) == [
            "block_sum[BLOCK=128]",
            "block_sum[BLOCK=256]",
            "block_sum[BLOCK=512]",
            "multiply_them",
            "saxpy",
            "scale",
        ]
        for k in kernels:
            blob = bundle.blob(k.sha256)
            assert blob[:4] == b"\x7fELF"
            assert int.from_bytes(blob[18:20], "little") == 190, "e_machine EM_CUDA"
            check_cubin(blob, "sm_90")
            assert k.arch == "sm_90" and k.symbol in cubin_functions(blob)
        (tune,) = bundle.tunes()
        assert tune.operation == "block_sum" and tune.status == "pending"
        assert sorted(c.name for c in tune.candidates) == ["block=128", "block=256", "block=512"]


def test_discarded_reads_are_refused_without_the_flag(warm: Warm, tmp_path: Path) -> None:
    proc = warm("run", EXAMPLE, "--pycuda", "--arch", "sm_90", "--bundle", tmp_path / "b.warm")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "pycuda_style.py:" in line and "read of drv.Out(float32[65536]) of multiply_them" in line
    assert "Traceback" not in proc.stderr and not (tmp_path / "b.warm").exists()


def test_an_unmodified_pycuda_script_is_warmed(warm: Warm, workload_file, tmp_path: Path) -> None:
    script = workload_file(UNMODIFIED, "hello_gpu.py")
    bundle = tmp_path / "hello.warm"
    doc = warm.json(
        "run", script, "--pycuda", "--arch", "sm_90", "--allow-discarded-reads", "--bundle", bundle
    )
    assert doc["verified"] is True
    assert doc["passes"][1]["compilation"]["compiled"] == 1
    with Bundle.open(bundle) as b:
        assert [k.entry for k in b.kernels() if k.arch == "sm_90"] == ["multiply_them"]
    if importlib.util.find_spec("pycuda") is None:  # without --pycuda, PyCUDA's own imports
        plain = warm("run", script, "--arch", "sm_90", "--bundle", tmp_path / "plain.warm")
        assert plain.returncode == 2 and "No module named 'pycuda'" in plain.stderr
        assert "Traceback" not in plain.stderr


def test_gpu_work_at_import_under_a_prebuild_is_one_line_naming_the_entry(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    at_import = UNMODIFIED + "\nmain()\n"  # its launch at import: there is no GPU to run it
    script = workload_file(at_import, "at_import.py")
    bundle = tmp_path / "at_import.warm"
    proc = warm(
        "run", script, "--pycuda", "--arch", "sm_90", "--allow-discarded-reads", "-b", bundle
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "at_import.py:" in line and "get_driver_version" not in line
    assert "at import" in line and "entry function" in line
    assert not bundle.exists()


def test_copies_of_one_module_share_a_translation_unit() -> None:
    """Three kernels of one module, its helper and globals indented inside PyCUDA's
    `extern "C"` block: one nvcc process builds them all (no clashing C names)."""
    mod = SourceModule("""
        __constant__ float k[2];
        __device__ float bump(float x) { return x + k[0]; }
        __global__ void one(float *x) { x[0] = bump(x[0]); }
        __global__ void two(float *x) { x[1] = bump(x[1]) * k[1]; }
        __global__ void three(float4 *v) { v[0].w = bump(v[0].x); }
    """)
    rt = Runtime(ArchDevice("sm_90"), jobs=1)  # one group: a clash would bisect it
    x = GPUArray(4, np.float32)
    with bound_runtime(rt):
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY):
            for name in ("one", "two", "three"):
                mod.get_function(name)(x, block=(1, 1, 1))
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
            for name in ("one", "two", "three"):
                mod.get_function(name)(x, block=(1, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed, c.compiler_processes) == (3, 0, 1)


def test_out_under_a_discarding_pass_is_a_discarded_read() -> None:
    mod = SourceModule("__global__ void fill(float *x) { x[threadIdx.x] = 1; }")
    dest = np.full(8, 7.0, np.float32)
    rt = Runtime(ArchDevice("sm_90"))
    with bound_runtime(rt), ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
        with pytest.raises(DiscardedReadError, match=r"drv.Out\(float32\[8\]\) of fill"):
            mod.get_function("fill")(Out(dest), block=(8, 1, 1))
        rt.allow_discarded_reads = True
        with pytest.warns(DiscardedReadWarning):
            mod.get_function("fill")(Out(dest), block=(8, 1, 1))
    assert (dest == 7.0).all(), "left as it was"
    assert collector.reader().execution.queued == 2


def test_get_global_is_served_from_the_cubin() -> None:
    mod = SourceModule("""
        __constant__ float table[16];
        __global__ void look(float *x, int i) { x[0] = table[i]; }
    """)
    with bound_runtime(Runtime(ArchDevice("sm_90"))):
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
            pointer, size = mod.get_global("table")
        with pytest.raises(Exception, match="no such __device__ or __constant__ variable"):
            mod.get_global("tables")
    assert isinstance(pointer, StandInAllocation) and size == 64 == pointer.nbytes
    assert collector.reader().compilation.compiled == 1
    cpp = SourceModule(
        """
__device__ float offset;
static __device__ int counter[3];
extern "C" __global__ void use(float *x) { x[0] = offset + counter[0]; }
""",
        no_extern_c=True,
    )
    with bound_runtime(Runtime(ArchDevice("sm_90"))):
        assert cpp.get_global("offset")[1] == 4, "C++ linkage, in warm's namespace"
        assert cpp.get_global("counter")[1] == 12, "a static the batch renamed"


def test_autotune_queues_every_config_then_records_a_pending_tune(tmp_path: Path) -> None:
    source = "__global__ void fill(float *x, int n) { if (threadIdx.x < n) x[threadIdx.x] = B; }"
    modules = {b: SourceModule(source, options=[f"-DB={b}"]) for b in (1, 2)}
    calls: list[int] = []

    @autotune(configs=[{"b": 1}, {"b": 2}], key=["n"])
    def fill(x, b, n):  # a config's argument between the inputs
        calls.append(b)
        modules[b].get_function("fill")(x, np.int32(n), block=(32, 1, 1))

    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    x = GPUArray(32, np.float32)
    with bound_runtime(rt):
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as first:
            assert fill(x, 32) is None
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as second:
            assert fill(x, n=32) is None, "no GPU: pending, nothing launched"
    assert first.reader().compilation.queued == 2
    assert second.reader().compilation.compiled == 2
    assert second.reader().compilation.compiler_processes == 1, "variants batch as defines"
    assert calls == [1, 2, 1, 2], "each config run once recorded, to find its kernel, then"
    # once discarded, its launches checked as a GPU would check them (test_trial41)
    (record,) = rt.tunes.unpersisted()
    assert record.status == "pending" and record.shape_key == "n=32"
    assert [c.name for c in record.candidates] == ["b=1", "b=2"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Bundle.open(tmp_path / "t.warm", write=True) as bundle:
            assert rt.persist(bundle) == (2, 1)


MACRO_ORDERS = (["-DX=777002", "-UX"], ["-UX", "-DX=777002"], ["-DX=777002", "-DX=777003"])
MACRO_KERNEL = """__global__ void NAME(int *x) {
#ifdef X
  x[threadIdx.x] = X;
#else
  x[threadIdx.x] = 777001;
#endif
}"""
MACRO_SCRIPT = """
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

MODULES = [
    SourceModule({kernel!r}.replace("NAME", f"setv{{i}}"), options=o)
    for i, o in enumerate({orders!r})
]


def main():
    x = drv.mem_alloc(16)
    for i, mod in enumerate(MODULES):
        mod.get_function(f"setv{{i}}")(x, block=(4, 1, 1), grid=(1, 1))
"""


def _stored_value(ptx: bytes) -> int:
    (value,) = {v for v in (777001, 777002, 777003) if str(v).encode() in ptx}
    return value


def test_defines_and_undefines_keep_nvccs_order(warm: Warm, tmp_path: Path) -> None:
    """`-D` and `-U` naming one macro give the value nvcc's own order gives (`-DX=1 -UX`:
    undefined), checked against nvcc's PTX of the same source and options."""
    script = tmp_path / "orders.py"
    script.write_text(MACRO_SCRIPT.format(kernel=MACRO_KERNEL, orders=list(MACRO_ORDERS)))
    path = tmp_path / "orders.warm"
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "--bundle", path, "-q")
    assert proc.returncode == 0, proc.stderr
    with Bundle.open(path) as bundle:
        ptx = {k.entry: bundle.blob(k.sha256) for k in bundle.kernels() if k.arch == "compute_90"}
    for i, options in enumerate(MACRO_ORDERS):
        source = tmp_path / f"setv{i}.cu"
        source.write_text('extern "C" ' + MACRO_KERNEL.replace("NAME", f"setv{i}"))
        out = tmp_path / f"setv{i}.ptx"
        nvcc = [str(find_nvcc()), "-ptx", "-arch=sm_90", *options, str(source), "-o", str(out)]
        subprocess.run(nvcc, check=True, capture_output=True)
        expected = _stored_value(out.read_bytes())
        assert expected == (777001, 777002, 777003)[i], "nvcc reads them in their order"
        assert _stored_value(ptx[f"setv{i}"]) == expected, options


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("drv.mem_get_info()", "pycuda.driver.mem_get_info"),
        ("import pycuda.cumath", "pycuda.cumath"),
        ("from pycuda.elementwise import ElementwiseKernel", "pycuda.elementwise"),
        ("pycuda.autoinit.device.total_memory()", "pycuda.driver.Device.total_memory"),
        ("drv.Device(0).get_attribute(1)", "pycuda.driver.Device.get_attribute"),
        ("pycuda.autoinit.context.get_device().can_access_peer(0)", "Device.can_access_peer"),
        ("pycuda.autoinit.context.get_api_version()", "pycuda.driver.Context.get_api_version"),
        ("drv.Context.get_current()", "pycuda.driver.Context.get_current"),  # PyCUDA's static
        ("drv.Context.set_limit(0, 1024)", "pycuda.driver.Context.set_limit"),
        ("drv.Device.get_attribute(0)", "pycuda.driver.Device.get_attribute"),
    ],
)
def test_what_the_stand_ins_lack_is_named_as_theirs(
    warm: Warm, workload_file, tmp_path: Path, line: str, named: str
) -> None:
    script = workload_file(
        "import pycuda.autoinit\nimport pycuda.driver as drv\n\ndef main():\n    " + line + "\n",
        "lacking.py",
    )
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "l.warm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (said,) = proc.stderr.strip().splitlines()
    assert "lacking.py:5" in said and named in said and "GPU-less stand-in" in said
    assert "warm run --pycuda, and --arch" not in said  # it was given both
