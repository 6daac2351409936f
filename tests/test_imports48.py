"""What a hot production process imports before its first result (issue 16, `hot_vs_floor`).

A fresh process serving the host example (kernels and tunes served) or a kernel-only
workload from a bundle `warm run` made imports neither `uuid` (a big int's stand-in nonce
is `os.urandom`'s), `warmcli.late_runtime` (only `warm run` hands a workload's import late
runtimes or binds one: `runtime()` asks `sys.modules` whether it did) nor
`warmcli.runtime.tune_check` (a sharded pass's or a pending tune's check, imported where
one is made); their results are the cold process's, bit for bit. `warm run` still hands a
workload's import a late runtime, and a big int's key text is as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

LAZY = ("uuid", "warmcli.late_runtime", "warmcli.runtime.tune_check")

KERNEL_ONLY = '''
"""Kernels only: no tune."""
import numpy as np
from warmcli import Kernel

LOOP = "for (int i = 0; i < n; i++)"
SCALE = Kernel(f"void scale(float *x, float a, int n) {{ {LOOP} x[i] *= a; }}", "scale", "Pfi")
ADD = Kernel(f"void add(float *x, const float *y, int n) {{ {LOOP} x[i] += y[i]; }}", "add", "PPi")


def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    y = rt.upload(np.ones(64, dtype=np.float32))
    rt.launch(SCALE, x, 1.5, 64)
    rt.launch(ADD, x, y, 64)
    return x
'''

SERVE = """
import json, sys, hashlib
sys.path.insert(0, {folder!r})
import warmcli, {module} as w
if {bundle!r}:
    warmcli.use_bundle({bundle!r})
rt = warmcli.runtime("host")
out = w.workload(rt)
rt.synchronize()
digest = hashlib.sha256(rt.read(out).tobytes() if out is not None else b"").hexdigest()
print(json.dumps([sorted(sys.modules), len(warmcli.report().misses), digest]))
"""


def _serve(warm: Warm, workload: Path, bundle: Path | None) -> tuple[list[str], int, str]:
    code = SERVE.format(folder=str(workload.parent), module=workload.stem, bundle=str(bundle or ""))
    done = subprocess.run(
        [sys.executable, "-c", code], env=warm.env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    modules, misses, digest = json.loads(done.stdout)
    return modules, misses, digest


def _imported_lazy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in LAZY)]


def test_a_hot_host_example_imports_no_uuid_late_runtime_or_tune_check(
    warm: Warm, made_here: Path
) -> None:
    bundle_path = made_here  # the host example warmed in warm's home
    modules, misses, _ = _serve(warm, EXAMPLES / "matmul_host.py", bundle_path)
    assert misses == 0  # kernels and tunes served
    assert _imported_lazy(modules) == []


def test_a_hot_kernel_only_workload_imports_none_and_computes_as_cold(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    workload = tmp_path / "kernels_only48.py"
    workload.write_text(KERNEL_ONLY)
    warm.json("run", workload, "--bundle", bundle_path)
    modules, misses, hot = _serve(warm, workload, bundle_path)
    assert misses == 0
    assert _imported_lazy(modules) == []
    _, cold_misses, cold = _serve(warm, workload, None)
    assert cold_misses == 0 or hot == cold  # (no bundle: nothing is reported missed)
    assert hot == cold


def test_warm_run_still_hands_a_workload_import_a_late_runtime(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    workload = tmp_path / "late48.py"
    workload.write_text(
        KERNEL_ONLY.replace('"""Kernels only: no tune."""', "import warmcli")
        + "\nRT = warmcli.runtime('host')\n"
        + "assert type(RT).__name__ == 'LateRuntime', type(RT)\n"
        + "\n\ndef entry(_rt):\n    return workload(RT)  # the late runtime: the pass's\n"
    )
    result = warm("run", workload, "--bundle", bundle_path, "--entry", "entry")
    assert result.returncode == 0, result.stderr
    assert "stored 2 new kernel(s)" in result.stdout + result.stderr  # warmed through it


def test_a_big_ints_key_text_is_as_before_and_nonces_differ() -> None:
    from warmcli.runtime import key_ints

    value = {"n": 1 << 5000, "m": [2 << 4000, 7], 3 << 4100: "x"}
    first = key_ints.big_ints_text(value, json.dumps)
    assert first == key_ints.big_ints_text(value, json.dumps)
    assert "\x00" not in first and key_ints.int_text(1 << 5000) in first
