"""A shard count no launcher's index goes with is refused, named (real CLI in a subprocess).

`WARM_SHARD_COUNT=3` is Kubernetes' `completions` beside `JOB_COMPLETION_INDEX`; set in a
job that sets no index (not an Indexed Job), each of the N jobs ran the whole workload,
unsharded, with nothing said. It is one line and exit 2 now, before anything is built.
"""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_a_shard_count_with_no_index_is_one_line_and_exit_2(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "b.warm"
    warm.env["WARM_SHARD_COUNT"] = "3"
    done = warm("run", ROOT / "examples" / "matmul_host.py", "-b", bundle, "-q")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "WARM_SHARD_COUNT='3' is set but JOB_COMPLETION_INDEX is not" in done.stderr
    assert "Traceback" not in done.stderr and not bundle.exists()
    warm.env["WARM_SHARD_COUNT"] = "1"  # a count of 1 is no sharding: the whole run
    done = warm("run", ROOT / "examples" / "matmul_host.py", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
