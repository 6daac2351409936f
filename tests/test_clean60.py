"""The commands that write a bundle in place (`warm clean`, `warm sign`, `warm run` into it)
on an existing bundle whose file name leaves no room for the journal SQLite makes beside it
(`NAME-journal`: a folder takes names of 255 bytes at most): one line naming the file name's
length, exit 2, the bundle as it was; never "too many open files?"; and `warm push` under a
file size limit, which names that limit (trial 60)."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

NAME_MAX = 255


@pytest.mark.parametrize("length", [248, NAME_MAX - len(".lock")])
@pytest.mark.parametrize("command", ["clean", "sign", "run"])
def test_a_name_too_long_for_its_journal_is_said_so_and_the_bundle_kept(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    command: str,
    length: int,
) -> None:
    if os.pathconf(tmp_path, "PC_NAME_MAX") != NAME_MAX:
        pytest.skip("a file system whose names are not 255 bytes at most")
    bundle = host_bundle(tmp_path / ("b" * (length - len(".warm")) + ".warm"))
    before = hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert warm("keygen", tmp_path / "k").returncode == 0
    args = {
        "clean": ["clean", bundle, "--older-than", "0s"],
        "sign": ["sign", bundle, "--key", tmp_path / "k"],
        "run": ["run", EXAMPLES / "many_kernels_host.py", "--bundle", bundle, "-q"],
    }[command]
    proc = warm.with_env(WARM_EXAMPLE_KERNELS="5")(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"its file name is {length} bytes" in lines[0]
    assert "journal" in lines[0] and "too many open files" not in lines[0]
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith("-journal")]


def test_a_push_whose_copy_passes_a_file_size_limit_says_so_not_tmpdir(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm push` copies the bundle into TMPDIR before it reaches any store: under `ulimit
    -f` below the bundle's size that copy fails, and the line names the limit (it said only:
    set TMPDIR to a folder with room, which no room lifts)."""
    bundle = host_bundle(tmp_path / "b.warm")
    limit = bundle.stat().st_size // 2

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "push", str(bundle), "http://localhost:9/b.warm"],
        capture_output=True,
        text=True,
        env=dict(warm.env, TMPDIR=str(tmp_path)),
        preexec_fn=limited,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "not pushed" in lines[0] and "ulimit -f" in lines[0]
    assert "set TMPDIR to a folder with room" not in lines[0]
