"""What a `Kernel` is built from, checked where it is built; nothing the key leaves out
reaches the compiler.

A kernel's `name` is a label for people: it is in no key, so it must not be in the
compiled text either (a `#line "{name}.c"` made `__FILE__` differ between the build that
stored a key and the process it was served to). A define's numpy bool is a bool (`1`), not
`True` (an undefined macro, false in `#if`); numpy numbers key as the Python numbers they
hold; any other value, a source that is no `str`, options given as one `str` or holding
something that is no `str`, and a name with a trailing line break are one clear error
at `Kernel(...)`. Every valid kernel keys as it did (hard-coded keys). Real compilers
(the host C compiler, NVRTC), the real CLI and processes of their own (those warming and
serving under another `KNAME` started; the others forked, `tests/forked_cli.py`).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.compiler import CompileUnit
from warmcli.backends.host.building import translation_unit as host_unit
from warmcli.backends.host.compiler import HostCompiler
from warmcli.kernel import Kernel, kernel_key

FILE_C = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = (float)sizeof(__FILE__); }"
FILE_CUDA = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = (float)sizeof(__FILE__); }'
NAMES = ("alpha", "a-much-longer-name")
PLAIN = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 2; }"
BIAS = "void k(float *x, int n) {\n#if USE_BIAS\n  x[0] = 1;\n#else\n  x[0] = 0;\n#endif\n}"


def host_units(kernels: list[Kernel]) -> list[CompileUnit]:
    ident = HostCompiler().toolchain.identity
    return [CompileUnit(kernel_key(k, "host", ident), k, "host") for k in kernels]


def test_two_names_compile_to_the_same_host_text_and_binary() -> None:
    a, b = host_units([Kernel(FILE_C, "k", "Pi", name=n) for n in NAMES])
    assert a.key == b.key
    assert host_unit([a]) == host_unit([b])
    compiler = HostCompiler()
    assert compiler.compile_group([a]).binary == compiler.compile_group([b]).binary


def test_two_names_compile_to_the_same_nvrtc_cubin_and_ptx() -> None:
    from warmcli.backends.cuda.nvcc import translation_unit as cuda_unit
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    compiler = NvrtcCompiler(ptx="auto")
    ident = compiler.toolchain.identity
    kernels = [
        Kernel(FILE_CUDA, "k", "P", language="cuda", options=("-lineinfo",), name=n) for n in NAMES
    ]
    a, b = [CompileUnit(kernel_key(k, "sm_90", ident), k, "sm_90") for k in kernels]
    assert a.key == b.key and cuda_unit([a]) == cuda_unit([b])
    built_a, built_b = compiler.compile_group([a]), compiler.compile_group([b])
    assert built_a.binary == built_b.binary and built_a.ptx == built_b.ptx


NAMED_WORKLOAD = """\
import os
from warmcli import Kernel
DEVICE = "host"
K = Kernel({source!r}, "k", "Pi", name=os.environ["KNAME"])
def workload(rt):
    x = rt.buffer(4)
    rt.launch(K, x, 4)
    return [x]
"""
SERVE = """\
import json, sys, warmcli
sys.path.insert(0, sys.argv[1])
import workload
warmcli.use_bundle(None if sys.argv[2] == "none" else sys.argv[2])
rt = warmcli.runtime("host")
print(json.dumps([float(rt.read(b)[0]) for b in workload.workload(rt)]))
"""


def test_a_renamed_kernel_served_computes_what_it_computes_cold(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Warmed under one name, served under another (the same key): the same __FILE__."""
    workload_file(NAMED_WORKLOAD.format(source=FILE_C))
    bundle = tmp_path / "n.warm"
    made = Warm(dict(warm.env, KNAME=NAMES[0]))("run", tmp_path / "workload.py", "-b", bundle)
    assert made.returncode == 0, made.stderr
    other = Warm(dict(warm.env, KNAME=NAMES[1]))
    hit = other.production(SERVE, tmp_path, bundle)
    cold = other.production(SERVE, tmp_path, "none")
    assert hit == cold == [float(len("k.c") + 1)]


def test_a_compile_error_still_names_the_kernel(warm: Warm, workload_file) -> None:
    path = workload_file(
        "from warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void k(float *x) {\\n  x[0] = nope;\\n}', 'k', 'P', name='mine')\n"
        "def workload(rt):\n    rt.launch(K, rt.buffer(4))\n"
    )
    proc = warm("run", path, "-b", path.with_suffix(".warm"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "kernel mine failed to compile" in proc.stderr and "k.c:2:" in proc.stderr


def run_host(kernel: Kernel) -> float:
    (unit,) = host_units([kernel])
    from warmcli.backends.host.device import HostDevice

    built = HostCompiler().compile_group([unit])
    device = HostDevice()
    fn = device.get_function(device.load_module(built.binary), built.symbols[unit.key], kernel)
    x = np.full(4, 7, dtype=np.float32)
    fn(x.ctypes.data, 4)
    return float(x[0])


@pytest.mark.parametrize("value", [np.bool_(True), np.True_, True])
def test_a_numpy_bool_define_is_the_bool(value: object) -> None:
    kernel = Kernel(BIAS, "k", "Pi", defines={"USE_BIAS": value})
    plain = Kernel(BIAS, "k", "Pi", defines={"USE_BIAS": True})
    assert kernel.define("USE_BIAS") == "1" and kernel.label == "k[USE_BIAS=1]"
    assert kernel_key(kernel, "host", "cc") == kernel_key(plain, "host", "cc")
    assert run_host(kernel) == 1.0
    off = Kernel(BIAS, "k", "Pi", defines={"USE_BIAS": np.bool_(False)})
    assert off.define("USE_BIAS") == "0" and run_host(off) == 0.0


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (np.int32(4), 4),
        (np.uint64(2**63), 2**63),
        (np.int8(-3), -3),
        (np.float64(0.5), 0.5),
        (np.float64(1e16), 1e16),
        (np.float32(0.25), 0.25),
        (np.float32(0.1), 0.1),  # as the user wrote it, not float32's nearest double
    ],
)
def test_numpy_numbers_key_as_the_python_numbers(value: object, plain: object) -> None:
    kernel = Kernel(PLAIN, "k", "Pi", defines={"V": value})
    assert kernel.defines == Kernel(PLAIN, "k", "Pi", defines={"V": plain}).defines


@pytest.mark.parametrize(
    "value", [None, 1j, b"1", [1], (1,), object(), Fraction(1, 2), Decimal("1.5"), np.array(1)]
)
def test_a_define_value_that_is_no_text_or_number_is_refused(value: object) -> None:
    with pytest.raises(TypeError, match=r"kernel k: define V: .*str, bool, int or float"):
        Kernel(PLAIN, "k", "Pi", defines={"V": value})


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"source": PLAIN.encode()}, TypeError, r"kernel k: source is .*str.*not bytes"),
        ({"source": None}, TypeError, r"kernel k: source is .*str.*not None"),
        ({"options": "-O3"}, TypeError, r"kernel k: options='-O3' is one str.*options=\('-O3',\)"),
        ({"options": (Path("-O1"),)}, TypeError, r"kernel k: option 1 .*PosixPath"),
        ({"options": ("-O2", 3)}, TypeError, r"kernel k: option 2 .*int"),
        ({"options": 3}, TypeError, r"kernel k: options .*tuple"),
        ({"entry": "k\n"}, ValueError, r"kernel entry 'k\\n' is not a C identifier"),
        ({"entry": b"k"}, TypeError, r"kernel entry b'k' is not a C identifier"),
        ({"defines": {"A\n": 1}}, ValueError, r"kernel k: define 'A\\n' is not an identifier"),
        ({"defines": {5: 1}}, TypeError, r"kernel k: define 5 is not an identifier"),
        ({"defines": [("A", 1), ("A", 2)]}, ValueError, r"kernel k: define 'A' is given twice"),
        ({"defines": [("A", 1, 2)]}, TypeError, r"kernel k: defines .*\(name, value\) pairs"),
        ({"defines": ["AB"]}, TypeError, r"kernel k: defines .*\(name, value\) pairs"),
        ({"defines": "AB"}, TypeError, r"kernel k: defines .*mapping"),
        ({"defines": 3}, TypeError, r"kernel k: defines .*mapping"),
        ({"name": 5}, TypeError, r"kernel k: name is .*str.*not int"),
    ],
)
def test_a_kernel_made_of_the_wrong_things_is_refused_where_it_is_made(
    arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    given: dict[str, object] = {"source": PLAIN, "entry": "k", "params": "Pi", **arguments}
    source, entry, params = given.pop("source"), given.pop("entry"), given.pop("params")
    with pytest.raises(error, match=message):
        Kernel(source, entry, params, **given)  # type: ignore[arg-type]


def test_defines_given_as_pairs_are_the_mapping() -> None:
    pairs = Kernel(PLAIN, "k", "Pi", defines=[("B", 2), ["A", np.True_]])
    mapping = Kernel(PLAIN, "k", "Pi", defines={"A": True, "B": 2})
    assert pairs.defines == mapping.defines == (("A", "1"), ("B", "2"))
    assert kernel_key(pairs, "host", "cc") == kernel_key(mapping, "host", "cc")
    assert Kernel(PLAIN, "k", "Pi", options=None).options == ()


def test_a_workload_giving_options_as_one_string_is_one_line(warm: Warm, workload_file) -> None:
    path = workload_file(
        "from warmcli import Kernel\nDEVICE = 'host'\n"
        f"K = Kernel({PLAIN!r}, 'k', 'Pi', options='-O3')\n"
        "def workload(rt):\n    pass\n"
    )
    proc = warm("run", path, "-b", path.with_suffix(".warm"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "options='-O3' is one str" in proc.stderr


S = "void k(float *x, int n) { x[0] = A; }"
PINNED = [  # keys valid kernels had before these checks: bundles made then stay valid
    (Kernel(S, "k", "Pi"), "e34573e9efe95d1137f5a3a7d6e8d2e66a6f3dd8fcfc9371eabf295ec9ac817e"),
    (
        Kernel(
            S, "k", "Pi", name="alpha",
            defines={"A": True, "B": 3, "C": 0.5, "D": "x y", "E": False},
        ),
        "95fccff7f2d344b8f0431605af9f8b3c3473d6bffbae96cc81541a97cfbe3dd7",
    ),
    (
        Kernel(S, "k", "Pi", language="cuda", options=["-O3", "-lineinfo"], defines={"A": 1}),
        "be115728391c925875234116b0f62c284fdc1c00c07f3e1afe47027b0420cdec",
    ),
    (
        Kernel(S, "k", "Pi", options=("-O2",), defines={"A": -7, "Z": 1e16}),
        "3cf95d38c4c3b8045dff13588fc18e0de8c5cd4a6afcd3dc906d84b037040b15",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("kernel", "key"), PINNED, ids=range(len(PINNED)))
def test_valid_kernels_key_as_they_did(kernel: Kernel, key: str) -> None:
    assert kernel_key(kernel, "host", "cc:gcc 12") == key
