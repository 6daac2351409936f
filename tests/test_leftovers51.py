"""Stop 51's leftovers of its trials, mended.

- `--nvcc PATH` beside `--compiler nvrtc` (or `WARM_CUDA_COMPILER=nvrtc`) was dropped
  without a word (trial51a): NVRTC comes first, so the nvcc named never runs. Each command
  taking both now says so in one warning line, and goes on as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

UNUSED = "warm: warning: --nvcc /x/nvcc is not used: {} nvrtc compiles CUDA with NVRTC\n"


def test_an_nvcc_named_beside_nvrtc_is_said_unused(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    named = warm("check", bundle, "--nvcc", "/x/nvcc", "--compiler", "nvrtc")
    assert named.returncode == 0, named.stderr
    assert named.stderr == UNUSED.format("--compiler"), named.stderr
    by_env = warm.with_env(WARM_CUDA_COMPILER="nvrtc")("check", bundle, "--nvcc", "/x/nvcc")
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stderr == UNUSED.format("WARM_CUDA_COMPILER"), by_env.stderr
    for compiler in ("nvcc", "auto"):  # the nvcc named is the one used: nothing said
        used = warm("check", bundle, "--nvcc", "/x/nvcc", "--compiler", compiler)
        assert used.returncode == 0 and used.stderr == "", (compiler, used.stderr)
    (tmp_path / "w.py").write_text("def workload(rt):\n    pass\n")
    run = ("run", tmp_path / "w.py", "-b", tmp_path / "r.warm", "-q")
    for command in (("clean", bundle, "--dry-run"), ("verify", bundle), ("devices",), run):
        said = warm(*command, "--nvcc", "/x/nvcc", "--compiler", "nvrtc")
        assert said.stderr.startswith(UNUSED.format("--compiler")), (command, said.stderr)
