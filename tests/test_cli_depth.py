"""The deeper commands through the real CLI on real bundles made by `warm run`.

merge, diff, clean, verify's integrity check, stats' summary, progress and
--verbose. A foreign toolchain is made for real: a `WARM_CC` wrapper around the
system cc whose `--version` prints another version line.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm, this_warms
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from rich.console import Console

from warmcli.backends.serving import Target, choose
from warmcli.cli.progress import RunProgress, bar_counts
from warmcli.config import parse_size
from warmcli.execution.statistics import StatisticsCollector
from warmcli.ops.clean import Machine, plan_clean
from warmcli.records import KernelRecord, TuneRecord


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


MATMUL = EXAMPLES / "matmul_host.py"
MATMUL_CUDA = EXAMPLES / "matmul_cuda.py"

# Two candidates of one tunable; SLOW names the one made slow for this run (a real
# C busy loop), so two runs of the same workload measure the same key, different picks.
PICKY = r'''
import os
from warmcli import Kernel, Tunable

DEVICE = "host"
SPIN = r"""
void spin(float *x, int n) {
    volatile float acc = 0;
    for (int i = 0; i < n; i++) acc += (float)i * 0.5f;
    x[0] = acc + ID;
}"""

def launch(rt, kernel, x, *, stream=None):
    slow = os.environ.get("SLOW") == kernel.define("NAME")
    rt.launch(kernel, x, 3_000_000 if slow else 10, stream=stream)

PICK = Tunable("pick", {n: Kernel(SPIN, "spin", "Pi", defines={"ID": i, "NAME": n})
                        for i, n in enumerate(("one", "two"))}, launch, repeats=3)

def workload(rt):
    rt.tune(PICK, rt.buffer(4))
'''


@pytest.fixture
def foreign_cc(tmp_path: Path) -> Path:
    cc = shutil.which("cc")
    assert cc, "the host backend needs cc"
    wrapper = tmp_path / "othercc"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "othercc 99.1"; exit 0; fi\n'
        f'exec {cc} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def run_picky(warm: Warm, workload: Path, bundle: Path, slow: str) -> None:
    """`warm run` of PICKY with SLOW=`slow`: set by a copy of the workload (its name kept,
    in a folder of its own) as its first line, not in warm's environment, where a variable
    of its own would start a forking server of its own (`tests/forked_cli.py`)."""
    folder = workload.parent / f"slow-{slow}"
    folder.mkdir()
    slowed = folder / workload.name
    slowed.write_text(f"import os; os.environ['SLOW'] = {slow!r}\n" + workload.read_text())
    warm.json("run", slowed, "--bundle", bundle)


def test_diff_reports_a_changed_pick_and_merge_keeps_the_newer(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    picky = workload_file(PICKY, "picky.py")
    a, b = tmp_path / "a.warm", tmp_path / "b.warm"
    run_picky(warm, picky, a, slow="one")
    run_picky(warm, picky, b, slow="two")
    assert warm.json("stats", a)["tunes"][0]["pick"] == "two"
    assert warm.json("stats", b)["tunes"][0]["pick"] == "one"

    doc = warm.json("diff", a, b)
    assert doc["kernels"]["shared"] == 2 and doc["tunes"]["shared"] == 1
    (change,) = doc["tunes"]["picks_changed"]
    assert (change["a_pick"], change["b_pick"]) == ("two", "one")
    assert change["a_seconds"] > 0 and change["b_seconds"] > 0
    shown = warm("diff", a, b)
    assert shown.returncode == 0 and "Picks that differ (1)" in shown.stdout

    merged = tmp_path / "m.warm"
    report = warm.json("merge", a, b, "-o", merged)
    (choice,) = report["choices"]
    assert choice["kept"] == str(b) and choice["kept_pick"] == "one"
    assert choice["dropped"] == str(a) and choice["dropped_pick"] == "two"
    assert warm.json("stats", merged)["tunes"][0]["pick"] == "one"
    assert "(newer)" in warm("merge", a, b, "-o", merged, "--force").stdout

    exists = warm("merge", a, b, "-o", merged)
    assert exists.returncode == 2 and "exists" in exists.stderr
    conn = sqlite3.connect(b)
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    mixed = warm("merge", a, b, "-o", tmp_path / "x.warm")
    assert mixed.returncode == 2 and "format version this warm does not read" in mixed.stderr
    assert "format 4" in mixed.stderr
    assert "Traceback" not in mixed.stderr and not (tmp_path / "x.warm").exists()


def test_merge_holds_both_and_clean_removes_the_foreign_toolchain(
    warm: Warm, tmp_path: Path, foreign_cc: Path, host_bundle: Callable[[Path], Path]
) -> None:
    here, there, merged = tmp_path / "here.warm", tmp_path / "there.warm", tmp_path / "m.warm"
    host_bundle(here)  # as `warm run MATMUL --bundle here` makes it
    warm.with_env(WARM_CC=str(foreign_cc)).json("run", MATMUL, "--bundle", there)
    warm.json("merge", here, there, "-o", merged)
    kernels = warm.json("stats", merged)["kernels"]
    assert len(kernels) == 12
    lines = {k["toolchain"].split(":", 1)[1].partition(" (wrapper script")[0] for k in kernels}
    assert lines >= {"othercc 99.1"}

    kept = warm.json("clean", merged, "--keep-foreign")
    assert kept["removed"] == [] and len(warm.json("stats", merged)["kernels"]) == 12
    doc = warm.json("clean", merged)
    assert len(doc["removed"]) == 6
    assert all("othercc 99.1" in r["reason"] for r in doc["removed"])
    assert doc["file_bytes"]["after"] < doc["file_bytes"]["before"]
    stats = warm.json("stats", merged)
    left = stats["kernels"]
    assert len(left) == 6 and not any("othercc" in k["toolchain"] for k in left)
    toolchains = [f for f in stats["fingerprints"] if f["kind"] == "toolchain"]
    assert toolchains and not any("othercc" in str(f) for f in toolchains)  # none left behind
    assert any(f["kind"] == "device" for f in stats["fingerprints"])  # this machine's stays
    # The tunes kept from `there` were measured on othercc's builds, gone now: production
    # measures them again, as a re-warm does (verify38), and `warm check` says `absent`.
    assert warm("verify", merged, "--workload", MATMUL).returncode == 1
    assert warm("check", merged).returncode == 1
    assert warm("run", MATMUL, "--bundle", merged).returncode == 0
    assert warm("check", merged).returncode == 0
    assert warm("verify", merged, "--workload", MATMUL).returncode == 0
    again = warm("clean", merged)
    assert again.returncode == 0 and "removed 0 kernel(s) and 0 tune(s)" in again.stdout


def test_clean_max_size_evicts_least_recently_used_and_warm_run_touches(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    bundle = tmp_path / "lru.warm"
    picky = workload_file(PICKY, "picky.py")
    warm.json("run", picky, "--bundle", bundle)  # the spin kernels
    warm.json("run", MATMUL, "--bundle", bundle)  # newer: the matmul kernels
    warm.json("run", picky, "--bundle", bundle)  # loads the picked spin kernel: it moves up
    kernels = warm.json("stats", bundle)["kernels"]
    used = max((k for k in kernels if k["entry"] == "spin"), key=lambda k: k["last_used"])
    others = [k for k in kernels if k["entry"] != "spin"]
    assert used["last_used"] > max(k["last_used"] for k in others)
    doc = warm.json("clean", bundle, "--max-size", str(used["bytes"]))
    removed = {r["label"].split("[")[0] for r in doc["removed"]}
    assert removed >= {"matmul", "bias_relu", "row_sum"}
    for r in doc["removed"]:  # a tune whose pick went goes with it
        want = "least recently used" if r["kind"] == "kernel" else "its pick's kernel evicted"
        assert want in r["reason"], r
    assert doc["binary_bytes"]["after"] <= used["bytes"]
    assert [k["key"] for k in warm.json("stats", bundle)["kernels"]] == [used["key"]]
    bad = warm("clean", bundle, "--max-size", "lots")
    assert bad.returncode == 2 and "--max-size" in bad.stderr


@pytest.mark.skipif(not MATMUL_CUDA.exists(), reason="the CUDA example is not there yet")
@pytest.mark.nvcc
def test_merge_of_two_single_arch_bundles_holds_both(warm: Warm, tmp_path: Path) -> None:
    a, b, merged = tmp_path / "sm80.warm", tmp_path / "sm90.warm", tmp_path / "both.warm"
    for arch, path in (("sm_80", a), ("sm_90", b)):
        proc = warm("run", MATMUL_CUDA, "--arch", arch, "--bundle", path, "--json", "--no-ptx")
        if proc.returncode == 2 and "nvcc" in proc.stderr:
            pytest.skip(proc.stderr.strip())
        assert proc.returncode == 0, proc.stderr
    warm.json("merge", a, b, "-o", merged)
    stats = warm.json("stats", merged)
    count = {
        arch: sum(1 for k in stats["kernels"] if k["arch"] == arch) for arch in ("sm_80", "sm_90")
    }
    assert count["sm_80"] == len(warm.json("stats", a)["kernels"]) > 0
    assert count["sm_90"] == len(warm.json("stats", b)["kernels"]) > 0
    replay = warm("verify", merged, "-w", MATMUL_CUDA, "--arch", "sm_80", "--arch", "sm_90")
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_verify_checks_integrity_without_a_workload(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    host_bundle(bundle_path)  # as `warm run MATMUL --bundle bundle_path` makes it
    doc = warm.json("verify", bundle_path)
    assert doc["verified"] is True and doc["integrity"]["blobs"] >= 1
    conn = sqlite3.connect(bundle_path)
    sha = conn.execute("SELECT sha256 FROM blobs LIMIT 1").fetchone()[0]
    conn.execute("UPDATE blobs SET data = CAST('tampered' AS BLOB) WHERE sha256 = ?", (sha,))
    conn.execute("UPDATE tunes SET candidates = 'not json' WHERE rowid = 1")
    conn.commit()
    conn.close()
    proc = warm("verify", bundle_path)
    assert proc.returncode == 1
    assert f"blob {sha[:16]} does not match its sha256" in proc.stdout
    assert "corrupt tune entry" in proc.stdout
    missing = warm("verify", bundle_path.parent / "none.warm")
    assert missing.returncode == 2 and "no such bundle" in missing.stderr


def test_stats_summary_devices_help_and_verbose(warm: Warm, bundle_path: Path) -> None:
    proc = warm("run", MATMUL, "--bundle", bundle_path, "--verbose")
    assert proc.returncode == 0 and "-fPIC -shared" in proc.stdout
    quiet = warm("run", MATMUL, "--bundle", bundle_path, "--quiet")
    assert "Compilation" not in quiet.stdout and "bundle" in quiet.stdout
    commands = warm.json("run", MATMUL, "--bundle", bundle_path)["passes"]
    assert all(not p["commands"] for p in commands), "everything is in the bundle now"
    table = warm("stats", bundle_path).stdout
    assert "Contents" in table and "last used" in table and "toolchain" in table
    kernels = warm.json("stats", bundle_path)["kernels"]
    assert all(k["last_used"] >= k["created"] > 0 for k in kernels)
    devices = warm.json("devices")
    assert devices["devices"][0]["id"] == "host"
    assert [c["device"] for c in devices["compilers"]] == ["host", "cuda"]
    helptext = warm("--help").stdout
    for name in ("WARM_BUNDLE", "WARM_HOME", "WARM_NVCC", "WARM_CC", "WARM_REPORT"):
        assert name in helptext


def test_progress_bars_follow_the_passes_on_a_terminal() -> None:
    """In-process: a forced-terminal console, a real collector counted into by hand."""
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    first, second = StatisticsCollector(), StatisticsCollector()
    for _ in range(6):
        first.count("host", "compilation", "queued")
    first.count("host", "autotune", "candidates_registered", 4)
    with RunProgress(console, interval=0.01) as progress:
        progress("CompileOnly", first.reader())
        progress("CompileAndAutotune", second.reader())
        second.count("host", "compilation", "compiled", 6)
        second.count("host", "autotune", "candidates_measured", 4)
        progress.refresh()
        tasks = {t.description: (t.completed, t.total) for t in progress._progress.tasks}
        shown = [t.visible for t in progress._progress.tasks]
    assert tasks["CompileAndAutotune: kernels compiled"] == (6, 6)
    assert tasks["CompileAndAutotune: candidates measured"] == (4, 4)
    assert shown == [True, True]
    assert "kernels compiled" in console.file.getvalue()


def test_bar_counts_and_parse_size() -> None:
    first = StatisticsCollector()
    first.count("host", "compilation", "queued", 3)
    now = StatisticsCollector()
    now.count("host", "compilation", "compiled", 1)
    assert bar_counts(first.reader().total(), now.reader().total()) == (1, 3, 0, 0)
    assert parse_size("10M") == 10 * 2**20 and parse_size("1.5K") == 1536
    assert parse_size("2048") == 2048 and parse_size("1GiB") == 2**30
    with pytest.raises(ValueError):
        parse_size("ten")


def _kernel(key: str, toolchain: str, sha: str, size: int = 100) -> KernelRecord:
    return KernelRecord(key, "host", "host", "x86_64", "k", key, "s", sha, toolchain, size=size)


def _tune(key: str, device: str) -> TuneRecord:
    return TuneRecord(key, "op", "f32[4]", device, "c", "measured", "a", ())


def test_plan_clean_judges_only_what_it_can() -> None:
    """Pure logic on hand-made records and a named machine (no bundle, no compiler)."""
    machine = Machine(
        {"cc": this_warms("cc:gcc 12")},
        "x86_64",
        frozenset({"host|cpu|x86_64|linux"}),
        frozenset({"host"}),
    )
    kernels = [
        _kernel("mine-old", this_warms("cc:gcc 12"), "s1"),
        _kernel("mine-new", this_warms("cc:gcc 12"), "s2"),
        _kernel(
            "foreign", this_warms("cc:gcc 13"), "s3"
        ),  # runs on this CPU, no build of ours: kept
        dataclasses.replace(
            _kernel("cubin", this_warms("nvcc:release 13.0"), "s4"), backend="cuda", arch="sm_90"
        ),
        dataclasses.replace(_kernel("old-cc", this_warms("cc:gcc 11"), "s5"), label="mine-new"),
    ]
    tunes = [
        _tune("t-here", "host|cpu|x86_64|linux"),
        _tune("t-there", "host|other cpu|x86_64|linux"),
        _tune("t-gpu", "cuda|H100|sm_90|580.1"),
        _tune("t-pending", "cuda|compile-only|sm_90|none"),
    ]
    used = {"mine-old": 1.0, "mine-new": 2.0}
    with_times = [(k, used.get(k.key, 0.0)) for k in kernels]
    plan = plan_clean(with_times, tunes, machine)
    assert {r.key for r in plan.removals} == {"old-cc", "t-there"}
    assert any("cuda kernels" in n for n in plan.kept_unjudged)
    assert any("pending tunes" in n for n in plan.kept_unjudged)
    corrupt = plan_clean(with_times, tunes, machine, corrupt={"s2": "bad"})
    assert [r.reason for r in corrupt.removals if r.key == "mine-new"] == ["corrupt: bad"]
    lru = plan_clean(with_times, tunes, machine, max_size=100)
    evicted = [r.key for r in lru.removals if "least recently" in r.reason]
    assert evicted == ["foreign", "cubin", "mine-old"]  # equally recent: by blob (s3, s4)
    assert lru.binary_bytes_after == 100
    kept = plan_clean(with_times, tunes, machine, keep_foreign=True)
    assert kept.removals == []


def test_one_serving_rule_takes_ptx_where_no_cubin_runs() -> None:
    """Pure logic on hand-made records: a GPU newer than every cubin is served the PTX
    (its own toolchain's first), a cubin of its arch is preferred, and clean keeps PTX a
    GPU here can JIT while it removes PTX for a newer SM."""
    nvcc, other = this_warms("nvcc:release 13.0"), this_warms("nvcc:release 12.8")

    def build(key: str, arch: str, toolchain: str = nvcc) -> KernelRecord:
        return dataclasses.replace(
            _kernel(key, toolchain, key), backend="cuda", arch=arch, device=arch
        )

    held = [build("sm80", "sm_80"), build("ptx80", "compute_80"), build("ptx75", "compute_75")]
    held.append(build("ptx80-other", "compute_80", other))
    assert choose(held, Target("cuda", "sm_80", "13.0", nvcc), lambda _: True).key == "sm80"
    assert choose(held, Target("cuda", "sm_90", "13.0", nvcc), lambda _: True).key == "ptx80"
    on_other = choose(held, Target("cuda", "sm_90", "13.0", other), lambda _: True)
    assert on_other.key == "ptx80-other"
    assert choose(held, Target("cuda", "sm_70", "13.0", nvcc), lambda _: True) is None
    machine = Machine(
        {"nvcc": nvcc}, "x86_64", frozenset({"cuda|H100|sm_90|13.0"}), frozenset({"host", "cuda"}),
        frozenset({("sm_90", "13.0")}),
    )  # fmt: skip
    kernels = [(build("ptx80", "compute_80"), 0.0), (build("ptx100", "compute_100"), 0.0)]
    plan = plan_clean(kernels, [], machine)
    assert [r.key for r in plan.removals] == ["ptx100"]


def test_clean_keeps_an_nvcc_build_of_another_nvcc_environment() -> None:
    """A build whose nvcc read `NVCC_APPEND_FLAGS` (its toolchain names them) and one whose
    did not are two configurations, each served only where nvcc reads the same: neither is
    superseded by the other, whichever this machine's environment has; an older nvcc's build
    of this machine's environment is."""
    plain = this_warms("nvcc:release 13.0")
    flags = this_warms("nvcc:release 13.0; NVCC_APPEND_FLAGS=-DSCALE=5.0f")

    def cubin(key: str, toolchain: str) -> KernelRecord:
        record = _kernel(key, toolchain, key)
        return dataclasses.replace(record, backend="cuda", device="cuda", arch="sm_90", label="k")

    kernels = [(cubin("plain", plain), 1.0), (cubin("flags", flags), 1.0)]
    kernels.append((cubin("older", this_warms("nvcc:release 12.8")), 1.0))
    for mine, superseded in ((plain, {"older"}), (flags, set())):
        machine = Machine(
            {"nvcc": mine},
            "x86_64",
            frozenset(),
            frozenset({"cuda"}),
            frozenset({("sm_90", "13.0")}),
        )
        removed = {r.key for r in plan_clean(kernels, [], machine).removals}
        assert removed == superseded, (mine, removed)
