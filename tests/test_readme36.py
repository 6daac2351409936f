"""The README, claim by claim, against the real tool: where they disagreed, the code.

Real `warm run` in a subprocess with the real cc and real SQLite files. README ("Commands",
run): "an empty file (as `mktemp` makes) is a new bundle; a first run that fails before
storing anything leaves neither the bundle nor its `.lock` behind". Given an empty file, a
failed first run left it an empty 270 KiB bundle with a `.lock` beside it (a later
`warm stats` of it no longer said it is empty); it now leaves the file empty, as it was
given, and no lock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm

FAILS = {  # a workload that raises, and one that ends the process itself
    "raises": 'DEVICE = "host"\ndef workload(rt):\n    raise RuntimeError("boom")\n',
    "os_exit": 'import os\nDEVICE = "host"\ndef workload(rt):\n    os._exit(0)\n',
}


@pytest.mark.parametrize("how", sorted(FAILS))
def test_a_failed_first_run_leaves_an_empty_file_empty_and_no_lock(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(FAILS[how])
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(b"")  # as mktemp makes it
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert bundle.exists() and bundle.stat().st_size == 0
    assert not Path(f"{bundle}.lock").exists()
    again = warm("stats", bundle)  # still the empty file the user made
    assert again.returncode == 2 and "an empty file" in again.stderr, again.stderr


def test_a_run_into_an_empty_file_that_stores_keeps_its_bundle(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(
        "from warmcli import Kernel\n"
        'DEVICE = "host"\n'
        'K = Kernel("void k(float *x) { x[0] = 1; }", "k", "P")\n'
        "def workload(rt):\n"
        "    rt.launch(K, rt.buffer(1))\n"
    )
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(b"")
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    assert bundle.stat().st_size > 0
    assert warm("stats", bundle).returncode == 0
