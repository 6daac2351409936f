"""A new user's knobs (trial42c): `warm clean --tune OPERATION` forgets one tunable's picks,
so that the next `warm run` measures it again (Triton's `TRITON_ALWAYS_COMPILE` for one
kernel, TensorRT's editable timing cache), keeping every other entry and every kernel;
a name the bundle holds no tune of is refused in one line, nothing removed. Real CLI, real
C compiler, real SQLite files: the workload warmed once for the module (`once`) and
copied with its warm home for each test, every `warm` command and production process a fork
of one that imported warm once (`tests/forked_cli.py`, `tests/forked_python.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, Warm, as_run_in
from forked_cli import (
    Servers,
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
    warmed_once,
)

WORKLOAD = '''
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = """
void axpy(float *y, const float *x, float a, int n) {
    for (int i = 0; i < n; i += STEP) for (int j = i; j < i + STEP && j < n; j++) y[j] += a * x[j];
}"""
SCALE = Kernel("void scale(float *y, float s, int n){for(int i=0;i<n;i++) y[i]*=s;}",
               "scale", "Pfi")

def launch(rt, k, y, x, a, n, stream=None):
    rt.launch(k, y, x, a, n, stream=stream)

AXPY = Tunable("axpy", {f"s{s}": Kernel(SRC, "axpy", "PPfi", defines={"STEP": s}) for s in (1, 4)},
               launch, check="s1")
TWICE = Tunable("twice", {f"t{s}": Kernel(SRC.replace("a * x", "2 * a * x"), "axpy", "PPfi",
                defines={"STEP": s}) for s in (1, 2)}, launch)

def workload(rt):
    rng = np.random.default_rng(0)
    for n in (64, 128):
        y = rt.upload(rng.standard_normal(n).astype(np.float32))
        x = rt.upload(rng.standard_normal(n).astype(np.float32))
        rt.tune(AXPY, y, x, 2.0, n)
        rt.tune(TWICE, y, x, 2.0, n)
        rt.launch(SCALE, y, 0.5, n)
'''


@pytest.fixture(scope="module")
def once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> Path:
    """`WORKLOAD` warmed once for the module (`forked_cli.warmed_once`): what `warmed`
    copies for each test."""
    return warmed_once(tmp_path_factory.mktemp("knobs"), WORKLOAD, forking_servers)


@pytest.fixture
def warmed(warm: Warm, tmp_path: Path, once: Path) -> tuple[Path, Path]:
    """`w.py` in `tmp_path` and its bundle, as `warm run w.py -b b.warm` in `warm`'s home
    leaves them (`once`'s, copied)."""
    folder = as_run_in(once, warm, tmp_path)
    return folder / "w.py", folder / "b.warm"


def _ops(warm: Warm, bundle: Path) -> list[str]:
    doc = warm.json("stats", bundle)
    return sorted(t["operation"] for t in doc["tunes"])


def test_clean_tune_forgets_one_tunable_and_run_measures_it_again(
    warm: Warm, warmed: tuple[Path, Path]
) -> None:
    workload, bundle = warmed
    kernels = warm.json("stats", bundle)["kernels"]
    dry = warm("clean", bundle, "--tune", "axpy", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _ops(warm, bundle) == ["axpy", "axpy", "twice", "twice"]
    doc = warm.json("clean", bundle, "--tune", "axpy")
    assert doc["removed_count"] == {"kernels": 0, "tunes": 2}, doc
    assert _ops(warm, bundle) == ["twice", "twice"]
    assert len(warm.json("stats", bundle)["kernels"]) == len(kernels)  # no kernel goes
    again = warm.json("run", workload, "-b", bundle)
    tuning = again["passes"][1]
    assert tuning["autotune"]["measured"] == 2 and tuning["compilation"]["compiled"] == 0
    assert again["stored"] == {"kernels": 0, "tunes": 2} and again["verified"]
    assert _ops(warm, bundle) == ["axpy", "axpy", "twice", "twice"]


def test_clean_tune_of_no_tune_is_one_line_nothing_removed(
    warm: Warm, warmed: tuple[Path, Path]
) -> None:
    _, bundle = warmed
    before = bundle.read_bytes()
    proc = warm("clean", bundle, "--tune", "axpi")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no tunes for operation 'axpi'" in lines[0], proc.stderr
    assert "axpy" in lines[0] and "Traceback" not in proc.stderr
    assert bundle.read_bytes() == before
    assert json.loads(warm("clean", bundle, "--tune", "axpi", "--json").stdout)["exit"] == 2


def test_report_names_a_tune_miss_pick_and_its_candidates_times(
    warm: Warm, warmed: tuple[Path, Path], forking_servers: Servers
) -> None:
    """TRITON_PRINT_AUTOTUNING's question, for a production tune miss: which candidate did
    this process pick, and how did the others compare? `WARM_REPORT=1`'s line of the tune
    says it, and the pick it names is the one written back; results equal a hot process's."""
    workload, bundle = warmed
    code = (
        "import runpy, sys, warmcli, numpy as np\n"
        "w = runpy.run_path(sys.argv[1])\n"
        "rt = warmcli.runtime('host')\n"
        "y = rt.upload(np.arange(64, dtype=np.float32)); x = rt.upload(np.ones(64, np.float32))\n"
        "rt.tune(w['AXPY'], y, x, 2.0, 64)\n"
        "print(rt.read(y).tobytes().hex())\n"
    )
    env = dict(warm.env, WARM_BUNDLE=str(bundle))
    python = forking_servers.pythons(env)  # (forks: one process's imports paid once)
    hot = python.run(code, str(workload), env=env, cwd=ROOT)
    assert hot.returncode == 0, hot.stderr
    assert warm("clean", bundle, "--tune", "axpy").returncode == 0
    env = dict(env, WARM_REPORT="1", WARM_BUNDLE_WRITE="1")
    cold = python.run(code, str(workload), env=env, cwd=ROOT)
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout == hot.stdout  # a tune miss computes what a hit computes
    line = next(s for s in cold.stderr.splitlines() if s.startswith("  tune axpy"))
    stored = next(t for t in warm.json("stats", bundle)["tunes"] if t["shape"].endswith(" 64"))
    pick = stored["pick"]
    other = next(c["name"] for c in stored["candidates"] if c["name"] != pick)
    assert f"): picked {pick}, " in line and " µs" in line, line
    assert f"; {other} " in line and line.endswith("×"), line


def test_tune_pick_text_caps_the_others_and_counts_failures() -> None:
    """Pure logic, on real records: the fastest others first, at most four, then a count."""
    from warmcli.production_report import tune_pick
    from warmcli.records import CandidateMeasurement, TuneRecord

    def cand(name: str, us: float | None, status: str = "ok") -> CandidateMeasurement:
        return CandidateMeasurement(name, "0" * 64, status, None if us is None else us * 1e-6)

    ran = [cand(f"c{i}", 10.0 + i) for i in range(7)]
    tune = TuneRecord(
        "k", "op", "4", "host", "x", "measured", "c0", (*ran, cand("bad", None, "failed"))
    )
    assert tune_pick(tune) == (
        "picked c0, 10.0 µs; c1 1.10×, c2 1.20×, c3 1.30×, c4 1.40×, 2 more, 1 failed"
    )
    alone = TuneRecord("k", "op", "4", "host", "x", "measured", "c0", (ran[0],))
    assert tune_pick(alone) == "picked c0, 10.0 µs"
    assert tune_pick(TuneRecord("k", "op", "4", "host", "x", "pending", None, ())) == ""
