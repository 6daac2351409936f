"""A child forked after its parent initialised CUDA is told CUDA is not for it, and never
calls `cuInit` (on the H200 such a child's `warmcli.runtime()`, probing for a GPU, died of
SIGSEGV: CUDA does not survive a fork); a child of a parent that never initialised CUDA
may.

Pure logic of warm's own bookkeeping: a stand-in `pycuda` package (no GPU here) that
records each `init()` by process id, in real forked processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

STANDIN_DRIVER = """
import os
class Error(Exception):
    pass
def init():
    with open(os.environ["INIT_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
def get_driver_version():
    return 13000
class Device:
    @staticmethod
    def count():
        return 0
"""

FORK = """
import os, sys
from warmcli.backends.cuda.device import _driver, list_cuda_devices
from warmcli.errors import DeviceError
if sys.argv[1] == "init-first":
    assert list_cuda_devices() == []
pid = os.fork()
if pid == 0:
    found = list_cuda_devices()
    try:
        _driver()
        said = ""
    except DeviceError as exc:
        said = str(exc)
    print(f"{os.getpid()} {found} {said!r}", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print(os.getpid())
"""


def _run(tmp_path: Path, order: str) -> tuple[list[str], list[str]]:
    (tmp_path / "pycuda").mkdir(exist_ok=True)
    (tmp_path / "pycuda" / "__init__.py").write_text("")
    (tmp_path / "pycuda" / "driver.py").write_text(STANDIN_DRIVER)
    log = tmp_path / f"init-{order}.log"
    env = dict(os.environ, INIT_LOG=str(log), PYTHONPATH=f"{tmp_path}:{ROOT}")
    proc = subprocess.run(
        [sys.executable, "-c", FORK, order], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    inits = log.read_text().split() if log.exists() else []
    return proc.stdout.splitlines(), inits


def test_a_child_forked_after_cuda_was_initialised_never_initialises_it(tmp_path: Path) -> None:
    (child, parent), inits = _run(tmp_path, "init-first")
    assert inits == [parent], "cuInit only in the parent"
    assert " [] " in child and "forked after its parent initialised CUDA" in child
    assert "'spawn'" in child


def test_a_child_of_a_parent_that_never_initialised_cuda_may(tmp_path: Path) -> None:
    (child, _), inits = _run(tmp_path, "fork-first")
    assert inits and set(inits) == {child.split()[0]}, "cuInit in the child, not the parent"
    assert child.endswith("''")
