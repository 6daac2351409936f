"""A merge of shards that do not make one whole run says so, through the real CLI.

Each `warm run --shard I/N` records in its bundle's manifest which shard of which run
(the workload's content, entry and devices) it holds; `warm merge` joins the records:
a shard missing, or shards of one run counted differently, is one line on stderr and
exit 1 (the merged bundle is written all the same, as `warm run`'s verify pass keeps what
it stored), and `--json` carries it. Whole runs, re-run shards and older bundles without
the record keep merging as before. Real parts only: the CLI in subprocesses, the
system cc, SQLite files.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import ForkedWarm

WORKLOAD = EXAMPLES / "matmul_host.py"


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> tuple[Any, Path]:
    """Shard bundles of the host example, made once: `I_N.warm`, and `whole.warm`; with the
    `warm` that made them, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    folder = tmp_path_factory.mktemp("shards")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200"))
    warm = ForkedWarm(warm, forking_servers)
    for shard in ("0/2", "1/2", "1/3", "2/3", "0/4", "1/4", "3/4"):
        name = shard.replace("/", "_")
        proc = warm("run", WORKLOAD, "--shard", shard, "-b", folder / f"{name}.warm", "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = warm("run", WORKLOAD, "-b", folder / "whole.warm", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return warm, folder


def merged(
    shards: tuple[Warm, Path], tmp_path: Path, *names: str, json_out: bool = False
) -> tuple[int, str, str, Path]:
    warm, folder = shards
    out = tmp_path / "fleet.warm"
    inputs = [folder / f"{n}.warm" if "/" not in n else Path(n) for n in names]
    proc = warm("merge", *inputs, "-o", out, "--force", *(["--json"] if json_out else []))
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr, out


def test_shards_of_different_counts_are_said_and_exit_1(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    code, stdout, stderr, out = merged(shards, tmp_path, "0_2", "1_3", "2_3")
    assert code == 1, stdout + stderr
    assert stderr.count("\n") == 1, stderr
    assert "not one whole run" in stderr and "matmul_host.py" in stderr
    assert "0/2" in stderr and "1/3" in stderr and "2/3" in stderr, stderr
    assert out.exists()  # written all the same: nothing is lost


def test_a_missing_shard_is_named_and_exit_1(shards: tuple[Warm, Path], tmp_path: Path) -> None:
    code, stdout, stderr, out = merged(shards, tmp_path, "0_4", "1_4", "3_4")
    assert code == 1, stdout + stderr
    assert stderr.count("\n") == 1 and "shard 2/4" in stderr and "missing" in stderr, stderr
    assert out.exists()


def test_json_carries_the_shards(shards: tuple[Warm, Path], tmp_path: Path) -> None:
    code, stdout, stderr, _ = merged(shards, tmp_path, "0_4", "1_4", "3_4", json_out=True)
    assert code == 1, stdout + stderr
    doc = json.loads(stdout)
    assert doc["shards"]["whole"] is False and doc["shards"]["missing"] == ["2/4"]
    assert "not one whole run" in doc["shards"]["problem"]
    code, stdout, stderr, _ = merged(shards, tmp_path, "0_2", "1_2", json_out=True)
    assert code == 0, stdout + stderr
    assert json.loads(stdout)["shards"] == {"whole": True, "problem": "", "missing": []}


def test_every_shard_merges_silently_and_the_output_is_whole(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    code, stdout, stderr, out = merged(shards, tmp_path, "0_2", "1_2")
    assert code == 0 and stderr == "", stdout + stderr
    warm, _ = shards
    proc = warm("verify", out, "--workload", WORKLOAD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = warm("stats", out)
    assert stats.returncode == 0 and "shard " not in stats.stdout, stats.stdout


def test_a_partial_merge_merged_with_the_rest_is_whole(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    code, _, _, first = merged(shards, tmp_path, "0_4", "1_4")
    assert code == 1
    part = tmp_path / "part.warm"
    first.rename(part)
    code, stdout, stderr, _ = merged(shards, tmp_path, str(part), "3_4")
    assert code == 1 and "shard 2/4" in stderr, stdout + stderr
    # the rest: 2/4 made now, merged with what was merged so far
    warm, _ = shards
    two = tmp_path / "2_4.warm"
    assert warm("run", WORKLOAD, "--shard", "2/4", "-b", two, "-q").returncode == 0
    code, stdout, stderr, _ = merged(shards, tmp_path, str(part), "3_4", str(two))
    assert code == 0 and stderr == "", stdout + stderr


def test_a_whole_run_merged_with_some_shards_is_whole(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    code, stdout, stderr, _ = merged(shards, tmp_path, "whole", "0_4", "1_3")
    assert code == 0 and stderr == "", stdout + stderr


def test_a_shard_run_again_into_its_bundle_is_still_that_shard(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, folder = shards
    again = tmp_path / "again.warm"
    shutil.copy(folder / "0_2.warm", again)
    proc = warm("run", WORKLOAD, "--shard", "0/2", "-b", again, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    code, stdout, stderr, _ = merged(shards, tmp_path, str(again), "0_2", "1_2")
    assert code == 0 and stderr == "", stdout + stderr
    code, stdout, stderr, _ = merged(shards, tmp_path, str(again), "0_2")
    assert code == 1 and "shard 1/2" in stderr, stdout + stderr
    # the other shard run into the same bundle: it holds the whole run
    proc = warm("run", WORKLOAD, "--shard", "1/2", "-b", again, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shard " not in warm("stats", again).stdout
    code, stdout, stderr, _ = merged(shards, tmp_path, str(again))
    assert code == 0 and stderr == "", stdout + stderr


def test_an_older_bundle_without_the_record_merges_as_before(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    _, folder = shards
    old = []
    for name in ("0_2", "1_2"):
        copy = tmp_path / f"old{name}.warm"
        shutil.copy(folder / f"{name}.warm", copy)
        with sqlite3.connect(copy) as conn:
            conn.execute("DELETE FROM manifest WHERE key = 'run'")
        conn.close()
        old.append(str(copy))
    code, stdout, stderr, _ = merged(shards, tmp_path, *old)
    assert code == 0 and stderr == "", stdout + stderr
    code, stdout, stderr, _ = merged(shards, tmp_path, old[0], "1_2")
    assert code == 0 and stderr == "", stdout + stderr  # it may hold any run: nothing told


def test_stats_shows_a_shard_bundles_shard(shards: tuple[Warm, Path], tmp_path: Path) -> None:
    warm, folder = shards
    proc = warm("stats", folder / "1_3.warm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1/3 of matmul_host.py" in proc.stdout, proc.stdout
    doc = json.loads(warm("stats", folder / "1_3.warm", "--json").stdout)
    assert doc["manifest"]["run"]["shards"] == [1] and doc["manifest"]["run"]["count"] == 3


def test_a_hostile_record_is_no_shard_and_shown_inert(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, folder = shards
    bad = tmp_path / "bad.warm"
    shutil.copy(folder / "0_2.warm", bad)
    record = {"run": "0" * 16, "workload": "x\x1b[31m.py", "count": 2, "shards": [0]}
    with sqlite3.connect(bad) as conn:
        conn.execute("UPDATE manifest SET value = ? WHERE key = 'run'", (json.dumps(record),))
    conn.close()
    code, stdout, stderr, _ = merged(shards, tmp_path, str(bad))
    assert code == 1 and "\x1b" not in stderr and "\\x1b" in stderr, stderr
    with sqlite3.connect(bad) as conn:
        conn.execute("UPDATE manifest SET value = '{\"count\": 1e999}' WHERE key = 'run'")
    conn.close()
    code, stdout, stderr, _ = merged(shards, tmp_path, str(bad), "0_4")
    assert code == 0 and stderr == "", stdout + stderr  # a record warm never writes: none
    assert warm("stats", bad).returncode == 0


def test_a_run_storing_nothing_leaves_a_signed_older_bundle_wholly_signed(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, folder = shards
    signed = tmp_path / "signed.warm"
    shutil.copy(folder / "whole.warm", signed)
    with sqlite3.connect(signed) as conn:  # as an older warm wrote it: no record
        conn.execute("DELETE FROM manifest WHERE key = 'run'")
    conn.close()
    assert warm("keygen", tmp_path / "k").returncode == 0
    assert warm("sign", signed, "--key", tmp_path / "k").returncode == 0
    proc = warm("run", WORKLOAD, "-b", signed, "-q")  # no key: it stores nothing new
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warm.env["WARM_TRUSTED_KEYS"] = str(tmp_path / "k.pub")
    try:
        proc = warm("verify", signed)
    finally:
        del warm.env["WARM_TRUSTED_KEYS"]
    assert proc.returncode == 0 and "not signed" not in proc.stdout, proc.stdout


def test_a_huge_count_in_a_record_sets_no_list_size(
    shards: tuple[Warm, Path], tmp_path: Path
) -> None:
    _, folder = shards
    bad = tmp_path / "huge.warm"
    shutil.copy(folder / "0_2.warm", bad)
    record = {"run": "0" * 16, "workload": "w.py", "count": 1 << 20, "shards": [0]}
    with sqlite3.connect(bad) as conn:
        conn.execute("UPDATE manifest SET value = ? WHERE key = 'run'", (json.dumps(record),))
    conn.close()
    code, stdout, stderr, _ = merged(shards, tmp_path, str(bad), json_out=True)
    assert code == 1 and stderr.count("\n") == 1 and "1048567 more" in stderr, stderr
    assert len(json.loads(stdout)["shards"]["missing"]) == 1000
