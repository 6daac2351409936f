"""A user upgrading warm, with bundles an older warm made: what each command says of them.

Today's warm raised its build recipe (`warmcli.backends.toolchain.BUILD_RECIPE`), so every
kernel an older warm built misses once. The older warm is this one with its recipe lowered
by one (`OLDER`: the recipe is all that tells their builds apart), run through the real CLI
(today's commands forked, `tests/forked_cli.py`) and production processes (the older warm's
commands too) each a fork of one that imported numpy and warmcli once (`tests/forked_python.py`:
the recipe is lowered in the fork, after `import warmcli`, as a started one lowers it) over one
bundle it warmed (`examples/matmul_host.py`, once per module; re-warmed by today's warm once,
copied by each test of the re-warm): a miss, `warm check` and `warm run`'s re-warm each say
that an older (or a newer) warm built what is not served, and what to do, never that
production serves it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import ForkedWarm, Servers, forked_warm  # noqa: F401  (`warm`, commands forked)
from forked_python import ForkedPythons

from warmcli.backends.toolchain import BUILD_RECIPE

OLDER = f"import warmcli.backends.toolchain as t; t.BUILD_RECIPE = {BUILD_RECIPE - 1}; "
MAIN = "import sys; from warmcli.__main__ import main; sys.argv[0] = 'warm'; sys.exit(main())"
SERVE = f"""
import json, sys, warmcli
sys.path.insert(0, {str(EXAMPLES)!r})
import matmul_host
rt = warmcli.runtime("host")
matmul_host.workload(rt)
done = warmcli.report()
print(json.dumps({{"compiled": len(done.kernels), "tuned": len(done.tunes)}}))
"""


_pythons = ForkedPythons(ROOT)  # `_run`'s servers


@pytest.fixture(scope="module", autouse=True)
def _forking() -> Iterator[None]:
    yield
    _pythons.close()


def _run(warm: Any, older: bool, *args: object, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI (`*args`) or, with `args` none, a production process running the example."""
    code = (OLDER if older else "") + (MAIN if args else SERVE)
    environ = dict(warm.env, **env)
    return _pythons(environ).run(code, *map(str, args), env=environ, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def yesterday(
    tmp_path_factory: pytest.TempPathFactory, made_once: Path, forking_servers: Servers
) -> tuple[ForkedWarm, Path]:
    """warm (its commands forked), and a folder holding `old.warm` (the older warm's bundle
    of the example) and `new.warm` (today's: conftest's `made_once` bundle of the example,
    copied)."""
    import os

    base = tmp_path_factory.mktemp("upgrade37")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    done = _run(warm, True, "run", EXAMPLES / "matmul_host.py", "-b", base / "old.warm", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    shutil.copyfile(made_once / "good.warm", base / "new.warm")
    return warm, base


@pytest.fixture(scope="module")
def rewarmed(yesterday: tuple[ForkedWarm, Path]) -> tuple[Path, str]:
    """`old.warm` re-warmed by today's `warm run` of the example (`rewarmed.warm`, beside
    it), and what that run printed: what each test re-warming it copies."""
    warm, base = yesterday
    bundle = shutil.copyfile(base / "old.warm", base / "rewarmed.warm")
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    return bundle, done.stdout + done.stderr


def test_an_older_warms_build_is_a_miss_that_says_an_older_warm_built_it_and_to_re_warm(
    yesterday: tuple[Warm, Path],
) -> None:
    warm, base = yesterday
    old = str(base / "old.warm")
    done = _run(warm, False, WARM_BUNDLE=old, WARM_EXPLAIN="1")
    assert done.returncode == 0, done.stderr[-2000:]
    served = json.loads(done.stdout)  # its picks (timed: 1 to 3 kernels) and 2 more kernels
    assert served["tuned"] == 0 and served["compiled"] >= 3, served  # tunes still hit
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("warm: miss: kernel")]
    assert len(lines) == served["compiled"], done.stderr
    older = f"built by an older warm (build recipe {BUILD_RECIPE - 1})"
    assert all(older in ln and "re-warm with `warm run`" in ln for ln in lines), lines
    # `warm check` says the same of each kernel it cannot serve.
    done = warm("check", old)
    assert done.returncode == 1, done.stdout + done.stderr
    assert older in done.stdout and "re-warm with `warm run`" in done.stdout, done.stdout
    # The older warm, mid-rollout, over today's bundle: a newer warm built it.
    done = _run(warm, True, WARM_BUNDLE=str(base / "new.warm"), WARM_EXPLAIN="1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["compiled"] >= 3, done.stdout
    newer = f"built by a newer warm (build recipe {BUILD_RECIPE})"
    assert newer in done.stderr and "upgrade warm" in done.stderr, done.stderr


def test_re_warming_an_older_warms_bundle_never_says_production_serves_its_builds(
    yesterday: tuple[Warm, Path], rewarmed: tuple[Path, str], tmp_path: Path
) -> None:
    warm, _ = yesterday
    bundle = shutil.copyfile(rewarmed[0], tmp_path / "b.warm")  # re-warmed from old.warm
    said_by_run = rewarmed[1]
    notes = [ln for ln in said_by_run.splitlines() if "bundle holds" in ln]
    assert notes, said_by_run
    assert not any("production serves either" in ln for ln in notes), notes
    said = f"built by an older warm (build recipe {BUILD_RECIPE - 1})"
    assert any(said in ln and "never serves" in ln for ln in notes), notes
    # Served now by today's warm, compiling nothing; and by the older one (mid-rollout).
    assert json.loads(_run(warm, False, WARM_BUNDLE=str(bundle)).stdout)["compiled"] == 0
    assert json.loads(_run(warm, True, WARM_BUNDLE=str(bundle)).stdout)["compiled"] == 0


def test_a_re_warmed_bundle_passes_warm_check_before_and_after_warm_clean(
    yesterday: tuple[Warm, Path], rewarmed: tuple[Path, str], tmp_path: Path
) -> None:
    """The re-warm README prescribes after an upgrade leaves a bundle `warm check` passes: the
    tunes' candidates built by this warm too (not only by the older one, which this warm never
    serves), and, once `warm clean` removed the older builds, picks naming this warm's builds
    (`warm check` said `its pick 'tile16' is kernel …, which the bundle does not serve`, a
    kernel production compiled nothing for)."""
    warm, _ = yesterday
    bundle = shutil.copyfile(rewarmed[0], tmp_path / "b.warm")  # re-warmed from old.warm
    done = warm("check", bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    done = warm("clean", bundle, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    removed = json.loads(done.stdout)["removed_count"]
    assert removed == {"kernels": 6, "tunes": 0}, done.stdout  # the older builds
    done = warm("check", bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(_run(warm, False, WARM_BUNDLE=str(bundle)).stdout) == {
        "compiled": 0, "tuned": 0}  # fmt: skip
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q")  # nothing more to do
    assert "stored 0 new kernel(s) and 0 new tune(s)" in done.stdout + done.stderr, done.stdout


CUDA = """
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('extern "C" __global__ void twice(float *y) { y[threadIdx.x] *= 2.0f; }', "twice", "P",
           language="cuda")
def workload(rt):
    y = rt.buffer(32)
    rt.launch(K, y, grid=1, block=32)
"""


def test_warm_clean_without_a_gpu_removes_an_older_warms_cuda_builds(
    warm: Warm, tmp_path: Path
) -> None:
    """A build of another recipe is served by no warm of this one on any device: `warm clean`
    on a machine with no GPU (a CI machine that pre-builds `--arch sm_90`) removed none of the
    older warm's cubins and PTX, keeping them as CUDA kernels it `cannot judge`."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    (tmp_path / "w.py").write_text(CUDA)
    bundle = tmp_path / "b.warm"
    for older in (True, False):
        done = _run(warm, older, "run", tmp_path / "w.py", "--arch", "sm_90", "-b", bundle, "-q")
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    builds = len(warm.json("stats", bundle)["kernels"])
    done = warm("clean", bundle, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    cleaned = json.loads(done.stdout)
    assert cleaned["removed_count"]["kernels"] == builds // 2, cleaned
    assert {r["reason"] for r in cleaned["removed"]} == {
        f"built by an older warm (build recipe {BUILD_RECIPE - 1}), this warm builds with "
        f"recipe {BUILD_RECIPE} and never serves it: re-warm with `warm run`"}  # fmt: skip
    # What stays is this warm's: a GPU-less pre-build `warm check --arch` still serves.
    done = warm("check", bundle, "--arch", "sm_90")
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_older_warm_re_warming_a_newer_ones_bundle_keeps_its_tunes(
    yesterday: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Mid-rollout, a warm of the older recipe re-warms the bundle the newer one made: it
    builds its own kernels, but the tunes, whose picks the newer warm built, are kept as
    they are (they re-measured: each version's re-warm then re-measured the other's)."""
    warm, base = yesterday
    bundle = shutil.copyfile(base / "new.warm", tmp_path / "b.warm")
    done = _run(warm, True, "run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "and 0 new tune(s)" in done.stdout + done.stderr, done.stdout + done.stderr
