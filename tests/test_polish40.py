"""What `warm stats` and `warm check` count, read through the real CLI in a subprocess, over
bundles built for real here (NVRTC compiling for a named arch, no GPU; the host's cc).

- `warm stats`: a kernel's compile time is counted once (a CUDA kernel's cubin and PTX rows,
  made by one compile, carry half of it each), so the kernels' `seconds` add up to what the
  compilers took, and none of it is divided twice (a row keeps its share of its batch already).
- `warm check`: its summary counts kernels (each once, however many builds it has), names
  the builds stats lists beside them, and calls the builds only other architectures use
  builds; its `--json` entries carry their source's digest, and its table a `source` column
  where one label stands for several sources.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """saxpy_cuda.py warmed for sm_90 by NVRTC with one compiler process at a time (so the
    batch's seconds are its compilers' time), and `warm run --json`'s report of it."""
    nvrtc_release_or_skip()
    import os
    import subprocess
    import sys

    from conftest import ROOT

    folder = tmp_path_factory.mktemp("saxpy")
    path = folder / "m.warm"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(folder / "home")
    argv = [sys.executable, "-m", "warmcli", "run", str(EXAMPLES / "saxpy_cuda.py")]
    argv += ["--arch", "sm_90", "--compiler", "nvrtc", "--jobs", "1", "-b", str(path), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return path, json.loads(done.stdout)


def _compiled_seconds(report: dict[str, Any]) -> float:
    return sum(p["compilation"]["seconds"] for p in report["passes"])


def test_stats_counts_each_compile_once(warm: Warm, saxpy: tuple[Path, dict[str, Any]]) -> None:
    path, report = saxpy
    compiled = _compiled_seconds(report)
    kernels = warm.json("stats", path)["kernels"]
    assert len(kernels) == 16  # 8 kernels, each a cubin and a PTX row
    total = sum(k["seconds"] for k in kernels)
    # one compiler at a time: the batch's time is its compiles' and a little of warm's own
    # (divided again: a quarter of it at most; the batch's wall less what a loaded machine adds)
    assert compiled / 4 < total <= compiled, (total, compiled)
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for k in kernels:
        by_kernel.setdefault(k["label"], []).append(k)
    for label, rows in by_kernel.items():
        assert sorted(k["arch"] for k in rows) == ["compute_90", "sm_90"], label
        cubin, ptx = sorted(rows, key=lambda k: k["arch"] != "sm_90")
        assert cubin["seconds"] == ptx["seconds"] == cubin["compile_seconds"] / 2
        assert cubin["batch_seconds"] == pytest.approx(
            cubin["compile_seconds"] * cubin["shared_by"]
        )
    # the table's compile column is each row's part
    text = warm("stats", path).stdout
    shown = re.findall(r"^ sm_90 .* (\d+\.\d{3}) s +[0-9a-f]{8} ", text, re.M)  # (s: stop 60)
    assert len(shown) == 16 and all(float(s) > 0 for s in shown), text


HOST = """
from warmcli import Kernel

DEVICE = "host"
SRC = "void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += N; }"
KERNELS = [Kernel(SRC, "add", "Pi", defines={"N": n}) for n in range(4)]

def workload(rt):
    for k in KERNELS:
        rt.launch(k, rt.buffer(4), 4)
"""


def test_stats_of_a_host_batch_adds_up_to_its_compile(warm: Warm, tmp_path: Path) -> None:
    """A host batch's kernels share one binary; each row already keeps its share of the
    batch's time, which stats divided again by the kernels sharing the binary."""
    workload, path = tmp_path / "w.py", tmp_path / "h.warm"
    workload.write_text(HOST)
    done = warm("run", workload, "--jobs", "1", "-b", path, "--json", "--no-verify")
    assert done.returncode == 0, done.stdout + done.stderr
    compiled = _compiled_seconds(json.loads(done.stdout))
    kernels = warm.json("stats", path)["kernels"]
    assert len(kernels) == 4 and all(k["shared_by"] == 4 for k in kernels), kernels
    total = sum(k["seconds"] for k in kernels)
    # (divided again: a quarter of it at most; the batch's wall less what a loaded machine adds)
    assert compiled / 4 < total <= compiled, (total, compiled)
    assert all(k["seconds"] == k["compile_seconds"] for k in kernels)


def test_check_counts_kernels_and_names_builds(
    warm: Warm, saxpy: tuple[Path, dict[str, Any]]
) -> None:
    """An sm_90 bundle (a cubin and a PTX row of each of 8 kernels, as stats lists 16)
    checked for sm_100 said `8 kernel(s), 6 tune(s) (8 not for this machine)` right under a
    table saying those 8 kernels are served here by PTX JIT: the 8 were the sm_90 cubins,
    builds that only another architecture uses, and "8 kernel(s)" counted cubins too."""
    path, _ = saxpy
    done = warm("check", path, "--arch", "sm_100", "--compiler", "nvrtc")
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout
    assert "8 kernel(s) served by PTX JIT here" in said, said
    line = (
        f"bundle {path}: 8 kernel(s) in 16 build(s), 6 tune(s) "
        "(8 build(s) only other architectures use): 6 not servable here\n"
    )
    assert line in said, said
    assert "not for this machine" not in said
    doc = json.loads(
        warm("check", path, "--arch", "sm_100", "--compiler", "nvrtc", "--json").stdout
    )
    assert (doc["kernels"], doc["builds"], doc["tunes"]) == (8, 16, 6), doc
    assert doc["not_for_this_machine"] == 8 and doc["other_builds"] == 8
    assert doc["checked"] == {"kernels": 8, "tunes": 6}
    assert len(warm.json("stats", path)["kernels"]) == doc["builds"]
    # its own arch: every kernel served as its cubin, its PTX no build of another arch
    done = warm("check", path, "--arch", "sm_90", "--compiler", "nvrtc")
    assert f"bundle {path}: 8 kernel(s) in 16 build(s), 6 tune(s): 6 not servable" in done.stdout


def test_check_tells_the_sources_of_one_label_apart(warm: Warm, tmp_path: Path) -> None:
    """A PyCUDA template formatted with three block sizes: three `block_sum` kernels of one
    label. `warm check --json` gave its entries no `source_sha256` (stats and diff do), and
    its tables one line for the three: now each entry has it, and a table where one label
    stands for several sources has a `source` column, one row per source."""
    from test_stats40 import TEMPLATED

    nvrtc_release_or_skip()
    work, bundle = tmp_path / "t.py", tmp_path / "t.warm"
    work.write_text(TEMPLATED.replace("BLOCKS", repr((64, 128, 256))))
    run = warm("run", work, "--pycuda", "--arch", "sm_90", "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    sources = {k["source_sha256"] for k in warm.json("stats", bundle)["kernels"]}
    assert len(sources) == 3
    for arch, field in (("sm_100", "ptx_jit"), ("sm_80", "unservable")):
        proc = warm("check", bundle, "--arch", arch, "--json")
        entries = [e for e in json.loads(proc.stdout)[field] if e["kind"] == "kernel"]
        assert {e["source_sha256"] for e in entries} == sources, entries
        text = warm("check", bundle, "--arch", arch).stdout
        rows = [r.split() for r in text.splitlines() if " block_sum " in f"{r} "]
        assert " source " in text and len(rows) == 3, text
        assert {r[2] for r in rows} == {s[:8] for s in sources}, rows


def test_a_streamed_listing_and_diff_count_each_compile_as_stats_does(
    warm: Warm, saxpy: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """What SQL counts of the rows one compile made (a large bundle's listing, streamed) is
    what a held listing counts of its records; `warm diff --json` parts each compile alike."""
    from collections import Counter

    from warmcli.bundle.compiles import compile_of, shared_compiles
    from warmcli.bundle.store import Bundle

    path, _ = saxpy
    with Bundle.open(path) as bundle:
        counted = Counter(map(compile_of, bundle.each_kernel()))
        shared = shared_compiles(bundle)  # (kept in a temporary file: read by point queries)
        assert {c: shared.get(c, 1) for c in counted} == counted
        assert shared.get(("none", "none", "none", 1.0), 1) == 1
    assert set(counted.values()) == {2}  # each kernel's cubin and PTX
    host, other = tmp_path / "w.py", tmp_path / "h.warm"  # a bundle of none of its kernels
    host.write_text(HOST)
    done = warm("run", host, "--jobs", "1", "-b", other, "-q", "--no-verify")
    assert done.returncode == 0, done.stdout + done.stderr
    stats = {k["key"]: k["seconds"] for k in warm.json("stats", path)["kernels"]}
    only = warm.json("diff", path, other)["kernels"]["only_a"]
    assert {k["key"]: k["seconds"] for k in only} == stats


def test_the_summary_names_builds_and_tune_records_apart() -> None:
    """Pure wording over a report as `check_servable` fills it (no bundle)."""
    from warmcli.cli.check import _held
    from warmcli.ops.check_report import CheckReport

    report = CheckReport(Path("b.warm"), [], kernels=2, builds=3, tunes=4, other=3)
    report.other_builds = 1
    said = "2 kernel(s) in 3 build(s), 4 tune(s) (1 build(s) and 2 tune record(s) only other "
    assert _held(report) == said + "architectures use)"
    assert _held(CheckReport(Path("b.warm"), [], kernels=2, builds=2)) == "2 kernel(s), 0 tune(s)"
