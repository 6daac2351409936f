"""A build is served only by a warm that builds as the warm that made it did.

How warm builds a kernel (the flags it adds, how it writes a group's translation unit and
isolates each kernel) is part of what the build computes: a bundle an older warm made kept
serving its builds after warm changed how it builds (a kernel reading `__FILE__` computed
22.0 from the bundle where a cold start computed 4.0). `BUILD_RECIPE` numbers that way; a
build's toolchain identity names it from recipe 2 on, and serving, `warm check` and the
explanation of a miss treat a build of another recipe as another toolchain's that cannot
be served. Here one warm (this one) stands for the older and a process whose recipe is
raised for the newer, each through the real CLI and a fresh production process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm

from warmcli.backends.toolchain import BUILD_RECIPE

WORKLOAD = """
import numpy as np
from warmcli import Kernel
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] = y[i] * 2 + 1; }",
           "k", "Pl")
def workload(rt):
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(K, y, 4)
"""
SERVE = """
import json, sys, numpy as np, warmcli
sys.path.insert(0, sys.argv[1])
import w
rt = warmcli.runtime("host")
y = rt.upload(np.ones(4, np.float32))
rt.launch(w.K, y, 4)
print(json.dumps({"y": float(rt.read(y)[0]), "compiled": len(warmcli.report().kernels)}))
"""
RAISED = f"import warmcli.backends.toolchain as t; t.BUILD_RECIPE = {BUILD_RECIPE + 1}; "


def _recipe(raised: bool) -> list[str]:
    return [sys.executable, "-c", (RAISED if raised else "") + _MAIN] if raised else [
        sys.executable, "-m", "warmcli"]  # fmt: skip


_MAIN = "import sys; from warmcli.__main__ import main; sys.argv[0] = 'warm'; sys.exit(main())"


def _warm(warm: Warm, raised: bool, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_recipe(raised), *map(str, args)],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=300,
    )  # fmt: skip


def _serve(warm: Warm, raised: bool, folder: Path, bundle: Path) -> dict[str, object]:
    code = (RAISED if raised else "") + SERVE
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(warm.env, WARM_BUNDLE=str(bundle)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_build_of_another_recipe_is_never_served_either_way(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(WORKLOAD)
    for raised, name in ((False, "one.warm"), (True, "two.warm")):
        done = _warm(warm, raised, "run", tmp_path / "w.py", "-b", tmp_path / name, "-q")
        assert done.returncode == 0, done.stderr[-2000:]
    # Each warm is served its own builds, and compiles the other's kernels itself.
    assert _serve(warm, False, tmp_path, tmp_path / "one.warm") == {"y": 3.0, "compiled": 0}
    assert _serve(warm, True, tmp_path, tmp_path / "two.warm") == {"y": 3.0, "compiled": 0}
    assert _serve(warm, False, tmp_path, tmp_path / "two.warm") == {"y": 3.0, "compiled": 1}
    assert _serve(warm, True, tmp_path, tmp_path / "one.warm") == {"y": 3.0, "compiled": 1}
    # `warm check` says why the other's builds are not servable here.
    done = _warm(warm, False, "check", tmp_path / "two.warm", "--json")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    said = (f"build recipe {BUILD_RECIPE + 1}", f"recipe {BUILD_RECIPE}")
    assert all(s in done.stdout for s in said), done.stdout[-2000:]
    done = _warm(warm, True, "check", tmp_path / "two.warm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_recipe_no_warm_wrote_is_another_recipe() -> None:
    from warmcli.backends.toolchain import recipe_of

    assert recipe_of("cc:gcc 12") == 1
    assert recipe_of("cc:gcc 12 [warm build recipe 2]") == 2
    for odd in (
        "cc:gcc 12 [warm build recipe x]",
        "cc:gcc [warm build recipe \u0662]",
        "cc:gcc [warm build recipe 2] ",
        "cc:gcc [warm build recipe 99999999999]",
    ):
        assert recipe_of(odd) == 0, odd  # fmt: skip
