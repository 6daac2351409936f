"""NVRTC's `-minimal`: given only where it cannot change what is built, never seen by a user.

The gate is a test on a unit's text (`warmcli.backends.cuda.minimal`); every compile here
runs the real NVRTC (the module skips where it is not installed) and compares warm's
output with `-minimal` against the same compile without it, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bench.compile import variants
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompiledGroup, CompileFailure, CompileUnit
from warmcli.backends.cuda import minimal as minimal_module
from warmcli.backends.cuda import nvrtc as nvrtc_module
from warmcli.backends.cuda.minimal import MINIMAL, knows_minimal, minimal_safe
from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc
from warmcli.kernel import Kernel, kernel_key

ARCH = "sm_90"
PLAIN = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 2.0f; }\n'
ARCH_MACRO = """\
#if defined(__CUDA_ARCH__) && defined(__CUDACC__) && defined(__CUDACC_RTC__)
#define V (__CUDA_ARCH__ / 10)
#else
#define V 1
#endif
extern "C" __global__ void k(int* y) { y[threadIdx.x] = V + warpSize; }
"""
TEXTURE = """\
extern "C" __global__ void k(float* y, cudaTextureObject_t t) {
    y[threadIdx.x] = tex1Dfetch<float>(t, threadIdx.x);
}
"""
RUNTIME_MACRO = """\
#if defined(CUDART_VERSION)
#define V 1
#else
#define V 2
#endif
extern "C" __global__ void k(int* y) { y[threadIdx.x] = V; }
"""
MINIMAL_MACRO = """\
#ifdef __CUDACC_RTC_MINIMAL__
#define V 1
#else
#define V 2
#endif
extern "C" __global__ void k(int* y) { y[threadIdx.x] = V; }
"""
# MINIMAL_MACRO and an include spelled so that no raw-text test sees the name: a line
# spliced by backslash-newline, a digraph, a trigraph, a universal character name.
HIDDEN = {
    "spliced": MINIMAL_MACRO.replace("__CUDACC_RTC", "__C\\\nUDACC_RTC"),
    "spliced-crlf": MINIMAL_MACRO.replace("__CUDACC_RTC", "__C\\\r\nUDACC_RTC"),
    "digraph": "%:include <x.h>\n" + MINIMAL_MACRO.replace("__CUDACC_RTC_MINIMAL__", "X"),
    "digraph-paste": "#define CAT(a, b) a %:%: b\n" + MINIMAL_MACRO,
    "trigraph": "??=include <x.h>\n" + MINIMAL_MACRO.replace("__CUDACC_RTC_MINIMAL__", "X"),
    "ucn": MINIMAL_MACRO.replace("__CUDACC_RTC_MINIMAL__", "__\\u0043UDACC_RTC_MINIMAL__"),
}
BROKEN = 'extern "C" __global__ void k(float* y) { y[0] = undeclared_thing; }\n'


def unit(kernel: Kernel, arch: str = ARCH) -> CompileUnit:
    return CompileUnit(kernel_key(kernel, arch, "nvrtc-test"), kernel, arch)


def cuda(source: str, params: str = "P", **extra: Any) -> Kernel:
    return Kernel(source, "k", params, language="cuda", **extra)


# -- the gate, on text --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel",
    [
        cuda(PLAIN),
        cuda(ARCH_MACRO),
        cuda(PLAIN, options=("-lineinfo", "--use_fast_math", "-DSCALE=2", "-std=c++17")),
        *variants("cuda", 8),
    ],
    ids=lambda k: k.label,
)
def test_a_unit_that_cannot_observe_minimal_passes_the_gate(kernel: Kernel) -> None:
    assert minimal_safe([unit(kernel)])


@pytest.mark.parametrize(
    "kernel",
    [
        cuda("#include <cuda_fp16.h>\n" + PLAIN),
        cuda("#if __has_include(<x.h>)\n#endif\n" + PLAIN),
        cuda(TEXTURE, "PQ"),
        cuda(RUNTIME_MACRO),
        cuda(MINIMAL_MACRO),
        cuda("#define CAT(a, b) a##b\n" + PLAIN),
        cuda(PLAIN + "__global__ void launch(float* y) { k<<<1, 1>>>(y); }\n"),
        cuda(PLAIN.replace("2.0f", "surf2Dread_is_here")),
        cuda(PLAIN.replace("2.0f", "(float)CUDA_SUCCESS")),
        cuda(PLAIN.replace("2.0f", "(float)sizeof(CUresult)")),
        cuda(PLAIN.replace("2.0f", "(float)MAJOR_VERSION")),
        cuda("typedef libraryPropertyType_t t;\n" + PLAIN),
        cuda(PLAIN, defines={"V": "cudaSuccess"}),
        cuda(PLAIN, defines={"cudaV": 1}),
        cuda(PLAIN, options=("-include=cuda_runtime.h",)),
        cuda(PLAIN, options=("-rdc=true",)),
        cuda(PLAIN, options=("-DX=cudaError_t",)),
        *(cuda(text) for text in HIDDEN.values()),
    ],
    ids=str,
)
def test_a_unit_that_could_observe_minimal_fails_the_gate(kernel: Kernel) -> None:
    assert not minimal_safe([unit(kernel)])
    assert not minimal_safe([unit(cuda(PLAIN)), unit(kernel)])  # one unit turns off its group


def test_minimal_is_known_from_nvrtc_12_4_on() -> None:
    assert not knows_minimal((12, 3)) and knows_minimal((12, 4)) and knows_minimal((13, 0))
    assert minimal_module.MINIMAL_SINCE == (12, 4)


# -- the real NVRTC -----------------------------------------------------------------------

needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")


class Spy:
    """Every option list NVRTC was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[list[str]] = []
        real = nvrtc_module._Program.compile

        def compile(program: Any, options: Sequence[str]) -> tuple[bool, str]:
            self.calls.append(list(options))
            return real(program, options)

        monkeypatch.setattr(nvrtc_module._Program, "compile", compile)

    def minimal(self) -> list[bool]:
        return [MINIMAL in call for call in self.calls]


def build(kernels: Sequence[Kernel], ptx: str | None = "auto") -> CompiledGroup:
    return NvrtcCompiler(ptx=ptx).compile_group([unit(k) for k in kernels])


def plain(monkeypatch: pytest.MonkeyPatch, kernels: Sequence[Kernel], **kw: Any) -> CompiledGroup:
    """The same compile with `-minimal` never given."""
    with monkeypatch.context() as m:
        m.setattr(nvrtc_module, "takes_minimal", lambda: False)
        return build(kernels, **kw)


def same_output(a: CompiledGroup, b: CompiledGroup) -> bool:
    return (a.binary, a.ptx, a.ptx_arch, a.symbols, a.log) == (
        b.binary,
        b.ptx,
        b.ptx_arch,
        b.symbols,
        b.log,
    )


@needs_nvrtc
@pytest.mark.parametrize("ptx", ["auto", "compute_80", None])
def test_units_that_pass_the_gate_build_byte_identical_cubin_and_ptx(
    monkeypatch: pytest.MonkeyPatch, ptx: str | None
) -> None:
    kernels = [*variants("cuda", 6), cuda(ARCH_MACRO, "P")]
    spy = Spy(monkeypatch)
    fast = build(kernels, ptx)
    assert spy.minimal() and all(spy.minimal())  # every program got -minimal
    assert MINIMAL in fast.command
    slow = plain(monkeypatch, kernels, ptx=ptx)
    assert same_output(fast, slow) and MINIMAL not in slow.command


@needs_nvrtc
@pytest.mark.parametrize("options", [("-G",), ("-lineinfo", "-use_fast_math"), ("-std=c++14",)])
def test_tuning_options_build_the_same_with_minimal(
    monkeypatch: pytest.MonkeyPatch, options: tuple[str, ...]
) -> None:
    second = PLAIN.replace("void k(", "void k2(")
    kernels = [
        cuda(ARCH_MACRO, options=options),
        Kernel(second, "k2", "P", language="cuda", options=options),
    ]
    fast = build(kernels)
    assert MINIMAL in fast.command and same_output(fast, plain(monkeypatch, kernels))


@needs_nvrtc
def test_a_name_hidden_by_a_line_splice_is_built_as_without_minimal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`__CUDACC_RTC_MINIMAL__` split by backslash-newline is one name to the compiler:
    with `-minimal` it would build another cubin (V 1, not 2), so the gate refuses it."""
    kernel = cuda(HIDDEN["spliced"])
    spy = Spy(monkeypatch)
    built = build([kernel])
    assert spy.minimal() == [False]
    assert same_output(built, plain(monkeypatch, [kernel]))


@needs_nvrtc
@pytest.mark.parametrize(
    "kernel", [cuda(TEXTURE, "PQ"), cuda(RUNTIME_MACRO)], ids=["texture", "CUDART_VERSION"]
)
def test_a_unit_the_gate_refuses_compiles_as_without_minimal(
    monkeypatch: pytest.MonkeyPatch, kernel: Kernel
) -> None:
    spy = Spy(monkeypatch)
    built = build([kernel])
    assert spy.minimal() == [False] and MINIMAL not in built.command
    assert same_output(built, plain(monkeypatch, [kernel]))


@needs_nvrtc
def test_a_minimal_compile_that_fails_is_compiled_again_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nvrtc_module, "minimal_safe", lambda units: True)  # a gate that errs
    spy = Spy(monkeypatch)
    built = build([cuda(TEXTURE, "PQ")])
    assert spy.minimal() == [True, False]  # failed with it, then the plain compile kept
    assert MINIMAL not in built.command
    assert same_output(built, plain(monkeypatch, [cuda(TEXTURE, "PQ")]))


@needs_nvrtc
def test_a_compile_errors_log_is_the_plain_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CompileFailure) as plain_failure:
        plain(monkeypatch, [cuda(BROKEN)])
    monkeypatch.setattr(nvrtc_module, "minimal_safe", lambda units: True)
    spy = Spy(monkeypatch)
    with pytest.raises(CompileFailure) as failure:
        build([cuda(BROKEN)])
    assert spy.minimal() == [True, False]
    assert failure.value.log == plain_failure.value.log and "undeclared_thing" in failure.value.log
    assert MINIMAL not in failure.value.log


@needs_nvrtc
def test_an_nvrtc_without_minimal_is_never_given_it(monkeypatch: pytest.MonkeyPatch) -> None:
    class Old:  # an NVRTC 12.3: its version is all the probe asks
        class nvrtcResult:
            NVRTC_SUCCESS = 0

        @staticmethod
        def nvrtcVersion() -> tuple[int, int, int]:
            return 0, 12, 3

    monkeypatch.setattr(nvrtc_module, "_nvrtc", lambda: Old)
    assert nvrtc_module.takes_minimal.__wrapped__() is False
    monkeypatch.undo()
    monkeypatch.setattr(nvrtc_module, "takes_minimal", lambda: False)
    spy = Spy(monkeypatch)
    build(variants("cuda", 2))
    assert spy.calls and not any(spy.minimal())


@needs_nvrtc
def test_a_batch_with_minimal_keeps_every_result_and_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernels = [*variants("cuda", 4), cuda(BROKEN)]
    units = [unit(k) for k in kernels]
    fast = compile_batch(NvrtcCompiler(ptx="auto"), units, jobs=2)
    monkeypatch.setattr(nvrtc_module, "takes_minimal", lambda: False)
    slow = compile_batch(NvrtcCompiler(ptx="auto"), units, jobs=2)
    assert set(fast.built) == set(slow.built) == {u.key for u in units[:4]}
    assert {k: f.log for k, f in fast.failures.items()} == {
        k: f.log for k, f in slow.failures.items()
    }
    for key in fast.built:
        assert fast.built[key].binary == slow.built[key].binary
