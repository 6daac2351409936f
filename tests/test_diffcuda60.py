"""An nvcc that is a wrapper script adding to the nvcc it runs is keyed by its text.

Found by a differential trial of CUDA pre-builds (a bundle's build for a key against a cold
compile's): an `nvcc` script (`WARM_NVCC`, `--nvcc`, or the one `CUDA_HOME`, `CUDA_PATH` or
`PATH` finds) was keyed by the version line of the nvcc it runs alone, so a script adding
`-DWVAL=1`, edited to `-DWVAL=2`, kept every key: `warm run` built nothing and the bundle
served the `-DWVAL=1` cubin a cold compile no longer builds. A script that only runs another
nvcc (`exec /usr/local/cuda/bin/nvcc "$@"`) still keys as that nvcc does. Real nvcc, compile
only, the real CLI in a subprocess.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Warm, nvcc_or_skip

WORKLOAD = """
from warmcli import Kernel

DEVICE = "cuda"
K = Kernel('extern "C" __global__ void k(int *o) { o[0] = WVAL; }', "k", "P", language="cuda")


def workload(rt):
    b = rt.buffer(1, "int32")
    rt.launch(K, b, grid=1, block=1)
"""


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(0o755)
    return path


def _rows(warm: Warm, tmp_path: Path, name: str, nvcc: Path) -> dict[str, str]:
    """A cold `warm run` (a fresh home, a fresh bundle) with `nvcc`: its kernel rows, key to
    blob digest."""
    bundle = tmp_path / f"{name}.warm"
    got = warm.with_env(WARM_HOME=str(tmp_path / f"home-{name}"), WARM_NVCC=str(nvcc))(
        "run", tmp_path / "w.py", "--arch", "sm_90", "--compiler", "nvcc", "--no-ptx",
        "--no-verify", "-q", "-b", bundle,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    with sqlite3.connect(bundle) as db:
        return dict(db.execute("SELECT key, sha256 FROM kernels").fetchall())


def test_an_nvcc_script_adding_a_define_keys_its_edit(warm: Warm, tmp_path: Path) -> None:
    real = nvcc_or_skip()
    (tmp_path / "w.py").write_text(WORKLOAD)
    wrapper = _script(tmp_path / "bin" / "nvcc", f'exec {real} -DWVAL=1 "$@"')
    before = _rows(warm, tmp_path, "before", wrapper)
    _script(wrapper, f'exec {real} -DWVAL=2 "$@"')
    after = _rows(warm, tmp_path, "after", wrapper)
    assert set(before.values()) != set(after.values())  # the cold builds differ...
    assert not set(before) & set(after)  # ...so the keys do (before: the same key)


def test_an_nvcc_script_that_only_runs_another_keys_as_it(warm: Warm, tmp_path: Path) -> None:
    real = nvcc_or_skip()
    (tmp_path / "w.py").write_text(WORKLOAD.replace("WVAL", "7"))
    plain = _script(tmp_path / "bin" / "nvcc", f'# a toolkit link\nexec "{real}" "$@"')
    assert _rows(warm, tmp_path, "script", plain) == _rows(warm, tmp_path, "binary", Path(real))
