"""`--compile-timeout` with NVRTC: each program warm compiles has the whole budget.

A program that fails with `-minimal` is compiled again without it (`warmcli.backends.cuda.
minimal`), and a `--ptx` of another architecture is one more program: a user gives the
timeout to a compile, as nvcc's is each process's, so neither the retry nor the PTX
program is left only what the first one did not use. The real NVRTC compiles; a stand-in
for a slow NVRTC (each program sleeps `SLOW` s first) makes the budget measurable.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from test_nvrtc_minimal import PLAIN, TEXTURE, cuda, needs_nvrtc, unit

from warmcli.backends.compiler import CompileFailure
from warmcli.backends.cuda import nvrtc as nvrtc_module
from warmcli.backends.cuda.minimal import MINIMAL
from warmcli.backends.cuda.nvrtc import NvrtcCompiler

SLOW = 2.0  # seconds each program takes more than NVRTC's own compile
TIMEOUT = 4.5  # more than one program takes (its own NVRTC up to 2.5 s, loaded), less than two


@pytest.fixture
def slow_nvrtc(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every option list the real NVRTC was given, each after `SLOW` seconds."""
    calls: list[list[str]] = []
    real = nvrtc_module._Program.compile

    def compile(program: Any, options: Sequence[str]) -> tuple[bool, str]:
        calls.append(list(options))
        time.sleep(SLOW)
        return real(program, options)

    NvrtcCompiler(ptx=None).compile_group([unit(cuda(PLAIN))])  # NVRTC loaded, outside the timing
    monkeypatch.setattr(nvrtc_module._Program, "compile", compile)
    return calls


@needs_nvrtc
def test_the_retry_without_minimal_has_its_own_timeout(
    monkeypatch: pytest.MonkeyPatch, slow_nvrtc: list[list[str]]
) -> None:
    monkeypatch.setattr(nvrtc_module, "minimal_safe", lambda units: True)  # a gate that errs
    built = NvrtcCompiler(ptx=None).compile_group([unit(cuda(TEXTURE, "PQ"))], timeout=TIMEOUT)
    assert [MINIMAL in call for call in slow_nvrtc] == [True, False]
    assert MINIMAL not in built.command and built.binary


@needs_nvrtc
def test_a_ptx_program_of_another_arch_has_its_own_timeout(slow_nvrtc: list[list[str]]) -> None:
    built = NvrtcCompiler(ptx="compute_80").compile_group([unit(cuda(PLAIN))], timeout=TIMEOUT)
    assert len(slow_nvrtc) == 2 and built.ptx_arch == "compute_80" and built.ptx


@needs_nvrtc
def test_one_program_past_the_timeout_still_times_out(slow_nvrtc: list[list[str]]) -> None:
    with pytest.raises(CompileFailure, match=r"did not finish within 1 s") as failure:
        NvrtcCompiler(ptx=None).compile_group([unit(cuda(PLAIN))], timeout=1.0)
    assert failure.value.timed_out
