"""A library that ships its warm bundle as package data (README's "Shipping a bundle in a
library"), tried as its author and its users would: two small libraries of host C kernels,
each warmed by its CI with `warm run -m lib._warmup`, installed read-only in a
site-packages-like folder, and served by fresh application processes (the real CLI, real
SQLite files, the real C compiler).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import ForkedWarm

INIT = '''"""{name}: a tiny numpy library on warm's host backend, shipping its bundle."""
import os
from importlib import resources
import numpy as np
import warmcli
from warmcli import Kernel, Tunable

BUNDLE = str(resources.files(__name__) / "{name}.warm")
if os.environ.get("{NAME}_SETDEFAULT"):  # what README advises against
    os.environ.setdefault("WARM_BUNDLE", BUNDLE)

SCALE = Kernel("void {name}_scale(float *x, float a, int n)"
               "{{for(int i=0;i<n;i++) x[i]*=a;}}", "{name}_scale", "Pfi")
CUMSUM = Kernel("void {name}_cumsum(const float *x, float *y, int n)"
                "{{float s=0; for(int i=0;i<n;i++){{s+=x[i]; y[i]=s;}}}}", "{name}_cumsum", "PPi")
ARGMAX = Kernel("void {name}_argmax(const float *x, int *o, int n)"
                "{{int b=0; for(int i=1;i<n;i++) if(x[i]>x[b]) b=i; o[0]=b;}}",
                "{name}_argmax", "PPi")
SUM_SRC = ("void {name}_sum(const float *x, double *o, int n){{double a[U]={{0}}; int i=0;"
           "for(;i+U<=n;i+=U) for(int u=0;u<U;u++) a[u]+=x[i+u]; for(;i<n;i++) a[0]+=x[i];"
           "double s=0; for(int u=0;u<U;u++) s+=a[u]; o[0]=s;}}")


def _launch(rt, kernel, x, o, n, *, stream=None):
    rt.launch(kernel, x, o, n, stream=stream)


SUM = Tunable("{name}_sum", {{f"u{{u}}": Kernel(SUM_SRC, "{name}_sum", "PPi", defines={{"U": u}},
              name="{name}_sum") for u in (1, 4)}}, _launch)


def compute(x, rt=None):
    rt = rt or warmcli.runtime("host")
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size
    xb = rt.upload(x)
    b = rt.upload(x.copy()); rt.launch(SCALE, b, 1.5, n)
    c = rt.buffer(n); rt.launch(CUMSUM, xb, c, n)
    m = rt.buffer(1, "int32"); rt.launch(ARGMAX, xb, m, n)
    s = rt.buffer(1, "float64"); rt.tune(SUM, xb, s, n)
    return [rt.read(b).tolist(), rt.read(c).tolist(), rt.read(m).tolist(), rt.read(s).tolist()]
'''
WARMUP = '''"""{name}'s CI warm-up: its public function, as users call it."""
import numpy as np
import {name}

DEVICE = "host"


def workload(rt):
    {name}.compute(np.linspace(-1, 1, 300, dtype=np.float32), rt)
'''
# An application using both libraries: what they compute, and what this process did cold.
APP = """
import json, sys
import numpy as np
import warmcli
import liba, libb
sys.path.insert(0, sys.argv[1])
import myapp
rt = warmcli.runtime("host")
x = np.linspace(-1, 1, 300, dtype=np.float32)
out = [liba.compute(x), libb.compute(x), rt.read(myapp.workload(rt)).tolist()]
r = warmcli.report()
print(json.dumps({"out": out, "kernels": [m.name for m in r.kernels], "tunes": len(r.tunes)}))
"""
MYAPP = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
NEG = Kernel("void myapp_neg(float *x, int n){for(int i=0;i<n;i++) x[i]=-x[i];}", "myapp_neg", "Pi")


def workload(rt):
    b = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(NEG, b, 8)
    return b
"""


def tree(folder: Path) -> dict[str, int]:
    """Every file under `folder` and its size: what a process wrote there shows."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> tuple[Path, Path, Warm]:
    """Two libraries, each warmed by its CI into its package folder, then installed (copied,
    bundle and code only) into `site`, made read-only; the application's folder and a
    warm for the application (site on its PYTHONPATH). Each warm's commands forked
    (`tests/forked_cli.py`), from a server of its own PYTHONPATH."""
    base = tmp_path_factory.mktemp("trial43a")
    src, site, app = base / "src", base / "site", base / "app"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    path = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH", "")]))
    ci = ForkedWarm(
        Warm(dict(env, WARM_HOME=str(base / "ci-home"), COLUMNS="200", PYTHONPATH=path)),
        forking_servers,
    )
    for name in ("liba", "libb"):
        (src / name).mkdir(parents=True)
        (src / name / "__init__.py").write_text(INIT.format(name=name, NAME=name.upper()))
        (src / name / "_warmup.py").write_text(WARMUP.format(name=name))
        bundle = src / name / f"{name}.warm"
        proc = ci("run", "-m", f"{name}._warmup", "-b", bundle, "-q", "--allow-discarded-reads")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (site / name).mkdir(parents=True)
        for file in ("__init__.py", "_warmup.py", f"{name}.warm"):  # not the run's .lock
            (site / name / file).write_bytes((src / name / file).read_bytes())
    for p in [*sorted(site.rglob("*"), reverse=True), site]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    app.mkdir()
    (app / "myapp.py").write_text(MYAPP)
    path = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    user = ForkedWarm(
        Warm(dict(env, WARM_HOME=str(base / "user-home"), COLUMNS="200", PYTHONPATH=path)),
        forking_servers,
    )
    return site, app, user


def serve(warm: Warm, app: Path, **env: str) -> dict:
    """The application run once in a fresh process under `env`."""
    proc = subprocess.run(
        [sys.executable, "-c", APP, str(app)],
        capture_output=True,
        text=True,
        env=dict(warm.env, **env),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def cold(site: tuple[Path, Path, Warm]) -> dict:
    """The application served with no bundle (`WARM_BUNDLE=""`), once for the module: what
    each test compares its served results with (nothing written under `site` meanwhile)."""
    folder, app, user = site
    before = tree(folder)
    served = serve(user, app, WARM_BUNDLE="")
    assert tree(folder) == before
    return served


def test_ci_warm_up_that_reads_results_needs_allow_discarded_reads(
    site: tuple[Path, Path, Warm], tmp_path: Path
) -> None:
    _, _, user = site
    proc = user("run", "-m", "liba._warmup", "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "DiscardedReadError: read of Buffer" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_application_opting_in_is_served_the_read_only_package_bundle(
    site: tuple[Path, Path, Warm], cold: dict
) -> None:
    folder, app, user = site
    before = tree(folder)
    assert len(cold["kernels"]) == 11 and cold["tunes"] == 2
    # `WARM_BUNDLE=$(python -c 'import liba; print(liba.BUNDLE)')`, as README says
    printed = subprocess.run(
        [sys.executable, "-c", "import liba; print(liba.BUNDLE)"],
        capture_output=True,
        text=True,
        env=user.env,
        check=True,
    ).stdout.strip()
    assert printed == str(folder / "liba" / "liba.warm")
    hot = serve(user, app, WARM_BUNDLE=printed)
    assert hot["out"] == cold["out"]
    # one bundle a process: libb's kernels and tune, and the app's own kernel, are cold
    assert {k.split("_")[0] for k in hot["kernels"]} == {"libb", "myapp"}
    assert len(hot["kernels"]) == 6 and hot["tunes"] == 1
    assert tree(folder) == before  # read-only: nothing written beside it


def test_two_libraries_bundles_merged_by_the_application_serve_everything(
    site: tuple[Path, Path, Warm], tmp_path: Path, cold: dict
) -> None:
    folder, app, user = site
    before = tree(folder)
    merged = tmp_path / "app.warm"
    ran = user("run", app / "myapp.py", "-b", merged, "-q")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    proc = user("merge", merged, folder / "liba" / "liba.warm", folder / "libb" / "libb.warm",
                "-o", merged)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hot = serve(user, app, WARM_BUNDLE=str(merged), WARM_STRICT="1")
    assert hot == {"out": cold["out"], "kernels": [], "tunes": 0}
    for command in ("stats", "verify", "check"):  # the installed copy, read where it lies
        proc = user(command, folder / "liba" / "liba.warm")
        assert proc.returncode == 0, (command, proc.stdout + proc.stderr)
    assert tree(folder) == before


def test_a_library_setting_warm_bundle_at_import_shadows_the_default_bundle(
    site: tuple[Path, Path, Warm],
) -> None:
    """README's warning: the application warmed itself into the default bundle; a library
    that sets WARM_BUNDLE at import (`setdefault`) takes the process's one bundle, and the
    application's own kernel is compiled cold."""
    _, app, user = site
    ran = user("run", app / "myapp.py", "-q")  # no --bundle: the default bundle
    assert ran.returncode == 0, ran.stdout + ran.stderr
    own = serve(user, app)
    assert "myapp_neg" not in own["kernels"]
    shadowed = serve(user, app, LIBA_SETDEFAULT="1")
    assert "myapp_neg" in shadowed["kernels"]
    assert not any(k.startswith("liba") for k in shadowed["kernels"])
