"""One name for a kernel in every command's output: its label (`Kernel.label`, the
entry and its defines), as `warm clean`, `warm check` and a process's misses name it.
`warm stats` named a tune's candidate kernel by the candidate (`matmul/tile8 [TILE=8]`)
and its PTX twin, no candidate, by its label (`block_sum[BLOCK=128]`). Real files, the
real CLI in subprocesses."""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)


def named(text: str, kernels: list[dict[str, str]]) -> None:
    """Each kernel's row (found by its key) in `text` names it by its label."""
    for k in kernels:
        row = next(line for line in text.splitlines() if k["key"][:8] in line)
        assert f" {k['label']} " in row, (k["label"], row)


def test_stats_and_clean_name_a_kernel_by_its_label(made: tuple[Warm, Path]) -> None:
    warm, good = made
    kernels = warm.json("stats", good)["kernels"]
    assert any(k["candidates"] for k in kernels)  # tune candidates among them
    named(warm("stats", good).stdout, kernels)
    clean = warm("clean", good, "--dry-run", "--max-size", "1")
    assert clean.returncode == 0, clean.stderr
    for k in kernels:
        assert f" {k['label']} " in clean.stdout, (k["label"], clean.stdout)


def test_a_cubin_and_its_ptx_twin_have_one_name(warm: Warm, tmp_path: Path) -> None:
    path = tmp_path / "p.warm"
    made = warm(
        "run", EXAMPLES / "pycuda_style.py", "--pycuda", "--arch", "sm_90",
        "--allow-discarded-reads", "--quiet", "-b", path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    kernels = warm.json("stats", path)["kernels"]
    twins = [k for k in kernels if k["label"] == "block_sum[BLOCK=128]"]
    assert {k["arch"] for k in twins} == {"sm_90", "compute_90"}
    named(warm("stats", path).stdout, kernels)
