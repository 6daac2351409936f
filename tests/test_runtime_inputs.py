"""What a workload hands the runtime is checked, never passed on to crash or mislead.

A buffer of Python objects (`upload([1.0, None, 3.0])`), strings or records holds no
numbers a kernel could read: launched on, it crashed the process (a float kernel wrote
over the object pointers). A shape or a launch size given as a numpy integer works as
an int does; a float shape is a clear error; a scalar too large for its float letter
is a `LaunchError`, not Python's `OverflowError`. Real host kernels, a real `warm run`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, LaunchError, Runtime
from warmcli.backends.host import HostDevice

FILL = Kernel("void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 1.5f; }", "k", "Pi")
SET = Kernel("void s(float *x, float v) { x[0] = v; }", "s", "Pf")
SETD = Kernel("void s(double *x, double v) { x[0] = v; }", "s", "Pd")


@pytest.fixture
def rt():
    runtime = Runtime(HostDevice())
    yield runtime
    runtime.close()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ([1.0, None, 3.0], "object"),
        ([object()], "object"),
        (["a"], "str"),
        ([b"ab"], "bytes"),
        (np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]), "record"),
        (np.zeros(2, dtype="V4"), "void"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
    ],
)
def test_upload_of_what_holds_no_numbers_is_refused_naming_its_dtype(
    rt: Runtime, data: object, kind: str
) -> None:
    with pytest.raises(ValueError, match=rf"dtype .*{kind}.* not numeric"):
        rt.upload(data)


@pytest.mark.parametrize("dtype", ["object", "U4", "S4", "V8", "datetime64[s]", "timedelta64"])
def test_a_buffer_of_a_non_numeric_dtype_is_refused(rt: Runtime, dtype: str) -> None:
    with pytest.raises(ValueError, match=r"dtype .* not numeric"):
        rt.buffer(4, dtype)


def test_a_bogus_dtype_or_shape_is_a_clear_value_error(rt: Runtime) -> None:
    with pytest.raises(ValueError, match=r"dtype 'floatx'"):
        rt.buffer(4, "floatx")
    with pytest.raises(ValueError, match=r"shape .*2\.5"):
        rt.buffer(2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"shape .*-1"):
        rt.buffer(-1)
    with pytest.raises(ValueError, match=r"shape .*'4'"):
        rt.buffer(["4"])  # type: ignore[list-item]


def test_numeric_buffers_still_work_and_numpy_integers_are_sizes(rt: Runtime) -> None:
    assert rt.buffer(np.int64(3), "float32").shape == (3,)
    assert rt.buffer((np.int32(2), 2), "int32").shape == (2, 2)
    for dtype in ("bool", "int8", "uint64", "float16", "float64", "complex64"):
        assert rt.buffer(2, dtype).dtype == np.dtype(dtype).name
    assert rt.upload([1, 2]).dtype == "int64"
    assert rt.upload(np.ones(3, np.float32)).dtype == "float32"
    b = rt.buffer(4)
    rt.launch(FILL, b, 4, grid=np.int64(2), block=np.int32(3))
    rt.launch(FILL, b, np.int32(4), grid=(np.int64(1), 2), block=[np.uint8(1)])
    assert rt.read(b).tolist() == [1.5] * 4


@pytest.mark.parametrize(
    ("grid", "block", "shared"),
    [(1.5, 1, 0), (1, (2.0,), 0), (1, 1, -1), (1, 1, 1.5), ("2", 1, 0), (0, 1, 0)],
)
def test_a_launch_size_that_is_no_positive_integer_is_refused(
    rt: Runtime, grid: object, block: object, shared: object
) -> None:
    with pytest.raises(ValueError, match=r"grid|block|shared"):
        rt.launch(FILL, rt.buffer(4), 4, grid=grid, block=block, shared=shared)  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", [SET, SETD])
@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_a_float_argument_past_every_float_is_a_launch_error(
    rt: Runtime, kernel: Kernel, value: int
) -> None:
    b = rt.buffer(1, "float32" if kernel is SET else "float64")
    with pytest.raises(LaunchError, match=r"argument 2 \('[fd]', float(32|64)\) must be a real"):
        rt.launch(kernel, b, value)
    rt.launch(kernel, b, 10**30)  # a large int a float holds still passes
    assert rt.read(b)[0] == pytest.approx(1e30)


OBJECTS = """\
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 1.5f; }", "k", "Pi")
def workload(rt):
    b = rt.upload([1.0, None, 3.0])
    rt.launch(K, b, 3)
    rt.read(b)
"""


def test_a_workload_uploading_objects_gets_one_line_and_no_crash(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    proc = warm("run", workload_file(OBJECTS), "-b", tmp_path / "o.warm")
    assert proc.returncode not in (0, -11, 139), proc.stderr
    assert "dtype object" in proc.stderr and "not numeric" in proc.stderr
    # and a plain production process: a ValueError, never a segfault
    served = subprocess.run(
        [sys.executable, "-c", OBJECTS + "import warmcli; workload(warmcli.runtime('host'))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=warm.env,
    )
    assert served.returncode == 1, served.stderr
    assert "ValueError" in served.stderr and "dtype object" in served.stderr


SRC = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 2; }"


def test_kernel_options_as_a_list_or_generator_still_work(rt: Runtime) -> None:
    for options in (["-O1"], ("-O1",), (o for o in ["-O1"])):
        kernel = Kernel(SRC, "k", "Pi", options=options)  # type: ignore[arg-type]
        assert kernel.options == ("-O1",)
    b = rt.buffer(2)
    rt.launch(Kernel(SRC, "k", "Pi", options=["-O1"], defines={}), b, 2)
    assert rt.read(b).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("name", ["A\n", "A\r", "1A", "A B"])
def test_a_define_name_that_is_no_identifier_is_refused_before_any_compile(name: str) -> None:
    with pytest.raises(ValueError, match=r"define .* is not an identifier"):
        Kernel(SRC, "k", "Pi", defines={name: 1})
