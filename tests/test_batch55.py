"""A variable no compiler reads splits no batch; one a wrapper script names still does.

review55 made each compile unit keep the environment it was queued in and `plan_groups` share a
translation unit only among units queued in the same *whole* environment, so a workload setting
a step counter (`os.environ["STEP"] = str(i)`) before each of 200 launches made 200 compiler
processes in `warm run` (12.2 s on this machine) where it made a handful before. Now units are
grouped by the part of their environment a compile reads
(`warmcli.backends.compile_environment`). Real parts: the real CLI (forked) warms with the real
cc, a real production process serves.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_readme54 import SERVE
from test_review55 import two_cuda_kernels

# N kernels, each launched after the workload sets STEP to its index (which cc never reads).
STEPPED = """
import os
from warmcli import Kernel
DEVICE = "host"
SRC = "void k%d(long *o) { o[0] = o[0] * 7 %% 1000003 + %s; }"
KERNELS = [Kernel(SRC % (i, VALUE % i), "k%d" % i, "P") for i in range(N)]
def workload(rt):
    o = rt.buffer(1, "int64")
    for i, kernel in enumerate(KERNELS):
        os.environ["STEP"] = str(i + 1)
        rt.launch(kernel, o)
    return [o]
"""


def stepped(n: int, value: str) -> str:
    """`STEPPED` with `n` kernels, kernel i adding `value % i` to seven times the sum so far."""
    return f"N, VALUE = {n}, {value!r}\n{STEPPED}"


def folded(values: list[int]) -> int:
    """What `STEPPED`'s kernels compute adding `values` in launch order."""
    total = 0
    for value in values:
        total = total * 7 % 1000003 + value
    return total


def test_a_step_counter_no_compiler_reads_splits_no_batch(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: 200 compiler processes for 200 kernels (one per STEP value); now two groups for
    `--jobs 2`, and the bundle serves what the kernels compute in launch order."""
    path, bundle = workload_file(stepped(200, "%d")), tmp_path / "b.warm"
    doc = warm.json("run", path, "-b", bundle, "--jobs", "2")
    second = doc["passes"][1]["compilation"]
    assert second["compiled"] == 200, second
    assert second["compiler_processes"] <= 4, second  # was 200
    assert doc["verified"] is True and doc["missing"] == []
    assert warm.production(SERVE, path, bundle=bundle) == [folded(list(range(200)))]


# A C compiler that is a wrapper script reading STEP: each kernel is built in its own value.
WRAPPER = '#!/bin/sh\nexec cc -DSTEP_VALUE=$STEP "$@"\n'


def test_a_step_counter_a_wrapper_script_names_builds_each_kernel_in_its_value(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """The wrapper adds `-DSTEP_VALUE=$STEP`: each kernel is built with the STEP set before its
    launch (as a cold start builds it), so no two share a compile."""
    (cc := tmp_path / "mycc").write_text(WRAPPER)
    cc.chmod(0o755)
    warm = warm.with_env(WARM_CC=str(cc), STEP="9")
    path, bundle = workload_file(stepped(3, "STEP_VALUE + 0 * %d")), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [folded([1, 2, 3])]  # cold
    doc = warm.json("run", path, "-b", bundle, "--jobs", "2")
    second = doc["passes"][1]["compilation"]
    assert (second["compiled"], second["compiler_processes"]) == (3, 3), second
    assert warm.production(SERVE, path, bundle=bundle) == [folded([1, 2, 3])]


# Two CUDA kernels, `INCLUDES` (which nvcc's profile adds to every compile) set around the second's
# launch only; the second pass's first launch compiles the queue, both, with it unset.
INCLUDES_AROUND_ONE = two_cuda_kernels(
    ("two", "2"), 'os.environ["INCLUDES"] = "-DN=5"', 'del os.environ["INCLUDES"]'
)


def test_a_variable_nvcc_adds_to_every_compile_splits_a_batch(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """nvcc refuses a compile under `INCLUDES` (no key covers it), as a cold start's launch of
    `two` is; grouped by the variables a compile reads without it, `two` was built beside `one`
    with it unset and stored (exit 0)."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    path, bundle = workload_file(INCLUDES_AROUND_ONE), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--arch", "sm_90", "--compiler", "nvcc", "--jobs", "1")
    said = " ".join((done.stderr + done.stdout).split())
    assert done.returncode != 0, said
    assert "INCLUDES is set in the environment" in said and "Traceback" not in said, said


def test_a_variable_an_nvcc_profile_names_is_one_a_compile_reads(tmp_path: Path) -> None:
    """An `nvcc.profile` naming `$(R55P)` (nvcc reads `-I$(R55P)` as the variable says: its
    `-D` reaches every kernel) makes R55P a variable two units' groups tell apart, once nvcc's
    key read the profile; a step counter stays no such variable. Run in a fresh process (the
    names are a process's)."""
    import subprocess
    import sys

    from conftest import ROOT
    from fresh_python import fresh_env

    found = list((ROOT / ".venv").glob("lib/python*/site-packages/nvidia/cu*/bin/nvcc.profile"))
    if not found:
        import pytest

        pytest.skip("no pip toolkit's nvcc.profile")
    edited = tmp_path / "nvcc.profile"
    edited.write_bytes(found[0].read_bytes().replace(b'"-I$(TOP)/include"', b"-I$(R55P)"))
    code = (
        "from warmcli.backends.compile_environment import compiler_reads\n"
        "from warmcli.backends.cuda.profile import digest\n"
        "pairs = (('R55P', '/inc -DN=3'), ('STEP', '1'))\n"
        "before = compiler_reads(pairs)\n"
        f"digest({str(tmp_path / 'nvcc')!r})\n"
        "print(before, compiler_reads(pairs))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=fresh_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["()", "(('R55P',", "'/inc", "-DN=3'),)"], done.stdout
