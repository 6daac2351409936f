"""Rough edges of the CLI found by using it: errors, wording, grouping, 80-column tables.

Every test runs the real CLI, each command a process of its own (a fork of one that
imported the CLI once, `tests/forked_cli.py`), on real bundles (the host example's, built
once per module by `warm run`, and an `sm_80` pre-build made with nvcc).
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

from warmcli.bundle.file import FORMAT_VERSION

MATMUL = EXAMPLES / "matmul_host.py"
SAXPY = EXAMPLES / "saxpy_cuda.py"

# One cheap tunable over many shapes: more tunes than `warm stats` gives a table each.
MANY_TUNES = r"""
from warmcli import Kernel, Tunable

DEVICE = "host"
SCALE = "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= F; }"

def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)

OP = Tunable("scale", {f"f{f}": Kernel(SCALE, "scale", "Pi", defines={"F": f}) for f in (2, 3)},
             launch, repeats=1)

def workload(rt):
    for n in range(1, 13):
        rt.tune(OP, rt.buffer(n), n)
"""


def flat(text: str) -> str:
    """The text with line breaks (wrapping at 80 columns) and runs of spaces as one space."""
    return " ".join(text.split())


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return dict(env, WARM_HOME=str(home), COLUMNS="80")


@pytest.fixture(scope="module")
def host(
    env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, forking_servers: Any
) -> Path:
    path = tmp_path_factory.mktemp("host") / "host.warm"
    proc = ForkedWarm(Warm(env), forking_servers)("run", MATMUL, "--bundle", path, "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored 6 new kernel(s) and 3 new tune(s)" in flat(proc.stdout)
    return path


@pytest.fixture
def warm80(env: dict[str, str], forking_servers: Any) -> Any:
    """warm at 80 columns, each command forked (`ForkedWarm`)."""
    return ForkedWarm(Warm(env), forking_servers)


def test_a_bad_arch_is_one_line_and_exit_2(warm80: Warm, host: Path, tmp_path: Path) -> None:
    line = one_line_error(warm80("run", SAXPY, "--arch", "sm_bogus", "-b", tmp_path / "x.warm"))
    assert "'sm_bogus' is not a CUDA architecture" in line
    checked = one_line_error(warm80("check", host, "--arch", "90"))
    assert "'90' is not a CUDA architecture" in checked


def test_clean_of_a_missing_bundle_creates_none(warm80: Warm, tmp_path: Path) -> None:
    path = tmp_path / "missing.warm"
    assert "no such bundle" in one_line_error(warm80("clean", path))
    assert not path.exists()


def test_rewarm_says_new_and_verify_claims_no_store(warm80: Warm, host: Path) -> None:
    again = warm80("run", MATMUL, "--bundle", host, "--quiet")
    assert "stored 0 new kernel(s) and 0 new tune(s)" in flat(again.stdout)
    replay = warm80("verify", host, "--workload", MATMUL)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "stored" not in replay.stdout and "the bundle is complete" in replay.stdout


def test_merge_of_a_bundle_named_twice_counts_it_once(
    warm80: Warm, host: Path, tmp_path: Path
) -> None:
    out = tmp_path / "m.warm"
    doc = warm80.json("merge", host, host, "-o", out)
    assert doc["sources"] == [str(host)]
    assert doc["contributed"] == {str(host): {"kernels": 6, "tunes": 3}}


def test_help_shows_the_bundle_default_and_every_variable(warm80: Warm) -> None:
    assert "[default: WARM_BUNDLE, else in WARM_HOME]" in warm80("stats", "--help").stdout
    assert "Bundle path [default:" in warm80("run", "--help").stdout
    top = flat(warm80("--help").stdout)
    for name in ("WARM_BUNDLE_WRITE", "WARM_REPORT", "WARM_EXPLAIN", "WARM_STRICT"):
        assert name in top
    assert "check found entries this machine cannot serve" in top


def test_stats_at_80_columns_keeps_names_whole(warm80: Warm, host: Path) -> None:
    proc = warm80("stats", host)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    for label in ("matmul[TILE=16]", "matmul[TILE=64]", "bias_relu", "row_sum"):
        assert label in proc.stdout
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    doc = warm80.json("stats", host)
    assert doc["bundle"] == str(host)
    missing = one_line_error(warm80("stats", host, "--explain", "nope"))
    assert "no tunes for operation 'nope' (it holds: matmul)" in missing


def test_stats_lists_many_tunes_one_line_each(warm80: Warm, tmp_path: Path, workload_file) -> None:
    path = tmp_path / "many.warm"
    ran = warm80("run", workload_file(MANY_TUNES), "--bundle", path, "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = warm80("stats", path).stdout
    assert "Tunes (12)" in listed and "vs pick" not in listed
    assert "warm stats --explain OPERATION" in listed
    explained = warm80("stats", path, "--explain", "scale").stdout
    assert explained.count("vs pick") == 12


def test_check_groups_what_cannot_be_served(warm80: Warm, tmp_path: Path) -> None:
    path = tmp_path / "sm80.warm"
    built = warm80("run", SAXPY, "--arch", "sm_80", "--bundle", path, "--quiet", "--no-ptx")
    assert built.returncode == 0, built.stdout + built.stderr
    proc = warm80("check", path, "--arch", "sm_90")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "14 not servable here" in proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if ln.lstrip().startswith(("kernel", "tune"))]
    assert len(rows) == 2 and "8: block_sum, saxpy" in rows[0] and "6: block_sum, saxpy" in rows[1]
    assert "every entry: warm check --json" in proc.stdout
    doc = json.loads(warm80("check", path, "--arch", "sm_90", "--json").stdout)
    assert len(doc["unservable"]) == 14


def test_clean_and_diff_group_rows_and_name_kernels_as_stats(
    warm80: Warm, host: Path, tmp_path: Path
) -> None:
    kernels = {k["key"]: k for k in warm80.json("stats", host)["kernels"]}
    doc = warm80.json("clean", host, "--max-size", "0", "--dry-run")
    evicted = [r for r in doc["removed"] if r["kind"] == "kernel"]
    assert len(evicted) == 6
    for r in evicted:
        assert r["label"] == kernels[r["key"]]["label"]
    tunes = [r for r in doc["removed"] if r["kind"] == "tune"]  # every pick evicted: they go
    assert tunes and all(r["reason"] == "its pick's kernel evicted" for r in tunes)
    # a batch's binary is freed once, by its last kernel: the removals add up to the total
    freed = sum(r["bytes"] for r in evicted)
    assert freed == doc["binary_bytes"]["before"] == sum(k["bytes"] for k in kernels.values())
    text = warm80("clean", host, "--max-size", "0", "--dry-run").stdout
    assert flat(text).count("least recently used") == 1, text
    empty = tmp_path / "empty.warm"
    warm80.json("clean", warm80.json("merge", host, "-o", empty)["out"], "--max-size", "0")
    shown = flat(warm80("diff", empty, host).stdout)
    assert shown.count("built by cc:") == 1 and "Kernels only in B (6)" in shown


def test_diff_never_calls_a_bundle_with_a_corrupt_entry_the_same(
    warm80: Warm, host: Path, tmp_path: Path
) -> None:
    """Same keys and picks, but one tune's candidates unreadable in B: B cannot serve it, so
    the diff names it (as `warm verify` does) and does not say the bundles are the same."""
    broken = tmp_path / "broken.warm"
    shutil.copy(host, broken)
    with sqlite3.connect(broken) as conn:
        conn.execute("UPDATE tunes SET candidates = x'07' WHERE rowid = 1")
    conn.close()
    text = flat(warm80("diff", host, broken).stdout)
    assert "Corrupt in B (1; B cannot serve them)" in text and "corrupt tune entry" in text
    assert "the same kernels and tunes" not in text
    assert warm80("diff", host, broken).returncode == 1  # B cannot serve an entry
    proc = warm80("diff", host, broken, "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["same"] is False and doc["corrupt"]["b_count"] == 1 and doc["corrupt"]["a"] == []
    assert warm80.json("diff", host, host)["same"] is True


def test_stats_shows_the_files_format_and_a_manifest_that_claims_another(
    warm80: Warm, host: Path, tmp_path: Path
) -> None:
    claimed = tmp_path / "claimed.warm"
    shutil.copy(host, claimed)
    with sqlite3.connect(claimed) as conn:
        conn.execute("UPDATE manifest SET value = 'banana' WHERE key = 'format_version'")
    conn.close()
    head = flat(warm80("stats", claimed).stdout)
    assert f"format {FORMAT_VERSION} (warm " in head and "the manifest says 'banana'" in head
    assert warm80.json("stats", claimed)["format"] == FORMAT_VERSION
    assert "the manifest says" not in flat(warm80("stats", host).stdout)
