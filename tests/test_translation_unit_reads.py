"""A CUDA translation unit reads each distinct source once, and is the same text for it.

`translation_unit` reads a source's file-scope names and macros once for all
the variants that share it (a workload's kernels are mostly one source with other
defines); these tests build the unit the old way (every kernel's body and probe read
whole) and compare the text, character for character.
"""

from __future__ import annotations

import pytest

from bench.compile import variants
from warmcli.backends import signature
from warmcli.backends.compiler import CompileUnit, isolated_section
from warmcli.backends.cuda import nvcc
from warmcli.backends.cuda.nvcc import translation_unit
from warmcli.kernel import PARAM_LETTERS, Kernel

HELPERS = """\
#define LOCAL_TWO 2
static __device__ float table[4] = {1, 2, 3, 4};
__device__ float helper(float x) { return x * SCALE * LOCAL_TWO; }
static const int limit = 8;
extern "C" __global__ void scale(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i < limit) y[i] = helper(y[i]) + table[i % 4];
}"""  # no newline at its end
LETTERS = "".join(sorted(PARAM_LETTERS - {"P", "e"}))
MANY = (
    'extern "C" __global__ void many('
    + ", ".join(f"{t} a{i}" for i, t in enumerate(["int"] * len(LETTERS)))
    + ") {}\n"
)


def old_translation_unit(units: list[CompileUnit]) -> str:
    """The unit as built before: every kernel's body and probe read whole."""
    sections: list[str] = []
    for unit in nvcc._unique(units):
        ns = f"warm_{unit.key[:16]}"
        section = isolated_section(
            unit, unit.kernel.source + signature.probe(unit), rename_helpers=False
        )
        sections.append(f"namespace {ns} {{\n{section}}} /* namespace {ns} */\n")
    return "\n".join([signature.CUDA_HELPERS, *sections])


def kernels() -> list[Kernel]:
    out = list(variants("cuda", 12))
    out += [Kernel(HELPERS, "scale", "Pi", language="cuda", defines={"SCALE": s}) for s in (2, 3)]
    out += [Kernel(MANY, "many", LETTERS, language="cuda")]
    out += [Kernel(MANY, "many", "i", language="cuda")]  # a probe that fails: same text
    return out


@pytest.mark.parametrize("order", ["as queued", "reversed"])
def test_the_unit_is_the_same_text_as_when_every_kernel_was_read_whole(order: str) -> None:
    units = [CompileUnit(f"{i:016x}" * 4, k, "sm_90") for i, k in enumerate(kernels())]
    if order == "reversed":
        units.reverse()
    units.append(units[0])  # a kernel twice: once in the unit
    assert translation_unit(units) == old_translation_unit(units)
