"""Review of today's inspection merges (stats40, polish40), read through the real CLI in a
subprocess over real SQLite bundles.

- `warm stats` counts each compile once by telling a compile's rows of one kernel (a CUDA
  kernel's cubin and PTX) by device, toolchain, the kernel's content digest and its share of
  time (`warmcli.bundle.compiles`). A row that names no content digest (a bundle another
  tool wrote, `bench/scale.py`'s, any made-up one) is no twin of anything: it was taken for a
  twin of every row of its device and toolchain whose seconds were equal, so the 5,000 rows
  of one arch in bench/scale.py's bundle each showed 0.01 s / 5,000 (2e-06 s), the streamed
  (`warm stats --json`) and held (`warm diff --json`) listings alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from forked_cli import forked_warm  # noqa: F401  (the `warm` fixture, each command forked)

from bench.scale import build


@pytest.fixture(scope="module")
def undigested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/scale.py's bundle of 6 kernels (3 an arch, each row 0.01 s), whose rows name
    no content digest."""
    path = tmp_path_factory.mktemp("undigested") / "scale.warm"
    build(path, 6, 0)
    return path


def test_a_row_naming_no_kernel_digest_is_a_compile_of_its_own(
    warm: Any, undigested: Path, tmp_path: Path
) -> None:
    kernels = warm.json("stats", undigested)["kernels"]
    assert len(kernels) == 6
    assert [k["seconds"] for k in kernels] == [0.01] * 6  # each its row's, not 0.01 / 3
    assert [k["compile_seconds"] for k in kernels] == [0.01] * 6
    empty = tmp_path / "empty.warm"
    build(empty, 0, 0)
    only = warm.json("diff", empty, undigested)  # the held listing (kernels_json)
    assert [k["seconds"] for k in only["kernels"]["only_b"]] == [0.01] * 6
