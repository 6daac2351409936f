"""A kernel library shipping a warmed bundle as package data (trial 41c), and the warm run
of a PyCUDA-style script whose entry takes no argument, named with `--entry`.

Real parts only: the CLI in a subprocess, real bundles, the system C compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A `--pycuda` script whose GPU work is in a `main()` taking no argument (PyCUDA's style),
# here launching on the run's host runtime (a GPU-less pre-build, `--arch`, needs no pycuda).
NO_ARG_MAIN = """
import numpy as np
import warmcli
from warmcli import Kernel

K = Kernel("void twice(float *y, int n) { for (int i = 0; i < n; i++) y[i] *= 2.0f; }",
           "twice", "Pi")

def {name}():
    rt = warmcli.runtime("host")
    rt.launch(K, rt.upload(np.ones(8, np.float32)), 8)
"""


def test_pycuda_entry_named_main_is_called_as_warm_finds_it(warm: Warm, tmp_path: Path) -> None:
    """`warm run s.py --pycuda` calls a script's `main()` with no argument; naming that same
    entry, `--entry main` (or another no-argument function, `--entry go`), was refused:
    `main() must take the runtime as its one argument`."""
    cli = warm
    for name in ("main", "go"):
        script = tmp_path / f"s_{name}.py"
        script.write_text(NO_ARG_MAIN.replace("{name}", name))
        args = [script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", tmp_path / f"{name}.warm"]
        if name == "main":
            found = cli("run", *args)
            assert found.returncode == 0, found.stderr
        named = cli("run", *args, "--entry", name)
        assert named.returncode == 0, named.stderr
        assert "stored 1 new kernel" in named.stdout or "stored 0 new kernel" in named.stdout
        assert "the bundle is complete" in named.stdout


# A kernel library of its own (not a test workload) that ships its warmed bundle as package
# data and points warm at it through `importlib.resources`, as the README's `use_bundle`.
LIBRARY = """
import importlib.resources
import warmcli
from warmcli import Kernel, Tunable

AXPY = Kernel("void axpy(float *y, const float *x, float a, int n) "
              "{ for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i]; }", "axpy", "PPfi")
SUM = ("void rsum(const float *x, float *o, int n) "
       "{ float s = 0; for (int i = 0; i < n; i++) s += x[i] * U; o[0] = s; }")
def _launch(rt, k, x, o, n, *, stream=None):
    rt.launch(k, x, o, n, stream=stream)
PICKS = {f"v{v}": Kernel(SUM, "rsum", "PPi", defines={"U": 1, "V": v}) for v in (1, 2)}
RSUM = Tunable("shiplib.rsum", PICKS, _launch)

def use_shipped_bundle():
    warmcli.use_bundle(str(importlib.resources.files("shiplib") / "shiplib.warm"))

def run(rt, n):
    import numpy as np
    rng = np.random.default_rng(n)
    x = rt.upload(rng.standard_normal(n).astype(np.float32))
    y = rt.upload(rng.standard_normal(n).astype(np.float32))
    o = rt.buffer(1)
    rt.launch(AXPY, y, x, 2.5, n)
    rt.tune(RSUM, x, o, n)
    return y, o
"""
WARMUP = "import shiplib\ndef workload(rt):\n    shiplib.run(rt, 1000)\n"
APP = """
import sys, hashlib, warmcli, shiplib
if sys.argv[2] == "hot":
    shiplib.use_shipped_bundle()
rt = warmcli.runtime()
print(hashlib.sha256(b"".join(rt.read(b).tobytes() for b in shiplib.run(rt, int(sys.argv[1]))))
      .hexdigest())
"""


def _unprivileged() -> list[str]:
    """The command prefix that makes a root process respect file modes (no DAC override)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a-w files stay writable")
    caps = "-dac_override,-dac_read_search,-fowner"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


def test_a_library_ships_its_bundle_read_only_and_users_start_hot(
    warm: Warm, tmp_path: Path
) -> None:
    """The library's bundle, installed read-only as package data, serves a user's process
    hot with nothing written (no lock, no write-back); a miss (a new shape) is tuned in the
    process and, under WARM_BUNDLE_WRITE=1, said not written back in one line; every result
    is bit-identical to a cold process's."""
    site = tmp_path / "site"
    (site / "shiplib").mkdir(parents=True)
    (site / "shiplib" / "__init__.py").write_text(LIBRARY)
    (site / "shiplib" / "warmup.py").write_text(WARMUP)
    env = dict(warm.env, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    bundle = site / "shiplib" / "shiplib.warm"
    made = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", "-m", "shiplib.warmup", "-b", bundle, "-q"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    Path(f"{bundle}.lock").unlink()
    before = {p.name: p.read_bytes() for p in (site / "shiplib").iterdir() if p.is_file()}
    (tmp_path / "app.py").write_text(APP)
    modes = {p: p.stat().st_mode for p in [site, *site.rglob("*")]}
    for path in modes:
        path.chmod(path.stat().st_mode & ~0o222)
    try:

        def app(n: int, how: str, **extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*_unprivileged(), sys.executable, tmp_path / "app.py", str(n), how],
                capture_output=True, text=True, cwd=tmp_path, timeout=300,
                env=dict(env, WARM_REPORT="1", **extra),
            )  # fmt: skip

        hot, cold = app(1000, "hot"), app(1000, "cold")
        assert hot.returncode == 0 and cold.returncode == 0, hot.stderr + cold.stderr
        assert "served everything: compiled 0 kernels, tuned 0 operations" in hot.stderr
        assert hot.stdout == cold.stdout
        miss, cold = app(777, "hot", WARM_BUNDLE_WRITE="1"), app(777, "cold")
        assert miss.returncode == 0 and miss.stdout == cold.stdout, miss.stderr
        assert "lacked 0 kernel(s) and 1 tune(s)" in miss.stderr
        assert "NOT written back" in miss.stderr and "Traceback" not in miss.stderr
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    after = {p.name: p.read_bytes() for p in (site / "shiplib").iterdir() if p.is_file()}
    assert after == before


def test_a_library_warmup_file_importing_its_own_package_is_told_to_use_dash_m(
    warm: Warm, tmp_path: Path
) -> None:
    """A library's warm-up module inside its package (`lib/warmup.py`: `import lib`), given as
    a file, fails as under `python lib/warmup.py` (its folder, not the package's parent, is on
    `sys.path`): the line said only `No module named 'lib'`; it now names the fix, as for a
    relative import: `-m lib.warmup`. A module it misses that is not its package gets none."""
    package, elsewhere = tmp_path / "lib", tmp_path / "elsewhere"
    package.mkdir()
    elsewhere.mkdir()  # (`python -m warmcli` puts its working folder first on `sys.path`)
    (package / "__init__.py").write_text("")
    (package / "warmup.py").write_text("import lib\ndef workload(rt):\n    pass\n")
    (package / "other.py").write_text("import zz_not_a_module\ndef workload(rt):\n    pass\n")
    (elsewhere / "w.py").write_text(
        NO_ARG_MAIN.replace("{name}", "workload").replace("():", "(r):")
    )
    assert warm("run", "w.py", "-b", "x.warm", cwd=elsewhere).returncode == 0  # (for verify)
    for command in (
        ["run", package / "warmup.py", "-b", "x.warm"],
        ["verify", "x.warm", "-w", package / "warmup.py"],
    ):
        done = warm(*command, cwd=elsewhere)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "No module named 'lib'" in done.stderr, done.stderr
        assert f"(a module of a package: give -m lib.warmup, from {tmp_path})" in done.stderr
    done = warm("run", package / "other.py", "-b", "x.warm", cwd=elsewhere)
    assert done.returncode == 2 and "zz_not_a_module" in done.stderr, done.stderr
    assert "give -m" not in done.stderr
