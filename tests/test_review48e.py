"""Review 48e's attacks on trial48c (`production.close()` keeps the closed bundle's path for the
report) and suite48 (`toolchains.json` rewritten under `home.folder_held`, an flock of warm's
home). Real CLI, real production processes, real SQLite files, the real C compiler; a full disk
is a file size limit (`RLIMIT_FSIZE`), a home another user holds is an flock of it taken here."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from add_only import warmed_here, warmed_once  # noqa: F401  (fixtures)
from conftest import Warm

# Every test starts from `add_only.warmed`'s folder, as its `warm run` left it (made once).
pytestmark = pytest.mark.usefixtures("warmed_here")

# A served process: `{before}`, then `add` (in the bundle) and `mul` (not) launched, `{then}`.
SERVED = """
import os, resource, numpy as np, warmcli, warmcli.production
from kernels import ADD, MUL, SUB

def launch(*kernels):
    rt = warmcli.runtime("host")
    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)
    for k in kernels:
        rt.launch(k, x, o, 4)

{before}
launch(ADD, MUL)
{then}
"""


def _served(
    warm: Warm, cwd: Path, before: str, then: str, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = dict(warm.env, WARM_REPORT="1", **env)
    code = SERVED.format(before=before, then=then)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=environ, capture_output=True, text=True
    )


def _kernels_of(warm: Warm, cwd: Path) -> set[str]:
    stats = warm.json("stats", cwd / "b.warm")
    return {k["entry"] for k in stats["kernels"]}


def test_a_kernel_compiled_after_close_with_no_bundle_is_not_said_written_back(
    warm: Warm, tmp_path: Path
) -> None:
    """`use_bundle(b, write=True)`, `close()`, then a launch: the process serves no bundle
    (`use_bundle`'s path forgotten, none in the environment), so `sub` is compiled and stored
    nowhere; the report kept the closed bundle's path and its `write`, and said at exit
    `bundle b.warm lacked 2 kernel(s) ... (written back into it)`, naming `sub`."""
    before = "warmcli.use_bundle('b.warm', write=True)"
    then = "warmcli.production.close()\nlaunch(SUB)"
    proc = _served(warm, tmp_path, before, then)
    assert proc.returncode == 0, proc.stderr
    assert "kernel sub on host" in proc.stderr, proc.stderr
    assert "written back into it" not in proc.stderr, proc.stderr
    assert _kernels_of(warm, tmp_path) == {"add", "mul"}


def test_a_failed_close_is_not_reported_as_written_back(warm: Warm, tmp_path: Path) -> None:
    """`close()` whose write-back met a full disk raised (caught, as a pool's finalizer's is);
    the report at exit, and `warmcli.report()`, said `(written back into it)` of `mul`,
    which the bundle lacks."""
    then = """
size, hard = os.path.getsize("b.warm"), resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
try:
    warmcli.production.close()
except warmcli.BundleError as exc:
    print("close:", exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
print(warmcli.report())
"""
    proc = _served(warm, tmp_path, "", then, WARM_BUNDLE="b.warm", WARM_BUNDLE_WRITE="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("close: "), proc.stdout
    for text in (proc.stdout, proc.stderr):
        assert "kernel mul on host" in text, text
        assert "written back into it" not in text.replace("NOT written back", ""), text
        assert "NOT written back: " in text and "a write to the disk failed" in text, text
    assert _kernels_of(warm, tmp_path) == {"add"}


def test_a_home_held_by_another_costs_one_wait_per_process_not_one_per_line(
    warm: Warm, tmp_path: Path
) -> None:
    """Another user who may read warm's home holds its flock: a hot start whose compiler's
    lines are not remembered (`toolchains.json` gone, or not this user's) waited
    `HELD_SECONDS` for each line it kept (5 of the host compiler's: 10.7 s measured); it
    waits once, then keeps the rest unlocked, as the first."""
    from warmcli.backends.toolchain import VERSIONS_FILE
    from warmcli.home import HELD_SECONDS

    home = Path(warm.env["WARM_HOME"])
    (home / VERSIONS_FILE).unlink()
    started = time.monotonic()  # the same start with the home free: what a load makes it
    assert _served(warm, tmp_path, "", "", WARM_BUNDLE="b.warm").returncode == 0
    free = time.monotonic() - started
    (home / VERSIONS_FILE).unlink()
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        proc = _served(warm, tmp_path, "", "", WARM_BUNDLE="b.warm")
        took = time.monotonic() - started
    finally:
        os.close(fd)
    assert proc.returncode == 0, proc.stderr
    assert "lacked 1 kernel(s)" in proc.stderr, proc.stderr  # mul: add served
    assert took < free + 3 * HELD_SECONDS, (took, free)  # one wait, not five (free + 10 s)
    assert len((home / VERSIONS_FILE).read_text().splitlines()) > 3  # every line kept


def test_a_pycuda_that_raises_at_import_or_init_is_one_line(warm: Warm, tmp_path: Path) -> None:
    """A pycuda whose driver module raised something else than ImportError or OSError at its
    import (a broken build), or whose `init()` raised something else than its `Error`: `warm
    devices` and `warm run --device cuda` ended in a traceback. A stand-in pycuda package on
    PYTHONPATH (no pycuda here), the real CLI."""
    drivers = {
        "import": 'raise RuntimeError("boom at import")\n',
        "init": "class Error(Exception):\n    pass\n\n\ndef init():\n    raise ValueError('boom')",
    }
    for name, driver in drivers.items():
        fake = tmp_path / name / "pycuda"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("")
        (fake / "driver.py").write_text(driver)
        path = os.pathsep.join([warm.env.get("PYTHONPATH", ""), str(fake.parent)])
        with_fake = warm.with_env(PYTHONPATH=path.lstrip(os.pathsep))
        devices = with_fake("devices", cwd=tmp_path)
        assert devices.returncode == 0, devices.stderr
        assert "Traceback" not in devices.stderr, devices.stderr
        assert "no CUDA device: " in devices.stdout and "boom" in devices.stdout, devices.stdout
        run = with_fake("run", "w.py", "--device", "cuda", "-b", "c.warm", cwd=tmp_path)
        assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
        assert run.stderr.count("\n") == 1 and "boom" in run.stderr, run.stderr
