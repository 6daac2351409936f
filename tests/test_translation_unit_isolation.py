"""A kernel's binary never depends on the kernels that share its compile batch.

A kernel whose text can reach past what warm isolates in a shared translation unit (an
`#include`, a pragma, a directive spelt through a splice, digraph or trigraph, ...) is
compiled in a unit of its own, exactly as alone; the others still batch. Every compile
here is real: the host C compiler through the real CLI and the host device, NVRTC and
nvcc comparing cubin and PTX bytes alone and batched. Text warm writes around a kernel
(its banner comment, its `#line`) cannot be changed by a label, name or define value.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from bench.compile import variants
from warmcli.backends.batch import compile_batch, plan_groups
from warmcli.backends.compiler import Compiler, CompileUnit
from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.host.device import HostDevice
from warmcli.backends.sharing import shares_unit
from warmcli.kernel import Kernel, kernel_key

MATH = (
    "#include <math.h>\n"
    "void sq(float *x, int n) { for (int i = 0; i < n; i++) x[i] = sqrtf(x[i]); }"
)
PI = (
    "#ifndef M_PI\n#define M_PI 3.0\n#endif\n"
    "void pi(float *x, int n) { for (int i = 0; i < n; i++) x[i] = (float)M_PI; }"
)
FAST_MATH = '#pragma GCC optimize("fast-math")\nvoid fm(float *x, int n) { x[0] = 0; }'
NAN_TEST = "void isnan_(float *x, int n) { volatile float z = 0; float q = z / z; x[0] = q != q; }"
WORKLOAD = """\
import numpy as np
from warmcli import Kernel
DEVICE = "host"
A = Kernel({math!r}, "sq", "Pi")
FM = Kernel({fast!r}, "fm", "Pi")
B = Kernel({pi!r}, "pi", "Pi")
N = Kernel({nan!r}, "isnan_", "Pi")
F = [Kernel("void f%d(float *x, int n) {{ x[0] += %d; }}" % (i, i), "f%d" % i, "Pi")
     for i in range(4)]
def workload(rt):
    x = rt.upload(np.ones(4, dtype=np.float32))
    rt.launch(A, x, 4)
    rt.launch(FM, x, 4)
    for f in F:
        rt.launch(f, x, 4)
    y = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(B, y, 4)
    z = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(N, z, 4)
    return [y, z]
"""
SERVE = """\
import json, sys, warmcli
sys.path.insert(0, sys.argv[1])
import workload
warmcli.use_bundle(None if sys.argv[2] == "none" else sys.argv[2])
rt = warmcli.runtime("host")
print(json.dumps([float(rt.read(b)[0]) for b in workload.workload(rt)]))
"""


def host_units(kernels: list[Kernel]) -> list[CompileUnit]:
    ident = HostCompiler().toolchain.identity
    return [CompileUnit(kernel_key(k, "host", ident), k, "host") for k in kernels]


def test_a_kernel_served_from_a_batch_computes_what_it_computes_alone(
    warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file(
        WORKLOAD.format(math=MATH, fast=FAST_MATH, pi=PI, nan=NAN_TEST), "workload.py"
    )
    bundle = tmp_path / "b.warm"
    proc = warm("run", path, "-b", bundle, "--quiet", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    cold = warm.production(SERVE, tmp_path, "none")
    served = warm.production(SERVE, tmp_path, bundle)
    assert cold == [3.0, 1.0]  # M_PI is not defined without <math.h>; a NaN is not itself
    assert served == cold


def run_host(kernel: Kernel, group: list[Kernel]) -> list[float]:
    """What `kernel` writes into four zeros, built in one batch with `group`."""
    import numpy as np

    units = host_units(group)
    batch = compile_batch(HostCompiler(), units, jobs=1)
    assert not batch.failures, batch.failures
    (unit,) = [u for u in units if u.kernel == kernel]
    built = batch.built[unit.key]
    device = HostDevice()
    try:
        fn = device.get_function(device.load_module(built.binary), built.symbols[unit.key], kernel)
        x = np.zeros(4, dtype=np.float32)
        fn(x.ctypes.data, 4)
        return x.tolist()
    finally:
        device.close()


PRECISE = (
    '#ifdef PRECISE\n#include "precise.h"\n#else\n#include "fast.h"\n#endif\n'
    "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = SCALE; }"
)


def test_an_include_under_a_condition_sees_the_kernels_defines(tmp_path: Path) -> None:
    (tmp_path / "precise.h").write_text("#define SCALE 1.0f\n")
    (tmp_path / "fast.h").write_text("#define SCALE 0.5f\n")
    k = Kernel(PRECISE, "scale", "Pi", options=(f"-I{tmp_path}",), defines={"PRECISE": 1})
    assert run_host(k, [k]) == [1.0] * 4
    guarded = "#ifdef _WIN32\n#include <windows.h>\n#endif\nvoid setv(float *x, int n) { *x = 1; }"
    w = Kernel(guarded, "setv", "Pi")
    assert run_host(w, [w, Kernel(PI, "pi", "Pi")]) == [1.0, 0, 0, 0]


def test_a_pragma_in_one_kernel_leaves_its_neighbours_alone() -> None:
    nan = Kernel(NAN_TEST, "isnan_", "Pi")
    assert run_host(nan, [Kernel(FAST_MATH, "fm", "Pi"), nan]) == [1.0, 0, 0, 0]
    pi = Kernel(PI, "pi", "Pi")
    assert run_host(pi, [Kernel(MATH, "sq", "Pi"), pi]) == [3.0] * 4


HIDDEN_DIRECTIVES = {
    "include": "#include <math.h>\n",
    "import": "#import <math.h>\n",
    "pragma": '#pragma GCC optimize("O0")\n',
    "_Pragma": '_Pragma("GCC optimize(\\"O0\\")")\n',
    "__pragma": "__pragma(optimize)\n",
    "spliced": "#inc\\\nlude <math.h>\n",
    "spliced-hash": "#\\\r\ninclude <math.h>\n",
    "digraph": "%:include <math.h>\n",
    "trigraph": "??=include <math.h>\n",
    "commented": "/* a */ # /* b */ include <math.h>\n",
    "comment-before": "/* a\n */ #include <math.h>\n",
    "line": '#line 7 "x.c"\n',
    "ident": '#ident "x"\n',
    "marker": '# 1 "x.c"\n',
    "undef-builtin": "#undef __OPTIMIZE__\n",
    "undef-other": "#undef unix\n",
    "define-reserved": "#define __FAST_MATH__ 1\n",
    "define-predefined": "#define linux 2\n",
    "define-spliced": "#def\\\nine STEP 2\n",
    "counter": "static int c = __COUNTER__;\n",
    "asm": '__asm__(".text");\n',
    "carriage-return": "int a;\r#include <math.h>\n",
    "pasted-pragma": '#define CAT(a, b) a##b\nCAT(_Pra, gma)("GCC optimize(\\"O0\\")")\n',
}
PLAIN = "void k(float *x, int n) { x[0] = 1; }\n"


CUDA_UNROLL = (
    'extern "C" __global__ void k(int *x, int n) {\n'
    "    #pragma unrollUNROLL\n"
    "    for (int i = 0; i < 8; i++) x[i] += n;\n"
    "}\n"
)


@pytest.mark.parametrize(
    "text",
    [
        CUDA_UNROLL.replace("UNROLL", " 4 /* a comment */"),
        "#define M(a) \\\n  ((a) + 1)\n" + CUDA_UNROLL.replace("UNROLL", ""),  # a splice
        CUDA_UNROLL.replace("unrollUNROLL", 'GCC optimize("O0")'),
        CUDA_UNROLL.replace("UNROLL", " 4 extra"),
    ],
)
def test_a_loop_pragma_shares_only_as_a_plain_line(text: str) -> None:
    assert not shares_unit(Kernel(text, "k", "Pi", language="cuda"))


@pytest.mark.parametrize("text", HIDDEN_DIRECTIVES.values(), ids=HIDDEN_DIRECTIVES.keys())
def test_a_kernel_whose_text_can_reach_its_neighbours_gets_a_unit_of_its_own(text: str) -> None:
    assert not shares_unit(Kernel(text + PLAIN, "k", "Pi"))


@pytest.mark.parametrize(
    "kernel",
    [
        Kernel(PLAIN, "k", "Pi"),
        Kernel("#define STEP 2\n#if STEP > 1\n#undef STEP\n#endif\n" + PLAIN, "k", "Pi"),
        Kernel("#define M(a) \\\n  ((a) + 1)\n" + PLAIN, "k", "Pi"),  # a splice, no directive
        Kernel(PLAIN, "k", "Pi", defines={"TILE": 8, "T": "float"}),
        Kernel("#pragma GCC unroll 4\n" + PLAIN, "k", "Pi"),  # the loop after it, only
        Kernel(PLAIN.replace("{", "{\n  #pragma GCC ivdep\n", 1), "k", "Pi"),
        Kernel(CUDA_UNROLL.replace("UNROLL", ""), "k", "Pi", language="cuda"),
        Kernel(CUDA_UNROLL.replace("UNROLL", " 4"), "k", "Pi", language="cuda"),
        Kernel(CUDA_UNROLL.replace("UNROLL", "(TILE)"), "k", "Pi", language="cuda"),
        Kernel(
            CUDA_UNROLL.replace("pragma unrollUNROLL", "pragma nounroll"),
            "k",
            "Pi",
            language="cuda",
        ),
        *variants("c", 8),
        *variants("cuda", 8),
    ],
    ids=str,
)
def test_a_kernel_free_of_those_still_shares(kernel: Kernel) -> None:
    assert shares_unit(kernel)


@pytest.mark.parametrize("name", ["__OPTIMIZE__", "_X", "unix"])
def test_a_define_named_like_a_predefined_macro_gets_a_unit_of_its_own(name: str) -> None:
    assert not shares_unit(Kernel(PLAIN, "k", "Pi", defines={name: 1}))


@pytest.mark.parametrize(
    "value", ['_Pragma("GCC optimize(\\"fast-math\\")")', "__COUNTER__", "??=", "asm"]
)
def test_a_define_value_that_can_reach_its_neighbours_gets_a_unit_of_its_own(value: str) -> None:
    assert not shares_unit(Kernel(PLAIN, "k", "Pi", defines={"V": value}))
    pasting = "#define CAT(a, b) a##b\n" + PLAIN
    assert not shares_unit(Kernel(pasting, "k", "Pi", defines={"A": "_Pra", "B": "gma"}))


def test_kernels_that_need_their_own_unit_are_planned_alone_and_the_rest_batch() -> None:
    plain = host_units(list(variants("c", 8)))
    own = host_units([Kernel(MATH, "sq", "Pi"), Kernel(FAST_MATH, "fm", "Pi")])
    groups = plan_groups([own[0], *plain, own[1]], jobs=2)
    assert [own[0]] in groups and [own[1]] in groups
    assert sorted(len(g) for g in groups) == [1, 1, 4, 4]


def test_a_define_holding_a_comment_compiles_and_computes_its_value(
    warm, workload_file, tmp_path: Path
) -> None:
    workload = workload_file(
        "import numpy as np\nfrom warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void k(float *x, int n) { x[0] = Z; }', 'k', 'Pi', "
        "defines={'Z': '2 /* two */'}, name='a \"quoted\" \\\\ name */ \\n next')\n"
        "def workload(rt):\n"
        "    x = rt.upload(np.zeros(4, dtype=np.float32)); rt.launch(K, x, 4)\n"
        "    return [x]\n"
    )
    proc = warm("run", workload, "-b", tmp_path / "c.warm", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert warm.production(SERVE, tmp_path, tmp_path / "c.warm") == [2.0]
    assert warm.production(SERVE, tmp_path, "none") == [2.0]


def test_warms_own_text_is_escaped(tmp_path: Path) -> None:
    from warmcli.backends.host.building import translation_unit

    k = Kernel(
        "void k(float *x, int n) { x[0] = Z; }",
        "k",
        "Pi",
        defines={"Z": "2 /* two */", "W": "1 \\"},
        name='q"uote\\ */ \n x',
    )
    assert run_host(k, [k, Kernel(PLAIN, "k", "Pi")]) == [2.0, 0, 0, 0]
    (unit,) = host_units([k])
    source = translation_unit([unit])
    banner = source.splitlines()[0]
    assert banner.startswith("/* ") and banner.endswith(" */") and banner.count("*/") == 1


def compare_alone_and_batched(compiler: Compiler, arch: str) -> None:
    """The kernels that must be alone build the same cubin and PTX bytes in a batch."""
    math = Kernel(
        "#include <math_constants.h>\n"
        'extern "C" __global__ void sq(float *x, int n) { x[0] = sqrtf(x[0]) * CUDART_PI_F; }',
        "sq",
        "Pi",
        language="cuda",
    )
    pik = Kernel(
        "#ifndef CUDART_PI_F\n#define CUDART_PI_F 3.0f\n#endif\n"
        "#pragma nv_diag_suppress 177\n"
        'extern "C" __global__ void pik(float *x, int n) { x[threadIdx.x] = CUDART_PI_F; }',
        "pik",
        "Pi",
        language="cuda",
    )
    half = Kernel(
        '#include <cuda_fp16.h>\nextern "C" __global__ void h(__half *x, __half v) { x[0] = v; }',
        "h",
        "Pe",
        language="cuda",
    )
    ident = compiler.toolchain.identity
    kernels = [math, *variants("cuda", 4), pik, half]
    units = [CompileUnit(kernel_key(k, arch, ident), k, arch) for k in kernels]
    batch = compile_batch(compiler, units, jobs=1)
    assert not batch.failures, batch.failures
    for unit in (units[-2], units[-1]):
        alone = compiler.compile_group([unit])
        assert batch.built[unit.key].binary == alone.binary
        assert batch.built[unit.key].ptx == alone.ptx
    assert b"1077936128" in batch.built[units[-2].key].ptx  # 3.0f: pik's own M_PI
    assert len({id(batch.built[u.key]) for u in units[1:5]}) == 1  # the variants batch


def test_nvrtc_builds_the_same_bytes_alone_and_batched() -> None:
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    compare_alone_and_batched(NvrtcCompiler(ptx="auto"), "sm_90")


def test_nvcc_builds_the_same_bytes_alone_and_batched() -> None:
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    compare_alone_and_batched(NvccCompiler(nvcc_or_skip(), ptx="auto"), "sm_90")


def test_a_cuda_name_with_a_quote_compiles() -> None:
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    k = Kernel(
        'extern "C" __global__ void k(float *x) { x[0] = Z; }',
        "k",
        "P",
        language="cuda",
        defines={"Z": "2 /* two */"},
        name='q"uote\\ */ \n x',
    )
    compiler = NvrtcCompiler()
    (unit,) = [CompileUnit(kernel_key(k, "sm_90", compiler.toolchain.identity), k, "sm_90")]
    assert compiler.compile_group([unit]).symbols == {unit.key: unit.symbol}


@pytest.mark.parametrize("value", ["2\n#include <x.h>", "2\r3", "2 /* two", "2 /*/ 3", "'/*' /* x"])
def test_a_define_that_would_reach_past_its_line_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=r"define Z=.* does not fit on its own line"):
        Kernel(PLAIN, "k", "Pi", defines={"Z": value})


@pytest.mark.parametrize("value", ["2 /* two */", "'/*'", '"/*"', "2 // /* two", "1 \\"])
def test_a_define_that_stays_on_its_line_is_taken(value: str) -> None:
    assert Kernel(PLAIN, "k", "Pi", defines={"Z": value}).define("Z") == value


def test_a_workload_with_such_a_define_is_one_line(warm, workload_file) -> None:
    path = workload_file(
        "from warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void k(float *x) { *x = Z; }', 'k', 'P', defines={'Z': '2 /* two'})\n"
        "def workload(rt):\n    pass\n"
    )
    proc = warm("run", path, "-b", path.with_suffix(".warm"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "define Z='2 /* two' does not fit on its own line" in proc.stderr


OVERLOADS = """\
__device__ float exp(int n) { return (float)(n * 1000); }
extern "C" __global__ void k(float *out, const float *in) {
    int i = threadIdx.x;
    out[i] = exp(in[i]) + exp(2);
}
"""
GUARDED = """\
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 600
__device__ double atomicAdd(double *address, double val) {
    unsigned long long *a = (unsigned long long *)address, old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __double_as_longlong(val + __longlong_as_double(assumed)));
    } while (assumed != old);
    return __longlong_as_double(old);
}
#endif
extern "C" __global__ void acc(double *out, const double *in) { atomicAdd(out, in[threadIdx.x]); }
"""


def test_a_cuda_helper_named_like_a_builtin_overloads_it_as_alone() -> None:
    """A CUDA kernel's helpers are closed in its namespace, never renamed: renamed, a
    helper `exp(int)` took every `exp` call (a float argument truncated and multiplied by
    1000, where alone the builtin `expf` runs), and a helper guarded out by `#if` left its
    calls naming a function that was not there (the Programming Guide's atomicAdd)."""
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    compiler = NvrtcCompiler(ptx="auto")
    ident = compiler.toolchain.identity
    kernels = [
        Kernel(OVERLOADS, "k", "PP", language="cuda"),
        Kernel(GUARDED, "acc", "PP", language="cuda"),
        *variants("cuda", 2),
    ]
    units = [CompileUnit(kernel_key(k, "sm_90", ident), k, "sm_90") for k in kernels]
    batch = compile_batch(compiler, units, jobs=1)
    assert not batch.failures, batch.failures
    ptx = (batch.built[units[0].key].ptx or b"").decode()
    assert "ex2.approx" in ptx  # the builtin exp of a float
    assert "cvt.rzi.s32.f32" not in ptx  # never the float truncated for the helper's int
