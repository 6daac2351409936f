"""Fleet review: shards told in odd ways, through the real CLI.

A shard given by `--shard` or by a launcher's variables that is no pair of whole
numbers in ASCII digits (a superscript `²` passes `str.isdigit` but is no number to
`int`) is one line and exit 2, never a traceback, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.runtime.shard import LAUNCHERS

LAUNCHER_VARS = {v for group in LAUNCHERS for v in group if v} | {"WARM_SHARD"}


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--shard", "\u00b2/4"], {}),
        (["--shard", "0/\u00b2"], {}),
        ([], {"WARM_SHARD": "1/\u00b3"}),
        ([], {"SLURM_ARRAY_TASK_ID": "\u00b9", "SLURM_ARRAY_TASK_COUNT": "4"}),
        ([], {"RANK": "0", "WORLD_SIZE": "\u00b2"}),
        ([], {"JOB_COMPLETION_INDEX": "1", "WARM_SHARD_COUNT": "\u2463"}),
    ],
)
def test_a_shard_in_digits_int_cannot_read_is_one_line(
    warm: Warm, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    shard_refused(warm, tmp_path, args, env)


def shard_refused(warm: Warm, tmp_path: Path, args: list[str], env: dict[str, str]) -> str:
    """`warm run` of the host example with only the launcher variables `env` (and `args`)
    is one line and exit 2, no traceback, no bundle left; returns the line."""
    warm.env = {k: v for k, v in warm.env.items() if k not in LAUNCHER_VARS} | env
    bundle = tmp_path / "b.warm"
    proc = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and not bundle.exists()
    return proc.stderr


@pytest.mark.parametrize("target", ["https://127.0.0.1:9/fleet.warm", "s3://fleet/fleet.warm"])
def test_a_merge_into_a_url_is_refused_not_written_to_a_folder_named_like_it(
    warm: Warm, tmp_path: Path, target: str
) -> None:
    shard = tmp_path / "s.warm"
    assert warm("run", EXAMPLES / "matmul_host.py", "-b", shard, "-q").returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    proc = warm("merge", shard, "-o", target, cwd=work)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "warm push" in proc.stderr and list(work.iterdir()) == []
