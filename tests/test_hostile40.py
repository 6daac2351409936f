"""Holes hostile40 found in what the last stop added, each reproduced for real: the CLI
forked (conftest's `warm`) on real SQLite bundles that an attacker edited (rows re-keyed as
a reader keys them, so they pass the row checks), NVRTC for `--arch sm_90` (no GPU).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (the fixture)
from test_leftovers39 import cuda_small  # noqa: F401  (the fixture)

from warmcli.kernel_parts import key_of


def _rearch(bundle: Path, arch: str) -> None:
    """One sm_90 row moved to `arch`, re-keyed (key, symbol, components) as a reader keys it."""
    with sqlite3.connect(bundle) as conn:
        rowid, comps, tool, entry = conn.execute(
            "SELECT rowid, components, toolchain, entry FROM kernels WHERE arch = 'sm_90' LIMIT 1"
        ).fetchone()
        parts = dict(json.loads(comps), arch=arch)
        key = key_of(parts["kernel"], arch, parts.get("headers", ""), tool)
        conn.execute(
            "UPDATE kernels SET key = ?, arch = ?, symbol = ?, components = ? WHERE rowid = ?",
            (key, arch, f"warm_{key[:16]}_{entry}", json.dumps(parts, sort_keys=True), rowid),
        )
    conn.close()


@pytest.mark.parametrize("arch", ["sm_\u00b2", "sm_\u2468\u2080"], ids=["superscript", "circled"])
def test_a_cubin_row_of_an_arch_of_non_decimal_digits_is_named_not_a_traceback(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    arch: str,
) -> None:
    """check_cubin took an arch's SM with str.isdigit, which '²' passes and int() refuses: a
    bundle whose cubin row was re-keyed under arch 'sm_²' made `warm verify` and `warm clean`
    end in a ValueError traceback (exit 1). It is one named problem now."""
    bundle = tmp_path / "arch.warm"
    shutil.copyfile(cuda_small, bundle)
    _rearch(bundle, arch)
    before = hashlib.sha256(bundle.read_bytes()).hexdigest()
    verified = warm("verify", bundle)
    said = verified.stdout + verified.stderr
    assert verified.returncode == 1 and "Traceback" not in said, said[-1500:]
    assert "is not an sm_XX architecture" in said, said[-1500:]
    cleaned = warm("clean", "--dry-run", bundle)
    said = cleaned.stdout + cleaned.stderr
    assert cleaned.returncode == 0 and "Traceback" not in said, said[-1500:]
    assert "would remove 1 kernel(s)" in said, said[-1500:]
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before
