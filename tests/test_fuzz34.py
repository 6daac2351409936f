"""Bugs found by stop 34's structural fuzz campaign over real bundles, each through the real CLI
or a real production process (WARM_BUNDLE) over a real bundle made by `warm run`.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "examples" / "matmul_host.py"
_BUNDLE: list[bytes] = []  # the example's bundle, made once per test process

# What the example workload computes on a runtime `rt`: its row sums, one line.
ROW_SUMS = """
rng = np.random.default_rng(0)
sums = []
for mm, n, k in m.SHAPES:
    a = rt.upload(rng.standard_normal((mm, k), dtype=np.float32))
    b = rt.upload(rng.standard_normal((k, n), dtype=np.float32))
    bias = rt.upload(rng.standard_normal(n, dtype=np.float32))
    c = rt.buffer((mm, n), "float32")
    out = rt.buffer(mm, "float32")
    rt.tune(m.MATMUL, a, b, c, mm, n, k)
    rt.launch(m.BIAS_RELU, c, bias, mm, n)
    rt.launch(m.ROW_SUM, c, out, mm, n)
    sums.append(rt.read(out))
print(repr(np.concatenate(sums).round(1).tolist()))
"""

# The example workload run over WARM_BUNDLE: its row sums, one line.
SERVE = (
    f"""
import sys
sys.path.insert(0, {str(ROOT / "examples")!r})
import numpy as np
import warmcli
import matmul_host as m
rt = warmcli.runtime()
"""
    + ROW_SUMS
)


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


def matmul_bundle(warm: Warm, path: Path) -> Path:
    if not _BUNDLE:
        done = warm("run", MATMUL, "-b", path)
        assert done.returncode == 0, done.stderr
        _BUNDLE.append(path.read_bytes())
    path.write_bytes(_BUNDLE[0])
    return path


def serve(warm: Warm, bundle: Path | None) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_BUNDLE="" if bundle is None else str(bundle))
    return subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, timeout=300
    )


def swap_keys(bundle: Path, label_a: str, label_b: str) -> None:
    """Two kernel rows' keys swapped, every other field (blob, symbol) left as it is."""
    conn = sqlite3.connect(bundle)
    (a,) = conn.execute("SELECT key FROM kernels WHERE label = ?", (label_a,)).fetchone()
    (b,) = conn.execute("SELECT key FROM kernels WHERE label = ?", (label_b,)).fetchone()
    conn.execute("UPDATE kernels SET key = 'swapping' WHERE key = ?", (a,))
    conn.execute("UPDATE kernels SET key = ? WHERE key = ?", (a, b))
    conn.execute("UPDATE kernels SET key = ? WHERE key = 'swapping'", (b,))
    conn.commit()
    conn.close()


@pytest.fixture(params=[("row_sum", "bias_relu"), ("matmul[TILE=8]", "matmul[TILE=64]")])
def swapped(warm: Warm, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The example's bundle with two kernel rows under each other's keys: of two entries,
    or of one entry built with other defines."""
    bundle = matmul_bundle(warm, tmp_path / "b.warm")
    swap_keys(bundle, *request.param)
    return bundle


def test_a_kernel_row_under_another_kernels_key_is_never_launched_for_it(
    warm: Warm, swapped: Path
) -> None:
    cold = serve(warm, None)
    assert cold.returncode == 0, cold.stderr
    served = serve(warm, swapped)
    assert served.returncode == 0, served.stderr
    assert served.stdout == cold.stdout  # bias_relu was launched as row_sum


def test_verify_and_check_name_a_kernel_row_whose_symbol_is_another_keys(
    warm: Warm, swapped: Path
) -> None:
    verify = warm("verify", swapped)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "symbol" in verify.stdout + verify.stderr
    assert "Traceback" not in verify.stderr
    check = warm("check", swapped)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "corrupt" in check.stdout and "symbol" in check.stdout
