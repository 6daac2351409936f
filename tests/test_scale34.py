"""Scale: what a fleet's large bundles cost the commands that maintain them.

Each test keeps the shape of a problem met on bundles of tens of thousands of kernels,
scaled down and counted (commits, not seconds), so it holds on a loaded machine.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import big_bundle
import pytest
from big_bundle import build_big
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

KERNELS = 300  # each with a binary of its own, as real kernels have


def _commits(path: Path) -> int:
    """SQLite's file change counter (header bytes 24-27): one per committed write."""
    with path.open("rb") as f:
        return int(struct.unpack(">I", f.read(100)[24:28])[0])


def test_merge_commits_once_not_once_per_binary(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a merge wrote each binary (with its kernels) in a transaction of its own,
    # a commit and a file sync per kernel: 8 shards of 2,000 kernels took 16,000 commits,
    # most of the merge's time, minutes on a fleet's 100,000 kernels.
    monkeypatch.setattr(big_bundle, "BLOBS", KERNELS)
    a = build_big(tmp_path / "a.warm", KERNELS, 20)
    out = tmp_path / "out.warm"
    done = warm("merge", "-o", out, a)
    assert done.returncode == 0, done.stderr
    assert f"{KERNELS} kernel(s)" in done.stdout
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == KERNELS
    assert _commits(out) < 20


def test_production_report_lists_the_first_thousand_misses_and_counts_the_rest() -> None:
    # Before: WARM_REPORT=1 printed one line per miss at exit: a process serving 3,000
    # kernels over a bundle of 1,500 wrote 1,800 lines to stderr, no summary at their end.
    # Pure logic (the text of the report): 1,000 misses take a production process minutes.
    from warmcli.production_report import LISTED, Miss, ProductionReport

    misses = [
        Miss(kind="kernel", device="host", name=f"k{i}", key=f"{i:064x}") for i in range(3000)
    ]
    misses += [Miss(kind="tune", device="host", name=f"op{i}", key=f"{i:064x}") for i in range(600)]
    text = str(ProductionReport(bundle="b.warm", write=False, misses=misses))
    lines = text.splitlines()
    assert lines[0].startswith("warm: bundle b.warm lacked 3000 kernel(s) and 600 tune(s)")
    assert len(lines) == 1 + LISTED + 1
    assert lines[-1] == "  and 2,600 more not listed (warmcli.report() names every one)"
    assert lines[1] == "  kernel k0 on host (key 0000000000000000)"


def test_merge_lists_the_first_thousand_tunes_it_chose_between(warm: Warm, tmp_path: Path) -> None:
    # Before: one line per tune measured in two inputs, however many: merging a shard
    # with its re-tuned self (20,000 tunes) printed 20,003 lines, with no count at the end.
    import shutil

    from warmcli.ops.merge import LISTED

    tunes = LISTED + 200
    old = build_big(tmp_path / "old.warm", 10, tunes)
    new = tmp_path / "new.warm"
    shutil.copyfile(old, new)
    with sqlite3.connect(new) as conn:
        conn.execute("UPDATE tunes SET measured_at = measured_at + 5")
    warm.env["COLUMNS"] = "100000"  # one line a tune, however long its paths (xdist's)
    done = warm("merge", "-o", tmp_path / "out.warm", old, new)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(" (newer); dropped " in s for s in lines) == LISTED
    assert lines[-1] == "  and 200 more tune(s) measured in several inputs: the newer kept"
    doc = warm.json("merge", "--force", "-o", tmp_path / "out.warm", old, new)
    assert (len(doc["choices"]), doc["unlisted_choices"]) == (LISTED, 200)


def test_clean_max_size_counts_as_kept_only_what_it_kept(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: on a CUDA bundle cleaned without a GPU, `--max-size` evicted 38,720 of 40,000
    # kernels (and every tune, their picks' kernels evicted) and then said "kept 40000
    # cuda kernels (no cuda device visible here): cannot judge", "kept 10000 tunes ...".
    monkeypatch.setattr(big_bundle, "BLOBS", 40)
    path = build_big(tmp_path / "b.warm", 40, 8)  # 40 binaries of 4,096 bytes
    doc = warm.json("clean", path, "--max-size", str(10 * 4096))
    assert doc["removed_by_reason"] == {
        "least recently used (over 40,960 bytes)": 30,
        "its pick's kernel evicted": 8,
    }, doc["removed_by_reason"]
    assert doc["kept_unjudged"] == [
        "kept 10 cuda kernels (no cuda device visible here): cannot judge"
    ], doc["kept_unjudged"]


def test_merge_memory_is_flat_whatever_the_inputs_hold(warm: Warm, tmp_path: Path) -> None:
    # Before: a merge read every input's kernels and tunes into memory before writing:
    # 8 shards of 6,000 kernels and 2,500 tunes peaked at 214 MiB, of 12,000 and 5,000 at
    # 371 MiB (now about 60 MiB both). Two inputs of the same keys: the first's are kept.
    # 10,000 kernels and 4,000 tunes an input: each input's rows read whole peak 67 MiB over
    # ten rows' merge, streamed 7.5 (speed45c; 20,000 and 8,000 told the same, 128 MiB).
    import sys

    from big_bundle import peak_rss

    small = [build_big(tmp_path / f"s{i}.warm", 10, 10, seed=i) for i in range(2)]
    big = [build_big(tmp_path / f"b{i}.warm", 10_000, 4_000, seed=i) for i in range(2)]
    args = [sys.executable, "-m", "warmcli", "merge", "-o"]
    done, small_peak = peak_rss([*args, str(tmp_path / "s.warm"), *map(str, small)], warm.env)
    assert done.returncode == 0, done.stderr
    done, peak = peak_rss([*args, str(tmp_path / "b.warm"), *map(str, big)], warm.env)
    assert done.returncode == 0, done.stderr
    assert "10000 kernel(s), 4000 tune(s)" in done.stdout
    assert peak - small_peak < 32, f"{peak:.0f} MiB, on ten rows {small_peak:.0f}"


def test_diff_headers_say_how_many_of_how_many_are_listed(warm: Warm, tmp_path: Path) -> None:
    # Before: "Kernels only in A (1000)" over a listing of the first 1,000 of 2,000, and
    # "Tunes only in A (1000)" likewise: the header said a count that was not the count.
    from warmcli.ops.diff import LISTED

    a = build_big(tmp_path / "a.warm", LISTED + 300, LISTED + 100)
    b = build_big(tmp_path / "b.warm", 10, 10)
    done = warm("diff", a, b)
    assert done.returncode == 0, done.stderr
    lines = [s.strip() for s in done.stdout.splitlines()]
    heads = [s for s in lines if s.startswith(("Kernels only", "Tunes only"))]
    assert [h.split(", built by")[0] for h in heads] == [
        f"Kernels only in A (the first {LISTED:,} of {LISTED + 290:,})",
        f"Tunes only in A (the first {LISTED:,} of {LISTED + 90:,})",
    ], heads
