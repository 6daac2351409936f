"""Review of ccbin47 and equality47's merges: every path keying a `-ccbin` kernel reads its
host compiler's version line, and `NVCC_*_FLAGS` build nothing stale or of another arch.

ccbin47 keys nvcc's host compiler named by `-ccbin` by its version line through a hook
(`kernel_parts.HOST_VERSION`) that `warmcli.backends.serving` fills when imported. A process
that keyed such a kernel first (`kernel.content_hash`, `kernel_key`, before `use_bundle` or a
runtime) keyed it by its path alone, the key an upgraded compiler at that path shares: it
keys `wrapper_script.UNREAD` now, a text no other process writes (a miss, never a stale hit).
`NVCC_APPEND_FLAGS=-arch=sm_90a` under `--arch sm_90` stored PTX of `.target sm_90a` as the
`compute_90` row (which `warm verify` then called corrupt, and a newer GPU's JIT refuses): the
PTX's own arch is checked where it is built now, as the cubin's was.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

pytestmark = pytest.mark.nvcc
ARGS = ("--arch", "sm_90", "--compiler", "nvcc")
GXX = "/usr/bin/g++"

KERNEL = """
from warmcli import Kernel

K = Kernel(
    'extern "C" __global__ void f(float *o, int n) '
    '{ int i = threadIdx.x; if (i < n) o[i] = i * 2.0f; }',
    "f", "Pi", language="cuda", options=OPTIONS,
)
"""

WORKLOAD = (
    KERNEL
    + """
DEVICE = "cuda"
_ = K.content_hash  # keyed at import, before any pass (as a user's module may)

def workload(rt):
    b = rt.buffer(4, "float32")
    rt.launch(K, b, 4, grid=(1,), block=(4,))
"""
)


def _started(warm: Warm, **env: str) -> Warm:
    """`warm` with `env` over its environment, each command started: a variable no WARM_ one
    (nvcc's) gives a forked command a forking server of its own (`tests/forked_cli.py`),
    for one command, pushing out a server the module's other commands share."""
    return Warm(dict(warm.env, **env))


def _gxx() -> str:
    if not os.path.isfile(GXX):
        pytest.skip(f"no {GXX}")
    return GXX


def _keyed_in_fresh_process(then_serving: bool) -> list[str]:
    """A `-ccbin` kernel's keyed options in a fresh process that imported `Kernel` alone
    (and, `then_serving`, then `warmcli.backends.serving`, keying another instance)."""
    code = KERNEL.replace("OPTIONS", repr(["-ccbin", GXX]))
    if then_serving:
        code += "import warmcli.backends.serving\n" + KERNEL.split("\n", 2)[2]  # a new instance
    code = code.replace("OPTIONS", repr(["-ccbin", GXX]))
    code += "import json\nprint(json.dumps(list(K.keyed_options)))\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True
    )
    return json.loads(out.stdout)


def test_a_kernel_keyed_before_serving_is_imported_is_never_keyed_by_path_alone() -> None:
    """Before the fix the first process keyed `['-ccbin', '/usr/bin/g++']`, as every other such
    process did whatever compiler that path held: a stale hit after an upgrade in place."""
    from warmcli.wrapper_script import VERSION_MARK

    _gxx()
    first, second = _keyed_in_fresh_process(False), _keyed_in_fresh_process(False)
    assert first[1] != GXX and first[1].startswith(GXX + VERSION_MARK + "unread in process ")
    assert first != second  # each process's own text: no two such processes share a key
    told = _keyed_in_fresh_process(True)
    assert told[1].startswith(GXX + VERSION_MARK) and "unread" not in told[1]


def _stored_options(bundle: Path) -> list[str]:
    with sqlite3.connect(bundle) as db:
        return [json.loads(c)["options"] for (c,) in db.execute("select components from kernels")]


def test_every_cli_path_keys_a_ccbin_kernel_by_its_version_line(warm: Warm, tmp_path: Path) -> None:
    """`warm run` stores the version line in the keyed options (a workload keying its kernel at
    import, before any pass, included), and `warm verify --workload` recomputes the same key."""
    nvcc_or_skip()
    _gxx()
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(["-ccbin", GXX])))
    run = warm("run", workload, "--bundle", bundle, *ARGS)
    assert run.returncode == 0, run.stderr
    version = _keyed_in_fresh_process(True)[1]
    assert {o for o in _stored_options(bundle)} == {json.dumps(["-ccbin", version])}
    verify = warm("verify", bundle, "--workload", workload, *ARGS)
    assert verify.returncode == 0 and "the bundle is complete" in verify.stdout, verify.stdout
    check = warm("check", bundle, "--arch", "sm_90")
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_arch_nvcc_append_flags_adds_stores_no_ptx_of_another_arch(
    warm: Warm, tmp_path: Path
) -> None:
    """`NVCC_APPEND_FLAGS=-arch=sm_90a` under `--arch sm_90`: a clear error naming the PTX's
    arch and nothing stored (before: a `compute_90` row of `.target sm_90a` PTX, stored, that
    `warm verify` called corrupt)."""
    nvcc_or_skip()
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(WORKLOAD.replace("OPTIONS", "()"))
    appended = _started(warm, NVCC_APPEND_FLAGS="-arch=sm_90a")
    run = appended("run", workload, "--bundle", bundle, *ARGS)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "PTX for sm_90a, not compute_90" in run.stderr and "Traceback" not in run.stderr
    if bundle.exists():
        with sqlite3.connect(bundle) as db:
            assert db.execute("select count(*) from kernels").fetchone() == (0,)


@pytest.mark.parametrize(
    "flags",
    [
        "-Xcompiler -include,{h}",
        "--options-file {f}",
        "-optf {f}",
        "-Xcompiler=-isystem{d}",
        '-Xcompiler "-include {h}"',
    ],
)
def test_what_equality47s_loop_refused_is_refused_still(
    warm: Warm, tmp_path: Path, flags: str
) -> None:
    """Each spelling equality47's dropped loop refused: a one-line error, nothing stored."""
    nvcc_or_skip()
    (tmp_path / "h.h").write_text("#define X 1\n")
    (tmp_path / "optf").write_text("-O3\n")
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(WORKLOAD.replace("OPTIONS", "()"))
    value = flags.format(h=tmp_path / "h.h", f=tmp_path / "optf", d=tmp_path)
    run = _started(warm, NVCC_APPEND_FLAGS=value)("run", workload, "--bundle", bundle, *ARGS)
    assert run.returncode == 2, run.stdout + run.stderr
    said = [line for line in run.stderr.splitlines() if "NVCC_APPEND_FLAGS's option" in line]
    assert len(said) == 1 and ("no kernel key covers" in said[0]), run.stderr
    assert "Traceback" not in run.stderr
