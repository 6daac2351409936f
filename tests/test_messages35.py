"""Messages a user meets outside the CLI's own flags say what to do where they are.

A production process (`warmcli.runtime("cuda")`, no GPU here) is told to pre-build with
`warm run ... --arch`, not handed a bare flag it has no command line for.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from warmcli.backends.opening import cuda_available


@pytest.mark.skipif(cuda_available(), reason="a GPU is here: the runtime opens it")
def test_a_library_caller_without_a_gpu_is_told_which_command_takes_arch() -> None:
    code = "import warmcli\ntry:\n    warmcli.runtime('cuda')\nexcept Exception as e:\n    print(e)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "give `warm run` the architecture: --arch sm_90" in proc.stdout, proc.stdout
