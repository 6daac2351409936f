"""Small wrongs mended on main in stop 40, each through the real CLI (a forked `warm`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
import numpy as np
from warmcli import Kernel

K = Kernel("void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "k", "Pi")

def workload(rt):
    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(K, x, 4)
"""


@pytest.mark.parametrize("spec", ["cuda:\u00b2", "cuda:\u0669", "cuda:\uff11"])
def test_a_device_number_of_non_ascii_digits_is_refused_in_one_line(warm, tmp_path: Path, spec):
    """`"²".isdigit()` holds but `int("²")` raises: `--device cuda:²` was taken for an
    index (on a GPU machine, a ValueError traceback); it is no CUDA device's name."""
    (tmp_path / "w.py").write_text(WORKLOAD)
    result = warm(
        "run", str(tmp_path / "w.py"), "--device", spec, "--bundle", str(tmp_path / "b.warm")
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a CUDA device" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_dry_run_clean_does_not_claim_the_file_keeps_its_size(warm, tmp_path: Path) -> None:
    """`warm clean --dry-run` said `file N → N bytes` (the file as it is, unchanged by a dry
    run) beside the binaries it would free, though a clean shrinks the file too: it says
    the file's size now, and the real clean its size after."""
    work, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    work.write_text(WORKLOAD)
    assert warm("run", work, "-b", bundle, "-q").returncode == 0
    dry = warm("clean", bundle, "--max-size", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    said = " ".join(dry.stdout.split())
    size = bundle.stat().st_size
    assert f"file {size:,} bytes now" in said and "→ 0 bytes" in said, said
    done = warm("clean", bundle, "--max-size", "1")
    assert done.returncode == 0, done.stderr
    after = " ".join(done.stdout.split())
    assert f"file {size:,} → {bundle.stat().st_size:,} bytes" in after, after


@pytest.mark.parametrize("name", ["WARM_TRUSTED_KEYS", "WARM_SHARD", "JOB_COMPLETION_INDEX"])
def test_dask_env_naming_a_variable_never_passed_is_refused(warm, tmp_path: Path, name) -> None:
    """`--dask-env WARM_TRUSTED_KEYS` (or a shard variable) was dropped in silence, the
    shards never given it: it is refused in one line, before any scheduler is reached."""
    (tmp_path / "w.py").write_text(WORKLOAD)
    args = ("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "--dask", "tcp://127.0.0.1:9")
    result = warm(*args, "--dask-env", name)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"warm: error: --dask-env {name}: the shard and trusted-key variables are never given "
        "to the shards (each is its own shard; this side checks signatures)"
    ]
    assert not (tmp_path / "b.warm").exists()


def test_keygen_interrupted_between_its_two_files_leaves_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`warm keygen` writes the private key, then the public one, all or none: a Ctrl-C
    landing between them left the private key alone, and every keygen after was refused
    (`exists; keygen never overwrites a key`)."""
    from warmcli import home

    opened = []
    real_fdopen = os.fdopen

    def interrupting_fdopen(fd: int, *args: object) -> object:  # a fake: the second file's
        opened.append(fd)  # writing is where the Ctrl-C lands
        if len(opened) == 2:
            os.close(fd)
            raise KeyboardInterrupt
        return real_fdopen(fd, *args)

    monkeypatch.setattr(home.os, "fdopen", interrupting_fdopen)
    key, pub = tmp_path / "k", tmp_path / "k.pub"
    with pytest.raises(KeyboardInterrupt):
        home.write_new([(key, b"private", 0o600), (pub, b"public", 0o644)])
    assert not key.exists() and not pub.exists()


def test_a_dtype_of_raw_bytes_is_refused_with_the_view_of_its_bits() -> None:
    """A dtype of bytes that are no numpy number (raw `V2`, as `ml_dtypes`' `bfloat16` is
    to numpy) was refused as "not numeric" with nothing a researcher could do: the message
    says to upload its bits."""
    import numpy as np

    from warmcli.runtime.launch_sizes import numeric_dtype

    with pytest.raises(ValueError, match=r"upload its bits, x\.view\(np\.uint16\)"):
        numeric_dtype(np.dtype("V2"))
    with pytest.raises(ValueError) as record:
        numeric_dtype(np.dtype([("a", "<u2")]))
    said = str(record.value)  # a record: its bytes as a struct's (trial48e), not its bits
    assert "np.uint16" not in said and "struct" in said and "align=True" in said, said
