"""`warmcli.runtime(device)` with a device that is no str (None, a number) is a
`DeviceError` naming what it takes, as an unknown name is: it was `AttributeError:
'NoneType' object has no attribute 'startswith'`. A real production process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, Warm

CODE = """
import sys, warmcli
try:
    warmcli.runtime({arg})
except warmcli.errors.DeviceError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.parametrize("arg", ["None", "5", "b'host'"])
def test_a_device_that_is_no_str_is_a_device_error(warm: Warm, arg: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE.replace("{arg}", arg)],
        capture_output=True, text=True, env=dict(warm.env, WARM_BUNDLE=""), cwd=ROOT,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "use host, cuda, cuda:N or auto" in proc.stdout, proc.stdout
