"""trial38: a CI team adopts warm for an existing package from the README alone.

Their project is a package (`app`, kernels in several modules, a header in an include
folder), warmed as `warm run -m app.warmup` and through a file that imports it; the
workload parses its own arguments, reads a data file beside it and an environment
variable. The real CLI in a subprocess, the real cc, real bundles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Warm
from forked_cli import ForkedWarm

KERNELS = {
    "scale.py": (
        "import os\nfrom warmcli import Kernel\n"
        "INC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "
        '"include")\n'
        'SCALE = Kernel(\'#include "common.h"\\n'
        "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = SCALE_OF(x[i]); }',\n"
        '    "scale", "Pi", options=("-I" + INC,))\n'
    ),
    "axpy.py": (
        "from warmcli import Kernel, Tunable\n"
        'SRC = "void axpy(float a, const float *x, float *y, int n) '
        '{ for (int i = 0; i < n; i++) y[i] += a * x[i] * STEP / STEP; }"\n'
        "def launch(rt, kernel, a, x, y, n, *, stream=None):\n"
        "    rt.launch(kernel, a, x, y, n, stream=stream)\n"
        'AXPY = Tunable("axpy", {f"step{s}": Kernel(SRC, "axpy", "fPPi", defines={"STEP": s})'
        ' for s in (1, 4)}, launch, check="step1")\n'
    ),
}
WARMUP = """import argparse
import os
import numpy as np
from .kernels.scale import SCALE
from .kernels.axpy import AXPY

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))

def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, {n})
    return p.parse_args()

def workload(rt):
    n = parse().n
    data = np.load(os.path.join(HERE, "{data}")).astype(np.float32)
    x = rt.upload(data[:n].copy())
    y = rt.upload(np.ones(n, np.float32))
    rt.launch(SCALE, x, n)
    rt.tune(AXPY, float(os.environ.get("APP_A", "0.5")), x, y, n)
    return y
"""


def make_project(root: Path, *, n: str = "default=16", data: str = "data.npy") -> Path:
    """The team's checkout at `root`: the `app` package and `warm_entry.py`, a file that
    imports its workload."""
    (root / "app" / "kernels").mkdir(parents=True)
    (root / "app" / "include").mkdir()
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "kernels" / "__init__.py").write_text("")
    for name, text in KERNELS.items():
        (root / "app" / "kernels" / name).write_text(text)
    (root / "app" / "include" / "common.h").write_text("#define SCALE_OF(x) ((x) * 2.0f)\n")
    (root / "app" / "warmup.py").write_text(WARMUP.format(n=n, data=data))
    np.save(root / "app" / "data.npy", np.arange(32, dtype=np.float32) * 0.37)
    entry = 'from app.warmup import workload  # noqa\nDEVICE = "host"\n'
    (root / "warm_entry.py").write_text(entry)
    return root


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> tuple[Warm, Path]:
    """The real CLI (its own warm home; each command forked from a server that imported
    it once, `tests/forked_cli.py`) and a folder for the team's checkouts."""
    base = tmp_path_factory.mktemp("trial38")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(base / "home")
    env["COLUMNS"] = "200"
    return ForkedWarm(Warm(env), forking_servers), base


@pytest.fixture(scope="module")
def warmed(team: tuple[Warm, Path]) -> tuple[Path, Path]:
    """The checkout, and its bundle warmed by `warm run -m app.warmup`."""
    warm, base = team
    project = make_project(base / "checkout")
    bundle = base / "app.warm"
    done = warm("run", "-m", "app.warmup", "-b", bundle, "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    return project, bundle


def test_a_file_workload_importing_the_package_names_the_users_line(
    team: tuple[Warm, Path],
) -> None:
    """The workload imported from the package by a file: what it raised inside a library
    (numpy's `np.load`, argparse's `sys.exit`) is named at the user's line in
    `app/warmup.py`, as under `-m app.warmup`, never at numpy's or argparse's own line."""
    warm, base = team
    missing = make_project(base / "missing", data="nodata.npy")
    required = make_project(base / "required", n="required=True")
    for project, line in ((missing, 17), (required, 13)):
        for form in (["warm_entry.py"], ["-m", "app.warmup"]):
            done = warm("run", *form, "-b", project / "b.warm", cwd=project)
            assert done.returncode == 2, done.stderr
            error = done.stderr.strip().splitlines()[-1]
            assert error.startswith("warm: error: "), done.stderr
            assert f"{project / 'app' / 'warmup.py'}:{line}: " in error, error
            assert "site-packages" not in error and "argparse.py" not in error, error


def test_verify_replays_a_module_workload(
    team: tuple[Warm, Path], warmed: tuple[Path, Path]
) -> None:
    """`warm verify --workload` says what is stale: for a team that warms `-m app.warmup`
    (its relative imports run only as a module) `warm verify -m app.warmup` replays it as
    `warm run -m` does; an edited header is named, exit 1."""
    warm, base = team
    project, bundle = warmed
    done = warm("verify", bundle, "-m", "app.warmup", "-q", cwd=project)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "the bundle is complete" in done.stdout, done.stdout
    edited = base / "edited"
    shutil.copytree(project, edited)
    (edited / "app" / "include" / "common.h").write_text("#define SCALE_OF(x) ((x) * 3.0f)\n")
    done = warm("verify", bundle, "--module", "app.warmup", "--json", cwd=edited)
    assert done.returncode == 1, done.stderr + done.stdout
    misses = json.loads(done.stdout)["explanations"]
    assert [(m["label"], m["reason"]) for m in misses] == [("scale", "headers")], misses
    both = warm("verify", bundle, "-w", "warm_entry.py", "-m", "app.warmup", cwd=project)
    assert both.returncode == 2 and "Traceback" not in both.stderr, both.stderr
    assert both.stderr.strip() == (
        "warm: error: give a workload file (--workload) or -m MODULE, not both"
    ), both.stderr


GPU = """import os
import numpy as np
from warmcli import Kernel

DEVICE = "cuda"
INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
CSCALE = Kernel('#include "common.h"\\n'
    'extern "C" __global__ void cscale(float *x, int n) '
    '{ int i = threadIdx.x; if (i < n) x[i] = SCALE_OF(x[i]); }',
    "cscale", "Pi", language="cuda", options=("-I" + INC,))

def workload(rt):
    rt.launch(CSCALE, rt.upload(np.ones(16, np.float32)), 16, grid=1, block=32)
"""


def test_a_second_run_that_asks_for_ptx_builds_it_beside_the_cubins_it_holds(
    team: tuple[Warm, Path], warmed: tuple[Path, Path]
) -> None:
    """CI warmed `--arch sm_90 --no-ptx`, then drops `--no-ptx` (or names `--ptx
    compute_80`) to serve newer GPUs: the cubin is in the bundle, but the PTX the run keeps
    is not, so the run builds it (it said 'the bundle is complete' and stored nothing, and
    an sm_100 or sm_86 fleet was not servable)."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    warm, base = team
    project, _ = warmed
    (project / "app" / "gpu.py").write_text(GPU)
    bundle = base / "gpu.warm"

    def run(*flags: str) -> dict[str, int]:
        done = warm("run", "-m", "app.gpu", "-b", bundle, "--json", *flags, cwd=project)
        assert done.returncode == 0, done.stderr + done.stdout
        return json.loads(done.stdout)["stored"]

    def ptx_served(arch: str) -> list[str]:
        done = warm("check", bundle, "--arch", arch, "--json")
        return [k["label"] for k in json.loads(done.stdout)["ptx_jit"]]

    assert run("--arch", "sm_90", "--no-ptx") == {"kernels": 1, "tunes": 0}
    assert run("--arch", "sm_90", "--no-ptx") == {"kernels": 0, "tunes": 0}  # incremental
    assert ptx_served("sm_100") == []
    assert run("--arch", "sm_90") == {"kernels": 1, "tunes": 0}  # its compute_90 PTX
    assert ptx_served("sm_100") == ["cscale"]
    assert run("--arch", "sm_90") == {"kernels": 0, "tunes": 0}
    assert run("--arch", "sm_90", "--ptx", "compute_80") == {"kernels": 1, "tunes": 0}
    assert ptx_served("sm_86") == ["cscale"]
    assert run("--arch", "sm_90", "--ptx", "compute_80") == {"kernels": 0, "tunes": 0}


def test_a_package_module_given_as_a_file_is_told_to_use_dash_m(
    team: tuple[Warm, Path], warmed: tuple[Path, Path]
) -> None:
    """`warm run app/warmup.py` fails at its relative import, as under `python
    app/warmup.py`; the one line names the fix: `-m app.warmup`, from the package's folder."""
    warm, base = team
    project, bundle = warmed
    for command in (
        ["run", "app/warmup.py", "-b", base / "f.warm"],
        ["verify", bundle, "-w", "app/warmup.py"],
    ):
        done = warm(*command, cwd=project)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "attempted relative import" in done.stderr, done.stderr
        assert f"a module of a package: give -m app.warmup, from {project}" in done.stderr, (
            done.stderr
        )


SERVE = """import sys
import warmcli
from app.warmup import workload
rt = warmcli.runtime()
sys.stdout.write(rt.read(workload(rt)).tobytes().hex())
"""


def test_deployed_to_another_checkout_and_home_it_serves_a_cold_starts_bits(
    team: tuple[Warm, Path], warmed: tuple[Path, Path]
) -> None:
    """The bundle copied to another folder, served to a checkout at another path under
    another HOME (strict: it compiles and tunes nothing) computes a cold start's bits."""
    warm, base = team
    project, bundle = warmed
    elsewhere = base / "srv" / "app-checkout"
    shutil.copytree(project, elsewhere, ignore=shutil.ignore_patterns("*.warm"))
    (elsewhere / "serve.py").write_text(SERVE)
    shipped = base / "opt" / "app.warm"
    shipped.parent.mkdir()
    shutil.copy(bundle, shipped)
    env = {k: v for k, v in warm.env.items() if not k.startswith("WARM_")}
    env.update(HOME=str(base / "other-home"), PYTHONPATH=os.pathsep.join(sys.path))

    def serve(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "serve.py"],
            cwd=elsewhere,
            env=dict(env, **extra),
            capture_output=True,
            text=True,
            timeout=120,
        )

    cold = serve(WARM_BUNDLE="", WARM_HOME=str(base / "cold-home"))
    hot = serve(WARM_BUNDLE=str(shipped), WARM_STRICT="1", WARM_REPORT="1")
    assert cold.returncode == 0 and hot.returncode == 0, cold.stderr + hot.stderr
    assert hot.stdout == cold.stdout and len(cold.stdout) == 16 * 8, (cold.stdout, hot.stdout)
    assert "served everything: compiled 0 kernels, tuned 0 operations" in hot.stderr
