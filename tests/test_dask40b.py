"""A `warm run --dask` re-run does only what is new, as a local re-run does (dask40b).

Real parts only: the CLI in subprocesses, the test process's shared real local Dask cluster
(two worker processes on 127.0.0.1, `tests/dask_cluster.py`), the system cc, real SQLite
files.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from dask_cluster import SharedCluster
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.warming.fanout import run_shard
from warmcli.warming.seeds import shard_seeds

distributed = pytest.importorskip("distributed")

MANY = EXAMPLES / "many_kernels_host.py"
EDITED = "\nPLAIN[-1] = _kernel(99999, 0)  # one kernel edited\n"


@pytest.fixture(scope="module")
def scheduler(shared_cluster: SharedCluster) -> Iterator[str]:
    """Two workers whose environment says the example has 20 kernels."""
    with shared_cluster.using({"WARM_EXAMPLE_KERNELS": "20"}) as address:
        yield address


def compiled(doc: dict[str, Any]) -> tuple[int, int]:
    """Kernels compiled and tunes measured by a `warm run --json`'s warming passes."""
    passes = doc["passes"][:-1]
    return (
        sum(p["compilation"]["compiled"] for p in passes),
        sum(p["autotune"]["measured"] for p in passes),
    )


def contents(warm: Warm, bundle: Path) -> tuple[Any, ...]:
    """What a bundle holds: kernels and their binaries, tunes and their picks and
    measurements, the run it records (not a kernel's times: a merge writes its `created`,
    and `last_used` is each process's clock)."""
    doc = warm.json("stats", bundle)
    kernels = sorted((k["key"], k["sha256"]) for k in doc["kernels"])
    tunes = sorted((t["key"], t["pick"], t["measured_at"], t["status"]) for t in doc["tunes"])
    return kernels, tunes, doc["manifest"]["run"]


def test_a_dask_rerun_after_one_kernel_is_edited_compiles_only_that_one(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """Every `--dask` re-run compiled and measured everything again on the workers (its
    shards started from empty bundles), where a local re-run compiles only the edited
    kernel. Now each shard is sent its part of the bundle: the re-run compiles 1 kernel and
    measures nothing, and the bundle is what a local re-run makes of the same bundle."""
    workload, bundle, local = tmp_path / "many.py", tmp_path / "b.warm", tmp_path / "l.warm"
    shutil.copy(MANY, workload)
    here = warm.with_env(WARM_EXAMPLE_KERNELS="20")
    args = ("run", workload, "--dask", scheduler, "--json")
    first = here(*args, "-b", bundle)
    assert first.returncode == 0, first.stderr
    assert compiled(json.loads(first.stdout)) == (20, 4)
    again = here(*args, "-b", bundle)  # the same run: nothing to do, recorded whole
    assert again.returncode == 0, again.stderr
    assert compiled(json.loads(again.stdout)) == (0, 0)
    run = here.json("stats", bundle)["manifest"]["run"]
    assert (run["count"], run["shards"]) == (1, [0])
    shutil.copy(bundle, local)
    workload.write_text(MANY.read_text() + EDITED)
    edited = here(*args, "-b", bundle)
    assert edited.returncode == 0, edited.stderr
    doc = json.loads(edited.stdout)
    assert compiled(doc) == (1, 0) and doc["stored"] == {"kernels": 1, "tunes": 0}
    assert all(s["seed_bytes"] > 0 for s in doc["shards"]) and doc["seed_notes"] == []
    locally = here("run", workload, "-b", local, "--json")
    assert compiled(json.loads(locally.stdout)) == (1, 0)
    assert contents(here, bundle) == contents(here, local)


def test_dask_env_gives_the_shards_the_callers_value(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """`WARM_EXAMPLE_KERNELS=30 warm run ... --dask` built the workers' 20: the workload's
    variables came from each worker's environment. `--dask-env NAME` gives the shards this
    side's value; without it, the README says the workers' is used."""
    bundle = tmp_path / "b.warm"
    here = warm.with_env(WARM_EXAMPLE_KERNELS="30")
    args = ("run", MANY, "-b", bundle, "--dask", scheduler, "-q")
    passed = here(*args, "--dask-env", "WARM_EXAMPLE_KERNELS")
    assert passed.returncode == 0, passed.stderr
    assert "stored 30 new kernel(s) and 6 new tune(s)" in passed.stdout
    lone = here("run", MANY, "-b", bundle, "--dask-env", "WARM_EXAMPLE_KERNELS")
    assert lone.returncode == 2 and lone.stderr.count("\n") == 1
    assert "--dask-env names variables for --dask's shards" in lone.stderr
    bad = here(*args, "--dask-env", "A=1")
    assert bad.returncode == 2 and "--dask-env takes a variable's name" in bad.stderr


SLOW_SHARD = """
import os, sys, time
sys.path.insert(0, {examples!r})
import matmul_host

DEVICE = "host"


def workload(rt):
    matmul_host.workload(rt)
    if rt.shard is not None and rt.shard.index == 1:  # one shard runs until the test is done
        waited = time.monotonic() + 60
        while not os.path.exists({done!r}) and time.monotonic() < waited:
            time.sleep(0.01)
"""


def test_ctrl_c_while_shards_run_says_what_this_run_added(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """Ctrl-C while a shard still ran, into a bundle that already held entries, said the
    bundle's total (`kept.kernels`) as stored by this run; now what this run added."""
    workload, bundle = tmp_path / "slow.py", tmp_path / "b.warm"
    # the bundle holds 10 kernels already (more than matmul_host's 6: what was held, said
    # as what this run added, fails the count below)
    held = warm.with_env(WARM_EXAMPLE_KERNELS="10")("run", MANY, "-b", bundle, "-q")
    assert held.returncode == 0, held.stderr
    done = tmp_path / "done"  # (the slow shard ends once it exists: its worker free again)
    workload.write_text(SLOW_SHARD.format(examples=str(EXAMPLES), done=str(done)))
    proc = warm.popen("run", workload, "-b", bundle, "--dask", scheduler)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # one shard finished, the other still runs
            if line.startswith("shard "):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        done.touch()
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("warm: interrupted: "), err
    kernels = int(last.split()[2])
    assert 0 < kernels < 6, err  # matmul_host's: some of its 6, never what was held


def test_a_part_over_the_limit_is_not_sent(warm: Warm, tmp_path: Path) -> None:
    """A shard's part of the bundle above the limit is not sent (that shard builds it
    again), and the note says so; what is sent holds only that shard's part."""
    bundle = tmp_path / "b.warm"  # (20 kernels, 4 tunes: the example's 200 split alike)
    assert warm.with_env(WARM_EXAMPLE_KERNELS="20")("run", MANY, "-b", bundle, "-q").returncode == 0
    whole = shard_seeds(bundle, 2, tmp_path)
    assert whole.notes == [] and all(whole.paths)
    held = [warm.json("stats", p) for p in whole.paths if p is not None]
    assert sum(len(d["tunes"]) for d in held) == 4  # each tune in one part
    assert all(len(d["kernels"]) < 20 for d in held)
    (tmp_path / "capped").mkdir()
    capped = shard_seeds(bundle, 2, tmp_path / "capped", limit=1000)
    assert capped.paths == [None, None] and len(capped.notes) == 2
    assert "over the 1000 sent: it builds that part again" in capped.notes[0]
    (tmp_path / "in_all").mkdir()  # every part sent is held in memory at once: capped in all
    first = whole.paths[0].stat().st_size  # type: ignore[union-attr]
    in_all = shard_seeds(bundle, 2, tmp_path / "in_all", total=first)
    assert in_all.paths[0] is not None and in_all.paths[1] is None
    assert in_all.notes and f"past the {first} sent in all" in in_all.notes[0]


def test_a_seed_that_is_no_bundle_fails_its_shard_in_one_line(tmp_path: Path) -> None:
    """What a worker is sent is untrusted input to the shard's `warm run`, as any bundle."""
    code, _, _, error = run_shard([str(MANY)], "0/2", str(tmp_path), b"not a bundle" * 100)
    assert code == 2 and error.startswith("warm: error: "), error
