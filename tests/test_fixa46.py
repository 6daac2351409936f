"""The host identity's `as`/`ld` probe (`cc -print-search-dirs`, since toolid46) as `warm
clean` and an interrupt meet it. `warm clean` judged "this machine's cc" by cc's version line
alone, so no build warm made here (keyed with its `as`/`ld`, and any `COMPILER_PATH`) was
this machine's, and another cc's builds of the same kernels were never dropped as
superseded. A Ctrl-C while cc answers the probe stops it and says one line. The real CLI,
the real cc (behind stand-in wrapper scripts), real bundles.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

ONE = """\
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void one(float *x) { x[0] += 1.0f; }", "one", "P")

def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("moved", [False, True], ids=["plain", "COMPILER_PATH"])
def test_clean_drops_another_ccs_build_superseded_by_this_ccs(
    warm: Warm, tmp_path: Path, moved: bool
) -> None:
    cc = shutil.which("cc")
    assert cc, "the host backend needs cc"
    other = _script(
        tmp_path / "othercc",
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "othercc 99.1"; exit 0; }}\nexec {cc} "$@"\n',
    )
    if moved:  # (another key part where set: cc1, collect2... and the variable itself)
        (tmp_path / "progs").mkdir()
        warm = warm.with_env(COMPILER_PATH=str(tmp_path / "progs"))
    workload = tmp_path / "one.py"
    workload.write_text(ONE)
    here, there, merged = tmp_path / "here.warm", tmp_path / "there.warm", tmp_path / "m.warm"
    warm.json("run", workload, "--bundle", here)
    warm.with_env(WARM_CC=str(other)).json("run", workload, "--bundle", there)
    warm.json("merge", here, there, "-o", merged)
    assert len(warm.json("stats", merged)["kernels"]) == 2

    doc = warm.json("clean", merged)
    assert [r["reason"].startswith("toolchain cc:othercc 99.1") for r in doc["removed"]] == [True]
    (left,) = warm.json("stats", merged)["kernels"]
    assert left["toolchain"] == warm.json("stats", here)["kernels"][0]["toolchain"]


def test_ctrl_c_while_cc_answers_the_identity_probe_stops_it_and_says_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """`cc -print-search-dirs` (where its `as` and `ld` are) hangs: Ctrl-C ends warm with
    exit 130 and one line, no traceback, the probe's process killed, no bundle made."""
    cc = shutil.which("cc")
    assert cc, "the host backend needs cc"
    pid = tmp_path / "probe.pid"
    hangs = _script(
        tmp_path / "hangcc",
        "#!/bin/sh\n"
        f'[ "$1" = -print-search-dirs ] && {{ echo $$ > {pid}.new; mv {pid}.new {pid}; '
        "exec sleep 300; }\n"
        f'exec {cc} "$@"\n',
    )
    workload = tmp_path / "one.py"
    workload.write_text(ONE)
    bundle = tmp_path / "b.warm"
    proc = warm.with_env(WARM_CC=str(hangs)).popen("run", workload, "--bundle", bundle)
    deadline = time.monotonic() + 120
    while not pid.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "cc was never asked -print-search-dirs"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    probe = int(pid.read_text())
    gone = not os.path.exists(f"/proc/{probe}")
    assert gone or Path(f"/proc/{probe}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert not bundle.exists() or not warm.json("stats", bundle)["kernels"]
