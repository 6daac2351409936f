"""A tune's candidate recorded as failed to compile is not queued again by a compile-only
pass only where it failed with the very kernel key it has now: built by another
toolchain (another key), an `--arch` pre-build compiles it and stores it. The real CLI,
the real nvcc, first with `NVCC_APPEND_FLAGS=-DTOOLCHAIN_A` (another configuration, keyed
apart: `config.nvcc_flags`), under which one variant cannot build. (A wrapper script that
said another release on `--version` was the other toolchain until an nvcc script was keyed
by the binary it runs, whose line is the real nvcc's: the same key.)"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = '''\
from warmcli import Kernel, Tunable

DEVICE = "cuda"
SRC = r"""
#if defined(TOOLCHAIN_A) && VARIANT == 1
#error "toolchain A cannot build variant 1"
#endif
extern "C" __global__ void k(float *o, int n) { int i = threadIdx.x; if (i < n) o[i] = VARIANT; }
"""
T = Tunable(
    "t",
    {f"v{v}": Kernel(SRC, "k", "Pi", language="cuda", defines={"VARIANT": v}) for v in (0, 1)},
    lambda rt, k, out, n, *, stream=None: rt.launch(
        k, out, n, grid=(1, 1, 1), block=(32, 1, 1), stream=stream
    ),
)

def workload(rt):
    rt.tune(T, rt.buffer(16), 16)
'''


def test_a_candidate_failed_under_another_toolchain_is_built_by_this_one(
    warm: Warm, tmp_path: Path
) -> None:
    nvcc = nvcc_or_skip()
    script = tmp_path / "tc.py"
    script.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    common = ("run", script, "-b", bundle, "--arch", "sm_90", "--compiler", "nvcc", "--no-ptx")
    first = warm.with_env(NVCC_APPEND_FLAGS="-DTOOLCHAIN_A")(*common, "--nvcc", nvcc, "--json")
    assert first.returncode in (0, 1), first.stdout[-2000:] + first.stderr
    stats = warm.json("stats", bundle)
    assert {c["name"]: c["status"] for c in stats["tunes"][0]["candidates"]}["v1"] == "failed"

    second = warm(*common, "--nvcc", nvcc, "--json")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr
    stats = warm.json("stats", bundle)
    built = sorted((k["label"], "TOOLCHAIN_A" in k["toolchain"]) for k in stats["kernels"])
    assert built == [("k[VARIANT=0]", False), ("k[VARIANT=0]", True), ("k[VARIANT=1]", False)]
