"""A new user's trial (stop 41): workloads warm had not seen, run the README's way. The
real CLI in a subprocess, the real cc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def _package(tmp_path: Path) -> Path:
    app = tmp_path / "svc" / "app"
    app.mkdir(parents=True)
    (tmp_path / "svc" / "__init__.py").write_text("")
    (app / "__init__.py").write_text("")
    (app / "warmup.py").write_text("def workload(rt):\n    pass\n")
    return app


def test_a_package_folder_given_as_the_workload_is_told_its_dash_m_name(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run svc/app/` (a package, as `python -m` runs it) said only `is a directory, not
    a workload file`: no word of `-m`, the README's way to run a package."""
    _package(tmp_path)
    made = warm("run", "-m", "svc.app.warmup", "-b", "b.warm", "-q", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    for given in ("svc/app/", "svc/app"):
        for command in (("run", given), ("verify", "b.warm", "--workload", given)):
            done = warm(*command, cwd=tmp_path)
            assert done.returncode == 2, done.stderr
            line = done.stderr.strip()
            assert "\n" not in line, line
            assert "is a directory, not a workload file" in line, line
            assert f"(a package: give -m svc.app, from {tmp_path})" in line, line
    (tmp_path / "plain").mkdir()
    done = warm("run", "plain", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "warm: error: plain: is a directory, not a workload file"


TUNED_CUDA = r"""
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = 'extern "C" __global__ void z(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = V; }'
def launch(rt, k, y, n, *, stream=None):
    LAUNCH
T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", language="cuda", defines={"V": v})
                   for v in (512, 2048)}, launch)
def workload(rt):
    rt.tune(T, rt.buffer(4096), 4096)
"""


def _needs_nvrtc() -> None:
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)")


def test_a_pre_build_runs_each_tune_candidates_launch_discarded(warm: Warm, tmp_path: Path) -> None:
    """Under `--arch` (no GPU) a tune's candidates were only compiled: the launch function
    never ran, so one that forgot an argument, or launched what no GPU takes, passed the
    pre-build (`the bundle is complete`) and failed production's first tune on the GPU
    (`TuneFailure: every candidate failed`). Each candidate's launch now runs discarded,
    checked as any discarded launch is: a candidate it refuses is recorded failed with its
    reason, and a tune none of whose candidates launches fails the pre-build, as on host."""
    _needs_nvrtc()
    broken = tmp_path / "broken.py"
    broken.write_text(TUNED_CUDA.replace("LAUNCH", "rt.launch(k, y, stream=stream)"))
    done = warm("run", broken, "--arch", "sm_90", "-b", tmp_path / "a.warm", "-q")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tune zt float32[4096] 4096: every candidate failed" in done.stderr, done.stderr
    assert "v512: LaunchError: kernel z[V=512] takes 2 argument(s)" in done.stderr

    sized = tmp_path / "sized.py"
    sized.write_text(
        TUNED_CUDA.replace(
            "LAUNCH", 'rt.launch(k, y, n, block=(int(k.define("V")),), stream=stream)'
        )
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", sized, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the bundle is complete" in done.stdout, done.stdout
    shown = warm("stats", bundle, "--json")
    assert shown.returncode == 0, shown.stderr
    (tune,) = json.loads(shown.stdout)["tunes"]
    assert tune["status"] == "pending", tune
    by_name = {c["name"]: c for c in tune["candidates"]}
    assert by_name["v512"]["status"] == "pending", by_name
    assert by_name["v2048"]["status"] == "failed", by_name
    assert "2048 threads a block (at most 1024)" in by_name["v2048"]["reason"], by_name


def test_an_argparse_exit_says_the_workload_parses_no_arguments(warm: Warm, tmp_path: Path) -> None:
    """A workload whose argparse requires an option (`--size`, required=True) said only
    `workload called sys.exit(2) ...: a workload returns`, argparse's usage above it: no
    word that warm runs it with `sys.argv` holding only its path, nor what to do instead,
    which `warm run w.py --size 8` is told."""
    parse = (
        "import argparse\n"
        "def args():\n"
        "    p = argparse.ArgumentParser()\n"
        '    p.add_argument("--size", type=int, required=True)\n'
        "    return p.parse_args()\n"
    )
    hint = "argparse exits: warm runs the workload with sys.argv holding only its path"
    at_call = tmp_path / "at_call.py"
    at_call.write_text(parse + "def workload(rt):\n    args()\n")
    at_import = tmp_path / "at_import.py"
    at_import.write_text(parse + "ARGS = args()\ndef workload(rt):\n    pass\n")
    for workload in (at_call, at_import):  # the line of its parse_args()
        done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"warm: error: {workload}:5: "), last
        assert "sys.exit(2)" in last and hint in last, last
        assert "environment variables" in last, last
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\ndef workload(rt):\n    sys.exit(3)\n")
    done = warm("run", exits, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2 and "argparse exits" not in done.stderr, done.stderr


def test_a_checksum_miss_names_the_changed_candidate_without_doubled_quotes(
    warm: Warm, tmp_path: Path
) -> None:
    """A tune missed because one candidate's kernel changed read `candidate 'v1''s kernel
    (or a header it includes)`: a quote, then a possessive, doubled. It now reads `the
    kernel of candidate 'v1' ...`."""
    source = (
        "import numpy as np\nfrom warmcli import Kernel, Tunable\n"
        "SRC = 'void z(float *y, int n) { for (int i = 0; i < n; i++) y[i] = V; }'\n"
        "def launch(rt, k, y, n, *, stream=None):\n    rt.launch(k, y, n, stream=stream)\n"
        'T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", defines={"V": v}) for v in (1, 2)},'
        " launch)\n"
        "def workload(rt):\n    rt.tune(T, rt.buffer(16), 16)\n"
    )
    workload = tmp_path / "w.py"
    workload.write_text(source)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    workload.write_text(source.replace("y[i] = V;", "y[i] = V + 0;"))
    done = warm("verify", bundle, "--workload", workload)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "checksum: same candidate names, the kernel of candidate 'v1' (or a header it " in (
        done.stdout
    ), done.stdout
    assert "''s" not in done.stdout, done.stdout


def test_dash_m_of_a_package_without_a_workload_names_its_modules_that_define_one(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run -m svc.app` of a package whose workload is in a module of it (its
    `__init__.py` empty, no `__main__.py`) said only `app/__init__.py: defines no function
    workload(runtime)`: it now names the package's modules that define one, as `-m` names."""
    app = _package(tmp_path)
    (app / "other.py").write_text("def helper():\n    pass\n")
    (app / "serve.py").write_text("async def workload(rt):\n    pass\n")
    done = warm("run", "-m", "svc.app", "-b", "b.warm", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line, line
    assert "__init__.py: defines no function workload(runtime)" in line, line
    assert line.endswith("(its modules that define one: -m svc.app.serve, -m svc.app.warmup)")
    done = warm("run", "-m", "svc.app", "--entry", "helper", "-b", "b.warm", cwd=tmp_path)
    assert done.stderr.strip().endswith("(its modules that define one: -m svc.app.other)")


def test_dash_m_of_a_package_not_in_the_folder_says_where_it_looked(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run -m app.warmup` from a folder that does not hold `app` said `no such
    workload module (No module named 'app')`, not where it looked, as the `-m` of a module
    the package lacks does (`looked in FOLDER first`); a module the package's own code
    fails to import is not told so."""
    _package(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = warm("run", "-m", "svc.app.warmup", "-b", "b.warm", cwd=elsewhere)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "warm: error: svc.app.warmup: no such workload module (No module named 'svc'; "
        f"looked in {elsewhere} first)"
    ), done.stderr
    (tmp_path / "svc" / "__init__.py").write_text("import not_installed_41\n")
    done = warm("run", "-m", "svc.app.warmup", "-b", "b.warm", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "No module named 'not_installed_41'" in done.stderr, done.stderr
    assert "looked in" not in done.stderr, done.stderr


def test_diff_gives_a_kernel_its_share_of_the_batch_binary_as_stats_does(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm diff` gave a kernel that only one bundle holds, built in a batch with others
    both hold, the whole batch binary as its `bytes` (`shared_by` 1, `batch_seconds` its own
    share), where `warm stats` gives the same kernel its share (`shared_by` 2): the kernels
    listed in the diff were counted, not the bundle's users of the binary."""
    source = (
        "from warmcli import Kernel\n"
        'KS = [Kernel(f"void k{i}(int *x) {{ x[0] = {i}; }}", f"k{i}", "P")\n'
        "      for i in range(4)]\n"
        "def workload(rt):\n    for k in KS:\n        rt.launch(k, rt.buffer(1, 'int32'))\n"
    )
    (tmp_path / "a.py").write_text(source)
    (tmp_path / "b.py").write_text(source.replace("range(4)", "range(1, 4)"))
    for name in ("a", "b"):
        done = warm("run", tmp_path / f"{name}.py", "-b", tmp_path / f"{name}.warm", "-q")
        assert done.returncode == 0, done.stderr
    stats = json.loads(warm("stats", tmp_path / "a.warm", "--json").stdout)
    k0 = next(k for k in stats["kernels"] if k["entry"] == "k0")
    assert k0["shared_by"] > 1, k0  # a batch binary (one per compiler process)
    done = warm("diff", tmp_path / "a.warm", tmp_path / "b.warm", "--json")
    assert done.returncode == 0, done.stderr
    (only,) = json.loads(done.stdout)["kernels"]["only_a"]
    assert only["key"] == k0["key"], only
    assert only["shared_by"] == k0["shared_by"] and only["blob_bytes"] == k0["blob_bytes"], only
    assert abs(only["bytes"] - k0["bytes"]) <= 1, (only, k0)
    assert only["batch_seconds"] == k0["batch_seconds"], (only, k0)


def test_a_pre_build_stores_a_kernel_only_a_tunes_launch_function_launches(
    warm: Warm, tmp_path: Path
) -> None:
    """A kernel a tunable's launch function launches beside its candidate (a `zero` of the
    output first) was never compiled by a pre-build, as that function never ran there:
    `the bundle is complete`, and production's GPU compiled it at its first tune. Now that
    each candidate's launch runs discarded, it is built and stored with the rest."""
    _needs_nvrtc()
    workload = tmp_path / "w.py"
    workload.write_text(
        TUNED_CUDA.replace(
            "LAUNCH",
            "rt.launch(ZERO, y, block=(256,), stream=stream)\n"
            "    rt.launch(k, y, n, block=(256,), stream=stream)",
        ).replace(
            "def launch",
            "ZERO = Kernel('extern \"C\" __global__ void zero(float *y) { y[threadIdx.x] = 0; }',"
            ' "zero", "P", language="cuda")\ndef launch',
        )
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    kernels = json.loads(warm("stats", bundle, "--json").stdout)["kernels"]
    assert sorted({k["entry"] for k in kernels}) == ["z", "zero"], kernels
