"""Edges found by trying the merged work as a user and an attacker would.

Through the real CLI in a subprocess: a workload that ends the worker itself
(`os._exit`) is an error naming it, not a silent exit with the workload's status;
`check=` under `restore=()` still compares outputs; PyCUDA kernels with unsigned or
bool parameters, or prepared with `np.intp` for a pointer, compile; `warm run --json`
into a closed pipe is no traceback; a ValueError at import is named at its line;
`merge --key` under WARM_TRUSTED_KEYS signs no row a trusted key did not sign.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvcc import find_nvcc
from warmcli.backends.toolchain import ToolchainError
from warmcli.bundle.store import Bundle

EXITS_ITSELF = """\
import os
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1; }}", "inc", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
    os._exit({status})
"""


@pytest.mark.parametrize("status", [0, 5])
def test_a_workload_calling_os_exit_is_an_error_not_a_silent_exit(
    warm: Warm, workload_file, bundle_path: Path, status: int
) -> None:
    proc = warm(
        "run", workload_file(EXITS_ITSELF.format(status=status)), "-b", bundle_path, "--json"
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert json.loads(proc.stdout) == {
        "error": f"the workload ended the process itself (exit status {status}, e.g. os._exit) "
        f"during CompileOnly: nothing was stored in {bundle_path}",
        "exit": 2,
    }
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not bundle_path.exists()


CHECK_WITHOUT_RESTORE = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void fill(int *y, const int *x, int n) { for (int i = 0; i < n; i++) y[i] = 3*x[i] + OFF; }"
FILL = Tunable(
    "fill",
    {n: Kernel(SRC, "fill", "PPi", defines={"OFF": o}) for n, o in (("ref", 0), ("off", 1))},
    lambda rt, k, y, x, n, *, stream=None: rt.launch(k, y, x, n, stream=stream),
    check="ref",
    restore=(),
)

def workload(rt):
    x = rt.upload(np.arange(5, dtype=np.int32))
    rt.tune(FILL, rt.buffer(5, "int32"), x, 5)
"""


def test_check_under_restore_nothing_still_compares_the_outputs(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`restore=()` (outputs fully overwritten) kept no buffer, so `check=` compared nothing
    and a candidate writing wrong integers passed."""
    proc = warm("run", workload_file(CHECK_WITHOUT_RESTORE), "-b", bundle_path, "-q")
    assert proc.returncode == 0, proc.stderr
    [tune] = warm.json("stats", bundle_path)["tunes"]
    reasons = {c["name"]: (c["status"], c["reason"]) for c in tune["candidates"]}
    assert tune["pick"] == "ref"
    assert reasons["off"] == (
        "failed",
        "check: output 1 (int32[5]) differs from candidate 'ref': 1 != 0 at [0] "
        "(5 element(s), rtol 1e-05, atol 1e-06)",
    )


UNSIGNED_PYCUDA = '''
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

mod = SourceModule("""
__global__ void scale(float *x, unsigned long n, float s, bool on, unsigned char add)
{
  const unsigned long i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && on) x[i] = x[i] * s + add;
}
""")

def main():
    f = mod.get_function("scale")
    x = drv.mem_alloc(4 * 256)
    f(x, np.uint64(256), np.float32(2.0), np.array(True), np.uint8(1), block=(256, 1, 1))
    f.prepare("PQf?B").prepared_call((1, 1), (256, 1, 1), x, 256, 2.0, True, 1)
    f.prepare([np.intp, np.uint64, np.float32, np.dtype(np.bool_), np.uint8])
    f.prepared_call((1, 1), (256, 1, 1), x, 256, 2.0, True, 1)
'''


def test_pycuda_unsigned_and_bool_parameters_and_intp_pointers_compile(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """PyCUDA letters were folded to signed ones (`Q` -> `q`, `?` -> `b`) and `np.intp`
    stayed an integer for a pointer, so the declaration check failed every such kernel."""
    try:
        find_nvcc()
    except ToolchainError as exc:  # pragma: no cover - make test installs nvcc
        pytest.skip(f"nvcc not found: {exc}")
    script = workload_file(UNSIGNED_PYCUDA, "unsigned_gpu.py")
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", bundle_path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["passes"][1]["compilation"]["failed"] == 0
    with Bundle.open(bundle_path) as bundle:
        assert {k.entry for k in bundle.kernels()} == {"scale"}


def test_run_json_into_a_closed_pipe_is_no_traceback(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`warm run --json | true`: the worker printed a BrokenPipeError traceback."""
    script = workload_file(EXITS_ITSELF.replace("    os._exit({status})\n", ""))
    cmd = [sys.executable, "-m", "warmcli", "run", str(script), "-b", str(bundle_path), "--json"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warm.env
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader goes away before the JSON is written
    _, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert proc.returncode == 1, (proc.returncode, stderr)
    assert warm.json("stats", bundle_path)["kernels"], "what was warmed is stored"


BAD_TUNABLE = """\
from warmcli import Kernel, Tunable

SRC = "void inc(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1; }"
T = Tunable("inc", {"a": Kernel(SRC, "inc", "Pi")}, lambda rt, k, y, n: None, check="nope")

def workload(rt):
    pass
"""


def test_a_value_error_at_import_is_named_at_its_line_not_as_a_non_python_file(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    """A `Tunable` refused at import (a ValueError) was reported as `not a Python source
    file`; a file with a null byte was `None:None: syntax error`."""
    path = workload_file(BAD_TUNABLE, "bad_tunable.py")
    proc = warm("run", path, "-b", bundle_path, "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"] == (
        f"{path}:4: workload failed to import: ValueError: tunable inc: check names 'nope', "
        "which is no candidate (candidates: a)"
    )
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"x = 1\n\0\n")
    proc = warm("run", nul, "-b", bundle_path, "--json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["error"] == (
        f"{nul}: not a Python source file (source code string cannot contain null bytes)"
    )


SMALL = """\
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void inc(float *y, int n) { for (int i = 0; i < n; i += S) y[i] += 1; }"
T = Tunable(
    "inc",
    {f"s{s}": Kernel(SRC, "inc", "Pi", defines={"S": s}) for s in (1, 2)},
    lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, stream=stream),
)

def workload(rt):
    rt.tune(T, rt.buffer(8), 8)
"""


def test_merge_key_under_trusted_keys_does_not_sign_an_edited_row(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A tune edited in a signed bundle came out of `merge --key` signed, so production
    under WARM_TRUSTED_KEYS served the edit."""
    pytest.importorskip("cryptography")
    key, signed, merged = tmp_path / "ci.key", tmp_path / "s.warm", tmp_path / "m.warm"
    assert warm("keygen", key).returncode == 0
    proc = warm("run", workload_file(SMALL), "-b", signed, "--key", key, "-q")
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(signed) as db:
        db.execute("UPDATE tunes SET pick = CASE pick WHEN 's1' THEN 's2' ELSE 's1' END")
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    proc = trusting("merge", signed, "-o", merged, "--key", key, "--json")
    assert proc.returncode == 2 and not merged.exists()
    error = json.loads(proc.stdout)["error"]
    assert error.startswith(f"{signed}: 1 of ") and "not signed by a trusted key: tunes" in error
    assert warm("merge", signed, "-o", merged, "--key", key).returncode == 0, "no trusted keys"
