"""review55c: what nvcc hands cicc and ptxas from the environment splits a batch, and is refused.

nvcc passes `NVVM_FLAGS` to cicc and `OCG_FLAGS` to ptxas from the environment (no profile
needed: `nvcc --dryrun` shows them; `OCG_FLAGS=-O0` builds another cubin, `NVVM_FLAGS=-g` another
PTX), but warm's part of the environment a compile reads (`compile_environment.compiler_reads`)
did not name them, nor did `host_options.refused_flags`: with one set around one CUDA kernel's
launch, `warm run --jobs 1` built that kernel beside the first with it unset and stored it (exit
0), a build its cold launch (under the flag) does not make, under a key no flag reaches. Real
parts: the real CLI (forked), the real nvcc.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_batch55 import INCLUDES_AROUND_ONE


@pytest.mark.parametrize(("name", "value"), [("OCG_FLAGS", "-O0"), ("NVVM_FLAGS", "-g")])
def test_a_flag_nvcc_hands_its_tools_from_the_environment_is_refused(
    warm: Warm, tmp_path: Path, workload_file, name: str, value: str
) -> None:
    """Set around the second kernel's launch only: refused (no key covers it), where before it
    was built in the first kernel's environment, without it, and stored (exit 0)."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    source = INCLUDES_AROUND_ONE.replace('"INCLUDES"', repr(name)).replace('"-DN=5"', repr(value))
    path, bundle = workload_file(source), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--arch", "sm_90", "--compiler", "nvcc", "--jobs", "1")
    said = " ".join((done.stderr + done.stdout).split())
    assert done.returncode != 0, said
    assert f"{name} is set in the environment" in said and "Traceback" not in said, said


# Two host kernels, GNUTARGET (the BFD target ld reads: `invalid BFD target` for one it has not)
# set around the second's launch only.
GNUTARGET_AROUND_ONE = """
import os
from warmcli import Kernel
DEVICE = "host"
SRC = "void %s(long *o) { o[0] += %s; }"
ONE, TWO = Kernel(SRC % ("one", "1"), "one", "P"), Kernel(SRC % ("two", "2"), "two", "P")
def workload(rt):
    o = rt.buffer(1, "int64")
    rt.launch(ONE, o)
    os.environ[NAME] = VALUE
    rt.launch(TWO, o)
    del os.environ[NAME]
"""


def test_a_variable_ld_reads_splits_a_batch(warm: Warm, tmp_path: Path, workload_file) -> None:
    """ld reads `GNUTARGET` (binutils' BFD target): a cold launch of `two` under a target ld has
    not fails to link, as warm run now does; grouped without it, `two` was built beside `one`
    with it unset and stored (exit 0). (`LDEMULATION` held: cc gives ld its `-m`.)"""
    source = GNUTARGET_AROUND_ONE.replace("NAME", "'GNUTARGET'").replace("VALUE", "'r55c'")
    path, bundle = workload_file(source), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--jobs", "1")
    said = " ".join((done.stderr + done.stdout).split())
    assert done.returncode != 0, said
    assert "Traceback" not in said, said


# A C compiler that is a wrapper script reading STEP by a command, no `$STEP` in its text; one
# in Perl, whose `$ENV{STEP}` names ENV.
READS_BY_COMMAND = '#!/bin/sh\nexec cc -DSTEP_VALUE="$(printenv STEP)" "$@"\n'
READS_IN_PERL = '#!/usr/bin/env perl\nexec("cc", "-DSTEP_VALUE=$ENV{STEP}", @ARGV);\n'


@pytest.mark.parametrize("script", [READS_BY_COMMAND, READS_IN_PERL], ids=["printenv", "perl"])
def test_a_wrapper_reading_the_environment_by_a_command_builds_each_kernel_in_its_value(
    warm: Warm, tmp_path: Path, workload_file, script: str
) -> None:
    """`printenv STEP` names no variable warm reads out of the script (`$STEP`), so units that
    differed only in STEP shared one compile in the first's value: the bundle served 1, 1, 1
    where a cold start computes with 1, 2, 3. A script that reads the environment so (`printenv`,
    `${!name}`, `eval`, sourcing a file) makes every variable one a compile reads."""
    from test_batch55 import folded, stepped
    from test_readme54 import SERVE

    if script == READS_IN_PERL and shutil.which("perl") is None:
        pytest.skip("no perl")
    (cc := tmp_path / "mycc").write_text(script)
    cc.chmod(0o755)
    warm = warm.with_env(WARM_CC=str(cc), STEP="9")
    path, bundle = workload_file(stepped(3, "STEP_VALUE + 0 * %d")), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [folded([1, 2, 3])]  # cold
    assert warm("run", path, "-b", bundle, "--jobs", "1").returncode == 0
    assert warm.production(SERVE, path, bundle=bundle) == [folded([1, 2, 3])]
