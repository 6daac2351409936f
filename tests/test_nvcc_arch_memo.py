"""Which SMs an nvcc builds (`nvcc --list-gpu-code`), remembered across processes beside its
version line: a hot start keys its kernels without starting nvcc (on an H200 that run cost
each hot CUDA start with nvcc ~10 ms), and a changed nvcc is asked again.

Processes of their own (each a fork of one that imported numpy and warmcli once, and no
backend: `tests/forked_python.py`) over a temporary `WARM_HOME`; a script stands in for nvcc
where the test must see whether it ran, the real nvcc (the `nvcc` extra) where it checks the
list.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, nvcc_or_skip
from forked_python import ForkedPython

from warmcli.backends.toolchain import RACY_SECONDS

ASK = """
import json, sys
from warmcli.backends.cuda.nvcc import supported_sms
print(json.dumps(sorted(supported_sms(sys.argv[1]))))
"""


@pytest.fixture(scope="module")
def asking() -> Iterator[ForkedPython]:
    """The server `_ask`'s processes are forked from."""
    server = ForkedPython(dict(os.environ, PYTHONPATH=str(ROOT)), ROOT)
    yield server
    server.close()


def _ask(asking: ForkedPython, home: Path, nvcc: str | Path) -> list[int]:
    env = dict(os.environ, WARM_HOME=str(home), PYTHONPATH=str(ROOT))
    proc = asking.run(ASK, str(nvcc), env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _fake(path: Path, sms: str) -> Path:
    """An nvcc stand-in: lists `sms` and counts its runs in `path`.runs."""
    path.write_text(f"#!/bin/sh\necho run >> '{path}.runs'\nfor s in {sms}; do echo $s; done\n")
    path.chmod(0o755)
    return path


def _settled(path: Path) -> Path:
    """`path` once its change is older than `RACY_SECONDS` (a stamp is kept only then)."""
    time.sleep(max(0.0, os.stat(path).st_ctime + RACY_SECONDS + 0.05 - time.time()))
    return path


def _runs(path: Path) -> int:
    runs = Path(f"{path}.runs")
    return len(runs.read_text().splitlines()) if runs.exists() else 0


# A stand-in is a script: its `--dryrun` is asked once too, for the nvcc binary it runs
# (`host_options.runs`; this one names none, so its own list is remembered).
def test_the_list_is_asked_once_per_binary_across_processes(
    tmp_path: Path, asking: ForkedPython
) -> None:
    nvcc = _settled(_fake(tmp_path / "nvcc", "sm_80 sm_90"))
    home = tmp_path / "home"
    assert _ask(asking, home, nvcc) == [80, 90] and _runs(nvcc) == 2  # its --dryrun, its list
    assert _ask(asking, home, nvcc) == [80, 90] and _runs(nvcc) == 2  # remembered: not started


def test_a_changed_nvcc_is_asked_again(tmp_path: Path, asking: ForkedPython) -> None:
    nvcc = _fake(tmp_path / "nvcc", "sm_80")
    home = tmp_path / "home"
    assert _ask(asking, home, nvcc) == [80]
    _fake(nvcc, "sm_80 sm_100")  # rewritten: another stamp (ctime moves)
    assert _ask(asking, home, nvcc) == [80, 100] and _runs(nvcc) == 4


def test_an_nvcc_that_lists_nothing_is_not_remembered(tmp_path: Path, asking: ForkedPython) -> None:
    nvcc = _settled(_fake(tmp_path / "nvcc", ""))
    home = tmp_path / "home"
    assert _ask(asking, home, nvcc) == [] and _ask(asking, home, nvcc) == []
    assert _runs(nvcc) == 3  # its list asked again: nothing stored that could say otherwise


def test_the_real_nvcc_lists_what_it_builds(tmp_path: Path, asking: ForkedPython) -> None:
    nvcc = nvcc_or_skip()
    first, again = _ask(asking, tmp_path / "home", nvcc), _ask(asking, tmp_path / "home", nvcc)
    assert 90 in first and first == again
