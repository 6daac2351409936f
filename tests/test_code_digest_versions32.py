"""A checked tunable's code digest on every Python warm runs on (3.11 on), each run in a
subprocess of that interpreter where this machine has it: two functions whose `try` covers
different instructions (what `dis.Bytecode.exception_entries` says) digest apart."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest
from conftest import ROOT

VERSIONS = ("3.11", "3.12", "3.13")
SCRIPT = """
from warmcli.runtime.code_digest import code_digest
def wide(out, inp):
    try:
        x = out[0]
        return x == 1
    except KeyError:
        return False
def narrow(out, inp):
    x = out[0]
    try:
        return x == 1
    except KeyError:
        return False
a, b = code_digest(wide.__code__), code_digest(narrow.__code__)
print(len(a), a != b)
"""


def _interpreter(version: str) -> str | None:
    """A python of `version` that runs here: on PATH, else one pyenv installed."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = [shutil.which(f"python{version}")]
    found += sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    for python in filter(None, found):
        runs = subprocess.run([python, "-c", "pass"], capture_output=True, timeout=60)
        if runs.returncode == 0:
            return python
    return None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_checks_digest_tells_try_ranges_apart_on_each_python(version: str) -> None:
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no python{version} here")
    done = subprocess.run(
        [python, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    if "No module named" in done.stderr:
        pytest.skip(f"python{version} cannot import warm's standard-library needs here")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["64", "True"], done.stdout
