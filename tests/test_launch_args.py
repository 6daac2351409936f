"""Launch arguments are checked against the kernel's letters, not guessed.

Real host kernels through ctypes, and the real CLI: a wrong argument is a one-line
`LaunchError` naming the kernel, the position, the letter and what was given, in the
first pass that makes the launch (CompileOnly), with exit 2 and no bundle left.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, LaunchError, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host import HostDevice

SCALE = Kernel(
    "void scale(float *x, float s, int n) { for (int i = 0; i < n; i++) x[i] *= s; }",
    "scale",
    "Pfi",
)
# Every host letter: each scalar is stored into out[] as a double, so it can be read back.
ALL = Kernel(
    """
#include <stdbool.h>
#include <stdint.h>
void all(double *out, int8_t b, uint8_t B, int16_t h, uint16_t H, int32_t i, uint32_t I,
         long l, unsigned long L, long long q, unsigned long long Q, bool t, float f, double d) {
    out[0] = b; out[1] = B; out[2] = h; out[3] = H; out[4] = i; out[5] = I; out[6] = l;
    out[7] = L; out[8] = q; out[9] = Q; out[10] = t; out[11] = f; out[12] = d;
}""",
    "all",
    "PbBhHiIlLqQ?fd",
)
EDGES = (-128, 255, -32768, 65535, -(2**31), 2**32 - 1, -(2**63), 2**64 - 1, 2**62, 2**63, True)


@pytest.fixture
def rt():
    runtime = Runtime(HostDevice())
    yield runtime
    runtime.close()


def test_every_letter_passes_its_range_edges(rt: Runtime) -> None:
    out = rt.buffer(13, "float64")
    rt.launch(ALL, out, *EDGES, np.float32(1.5), 2.25)
    assert rt.read(out).tolist() == [float(v) for v in (*EDGES, 1.5, 2.25)]


@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (2, 128, r"argument 2 \('b', int8\) must be an integer in \[-128, 127\], got 128 \(int\)"),
        (3, -1, r"argument 3 \('B', uint8\) must be an integer in \[0, 255\], got -1"),
        (7, 2**32, r"argument 7 \('I', uint32\) .* got 4294967296 \(int\)"),
        (9, 2**64, r"argument 9 \('L', uint64\) .* got 18446744073709551616"),
        (7, 1.0, r"argument 7 \('I', uint32\) must be an integer .* got 1.0 \(float\)"),
        (12, 2, r"argument 12 \('\?', bool\) must be True, False, 0 or 1, got 2 \(int\)"),
        (13, 1e39, r"argument 13 \('f', float32\) must be a real number .* got 1e\+39"),
        (14, "2", r"argument 14 \('d', float64\) must be a real number .* got '2' \(str\)"),
    ],
)
def test_a_value_outside_its_letter_is_refused(
    rt: Runtime, position: int, value: object, message: str
) -> None:
    args: list[object] = [rt.buffer(13, "float64"), *EDGES, 1.5, 2.25]
    args[position - 1] = value
    with pytest.raises(LaunchError, match="kernel all: " + message):
        rt.launch(ALL, *args)


def test_buffers_only_for_pointers_and_counts_checked_in_every_mode(rt: Runtime) -> None:
    x = rt.upload(np.ones(4, np.float32))
    for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE, ProcessMode.EXECUTE):
        with ProcessModeOverride(mode):
            with pytest.raises(LaunchError, match=r"argument 3 \('i', int32\).*got Buffer\(host"):
                rt.launch(SCALE, x, 2.0, x)  # was passed as an address: a segfault
            with pytest.raises(LaunchError, match=r"argument 3 \('i', int32\).*got 1099511627776"):
                rt.launch(SCALE, x, 2.0, 2**40)  # was truncated to 0
            with pytest.raises(LaunchError, match=r"argument 1 \('P', pointer.*got 1.5 \(float\)"):
                rt.launch(SCALE, 1.5, 2.0, 4)
            with pytest.raises(LaunchError, match=r"takes 3 argument\(s\) \('Pfi'\), got 2"):
                rt.launch(SCALE, x, 2.0)
    rt.launch(SCALE, x, np.float64(3), np.int64(4))  # numpy scalars are numbers too
    assert rt.read(x).tolist() == [3.0] * 4


def test_unknown_letters_list_every_accepted_one_and_half_is_cuda_only() -> None:
    with pytest.raises(ValueError, match=r"unknown parameter letter\(s\) 'x' in 'Px'; accepted: "):
        Kernel("void k(float *p, int x) {}", "k", "Px")
    try:
        Kernel("void k(float *p, int x) {}", "k", "Px")
    except ValueError as exc:
        for letter in "PbBhHiIlLqQ?efd":
            assert f" {letter} (" in str(exc)
    with pytest.raises(ValueError, match="'e' \\(float16\\) is for CUDA kernels only"):
        Kernel("void k(float *p) {}", "k", "Pe")
    Kernel('extern "C" __global__ void k(float *p, __half h) {}', "k", "Pe", language="cuda")


def test_a_wrong_argument_stops_warm_run_in_its_first_pass(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(
        "import numpy as np\n"
        "from warmcli import Kernel\n"
        'DEVICE = "host"\n'
        'K = Kernel("void k(float *x, int n) { x[0] = n; }", "k", "Pi")\n'
        "def workload(rt):\n"
        "    x = rt.upload(np.ones(3, np.float32))\n"
        "    rt.launch(K, x, 2**40)\n"
    )
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "during CompileOnly" in proc.stderr
    assert "workload.py:7: LaunchError: kernel k: argument 2 ('i', int32)" in proc.stderr
    assert "got 1099511627776 (int)" in proc.stderr
    assert not bundle_path.exists()
