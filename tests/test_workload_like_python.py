"""Workloads behave like `python workload.py`, and `--json` always prints one JSON object.

Through the real CLI in a subprocess: a module beside the workload imports, `-m
pkg.module` with a relative import runs, `def workload():` is an error at the
user's own line, a workload's `sys.exit(3)` keeps warm's exit codes, and every
failure under `--json` is `{"error": ..., "exit": N}` on stdout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

KERNEL = (
    'Kernel("void {name}(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1; }}",'
    ' "{name}", "Pi")'
)


def _kernels_module(name: str) -> str:
    return "from warmcli import Kernel\n" + f"ADD = {KERNEL.format(name=name)}\n"


WORKLOAD_BODY = (
    'DEVICE = "host"\n\n\ndef workload(rt):\n    x = rt.buffer(8)\n    rt.launch(ADD, x, 8)\n'
)


def test_a_module_beside_the_workload_imports(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "wl").mkdir()
    (tmp_path / "wl" / "beside.py").write_text(_kernels_module("beside_add"))
    (tmp_path / "wl" / "work.py").write_text("from beside import ADD\n" + WORKLOAD_BODY)
    proc = warm("run", tmp_path / "wl" / "work.py", "-b", tmp_path / "b.warm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stored"]["kernels"] == 1


def test_run_dash_m_with_a_relative_import(warm: Warm, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(_kernels_module("rel_add"))
    (pkg / "wl.py").write_text("from .kernels import ADD\n" + WORKLOAD_BODY)
    proc = warm("run", "-m", "pkg.wl", "-b", tmp_path / "b.warm", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["stored"]["kernels"] == 1 and doc["verified"] is True
    # Elsewhere the module is not found: one line, exit 2.
    proc = warm("run", "-m", "pkg.wl", "-b", tmp_path / "b.warm")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(
        "warm: error: pkg.wl: no such workload module (No module named 'pkg'; looked in "
    ), proc.stderr  # (the folder it ran in: test_trial41)


def test_workload_without_the_runtime_argument_points_at_the_users_line(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file('DEVICE = "host"\n\n\ndef workload():\n    pass\n')
    proc = warm("run", path, "-b", tmp_path / "b.warm")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"warm: error: {path}:4: workload() must take the runtime")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b.warm").exists()


@pytest.mark.parametrize("where", ["entry", "import"])
def test_a_workload_calling_sys_exit_keeps_warms_exit_codes(
    warm: Warm, workload_file, tmp_path: Path, where: str
) -> None:
    body = "    sys.exit(3)\n" if where == "entry" else "    pass\n\n\nsys.exit(3)\n"
    path = workload_file('import sys\n\nDEVICE = "host"\n\n\ndef workload(rt):\n' + body)
    proc = warm("run", path, "-b", tmp_path / "b.warm", "--json")
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["exit"] == 2 and "sys.exit(3)" in doc["error"], doc
    assert f"{path}:" in doc["error"]
    assert "sys.exit(3)" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("stats", "{tmp}/missing.warm"),
        ("verify", "{tmp}/missing.warm"),
        ("check", "{tmp}/missing.warm"),
        ("diff", "{tmp}/missing.warm", "{tmp}/missing.warm"),
        ("merge", "{tmp}/missing.warm", "-o", "{tmp}/out.warm"),
        ("clean", "{tmp}/missing.warm"),
        ("run", "{tmp}/missing.py"),
        ("stats", "--no-such-option"),
        ("run",),
    ],
)
def test_json_failures_are_one_json_object(
    warm: Warm, tmp_path: Path, args: tuple[str, ...]
) -> None:
    proc = warm(*(a.format(tmp=tmp_path) for a in args), "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["exit"] == 2 and doc["error"], doc
    assert proc.stderr.startswith("warm: error: ")


@pytest.mark.parametrize("where", ["entry", "import"])
@pytest.mark.parametrize(
    "base", ["class Stop(BaseException):\n    pass\n", "Stop = GeneratorExit\n"]
)
def test_a_workload_raising_a_base_exception_is_a_workload_error(
    warm: Warm, workload_file, tmp_path: Path, where: str, base: str
) -> None:
    """A `BaseException` that is neither Ctrl-C nor `sys.exit` (a class of the workload's
    own, `GeneratorExit`) is reported as any exception is: one line, exit 2, JSON."""
    raising = 'raise Stop("weird")\n'
    body = "    " + raising if where == "entry" else "    pass\n\n\n" + raising
    path = workload_file(base + '\nDEVICE = "host"\n\n\ndef workload(rt):\n' + body)
    proc = warm("run", path, "-b", tmp_path / "b.warm", "--device", "host", "--json")
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["exit"] == 2 and "weird" in doc["error"] and f"{path}:" in doc["error"], doc
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
