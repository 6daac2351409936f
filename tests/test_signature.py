"""The parameter letters against the kernel's own declaration, checked by the compiler.

Through the real CLI: `"Pii"` for `void scale(float *x, int n, float s)` stops `warm
run` before the first launch with a message showing the letters and the declared
parameters (host C and, with nvcc, CUDA for `--arch sm_90`); an entry the source lacks
is a compile error naming it; a wrong argument count stops the CompileOnly pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.compiler import CompileFailure, CompileUnit
from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.signature import declared_parameters
from warmcli.kernel import Kernel

HOST = '''
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("""
void scale(float *x, int n, float s) { for (int i = 0; i < n; i++) x[i] *= s; }
""", ENTRY, LETTERS)
def workload(rt):
    x = rt.upload(np.ones(4, np.float32))
    rt.launch(K, *ARGS)
'''


def run_host(warm: Warm, workload_file, bundle: Path, entry: str, letters: str, args: str):
    text = HOST.replace("ENTRY", repr(entry)).replace("LETTERS", repr(letters))
    path = workload_file(text.replace("ARGS", args))
    proc = warm("run", path, "--bundle", bundle)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not bundle.exists()
    return proc.stderr


@pytest.mark.parametrize(
    ("entry", "letters", "args", "expected"),
    [
        (  # compiled (before any launch ran) and refused with both sides shown
            "scale",
            "Pii",
            "(x, 4, 2)",
            [
                "during CompileAndAutotune",
                "kernel scale: parameter letters 'Pii' do not match "
                "scale(float *x, int n, float s):",
                "argument 3: letter 'i' (int32), declared 'float s'",
            ],
        ),
        (  # a compile error naming the entry, not a missing symbol at load
            "scal",
            "Pif",
            "(x, 4, 2.0)",
            [
                "kernel scal: its source defines no function named 'scal' (the entry name)",
                "functions it defines: scale",
            ],
        ),
        (  # the wrong count, caught in the first pass
            "scale",
            "Pif",
            "(x, 4)",
            ["during CompileOnly", "LaunchError: kernel scale takes 3 argument(s) ('Pif'), got 2"],
        ),
    ],
)
def test_letters_entry_and_count_mistakes_stop_warm_run(
    warm: Warm,
    workload_file,
    bundle_path: Path,
    entry: str,
    letters: str,
    args: str,
    expected: list[str],
) -> None:
    err = run_host(warm, workload_file, bundle_path, entry, letters, args)
    for line in expected:
        assert line in err
    assert "symbol" not in err


def test_an_entry_whose_declaration_does_not_compile_is_not_called_missing(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """The entry is there but its declaration fails (an unknown type): the message says so
    and shows the compiler's error, never "defines no function named X ... defines: X"."""
    text = HOST.replace("int n, float s", "my_int n, float s")
    text = text.replace("ENTRY", "'scale'").replace("LETTERS", "'Pif'")
    proc = warm("run", workload_file(text.replace("ARGS", "(x, 4, 2.0)")), "--bundle", bundle_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "kernel scale: its function 'scale' does not compile" in proc.stderr
    assert "unknown type name" in proc.stderr
    assert "defines no function" not in proc.stderr
    assert not bundle_path.exists()


@pytest.mark.parametrize(
    ("letters", "complaint"),
    [
        ("Pi", "2 letter(s) for 3 declared parameter(s)"),
        ("iif", "argument 1: letter 'i' (int32), declared 'float *x'"),
        ("Pff", "argument 2: letter 'f' (float32), declared 'int n'"),
        ("Pid", "argument 3: letter 'd' (float64), declared 'float s'"),
        ("PIf", "argument 2: letter 'I' (uint32), declared 'int n'"),
    ],
)
def test_each_kind_of_mismatch_is_named(letters: str, complaint: str) -> None:
    source = "void scale(float *x, int n, float s) { for (int i = 0; i < n; i++) x[i] *= s; }"
    kernel = Kernel(source, "scale", letters)
    unit = CompileUnit("ab" * 32, kernel, "x86_64")
    with pytest.raises(CompileFailure) as caught:
        HostCompiler().compile_group([unit])
    assert complaint in [line.strip() for line in caught.value.log.splitlines()[1:3]]


def test_declarations_are_found_as_written() -> None:
    source = """
    // scale(int) in a comment is not it
    static inline int helper(int a) { return scale_of(a); }
    extern "C" __global__ void __launch_bounds__(256)
    scale(const float *__restrict__ x, float y[], void (*cb)(int, float), int n) { x = 0; }
    """
    assert declared_parameters(source, "scale") == [
        "const float *__restrict__ x",
        "float y[]",
        "void (*cb)(int, float)",
        "int n",
    ]
    assert declared_parameters("void k(void) {}", "k") == []
    assert declared_parameters("int main() { k(1); }", "k") is None


CUDA = """
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('extern "C" __global__ void scale(float *x, int n, float s) { x[n] *= s; }',
           "scale", "Pii", language="cuda")
def workload(rt):
    x = rt.buffer(4)
    rt.launch(K, x, 4, 2, grid=1, block=4)
"""


def test_cuda_letters_are_checked_by_nvcc(warm: Warm, workload_file, bundle_path: Path) -> None:
    from warmcli.backends.cuda.nvcc import find_nvcc
    from warmcli.backends.toolchain import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as exc:  # pragma: no cover - make install brings nvcc
        pytest.skip(f"nvcc not found: {exc}")
    proc = warm("run", workload_file(CUDA), "--arch", "sm_90", "--bundle", bundle_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "parameter letters 'Pii' do not match scale(float *x, int n, float s):" in proc.stderr
    assert "argument 3: letter 'i' (int32), declared 'float s'" in proc.stderr
