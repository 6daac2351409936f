"""Review of round 48's trial48a and serve48 merges: the real CLI in a subprocess, real nvcc
and NVRTC for `--arch sm_90`, real SQLite bundles.

What it found: after a `--compiler nvcc` warm, a run of any other workload into the same
bundle noted `bundle holds 3 kernel(s) for sm_90 built by 'nvcc...': this run builds its
own`, kernels that were none of its own (it rebuilt none of them); the note is now made on
the miss of a kernel that toolchain built, naming it, and not at all where there is none.
Two kernels of one label (`fill`, options -DBS=1 and -DBS=2) failing differently: the second's
note was left out, taken for the error's compile, its error never said. A bundle named by a
link, its file in a folder that takes no journal: the old `too many open files?` (the link's
folder was asked whether it is writable, not the file's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

NEEDS_NVRTC = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

FILL = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" __global__ void fill_a(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f;
}
"""
def workload(rt):
    y = rt.buffer(256, "float32")
    for b in (1, 2):
        k = Kernel(SRC, "fill_a", "Pi", language="cuda", defines={"B": b})
        rt.launch(k, y, 256, grid=1, block=256)
'''


def _notes(proc_out: str) -> list[str]:
    return [ln for ln in proc_out.splitlines() if "bundle holds" in ln and "built by" in ln]


@NEEDS_NVRTC
def test_nvccs_builds_are_noted_only_to_a_run_that_rebuilds_them(
    warm: Warm, tmp_path: Path
) -> None:
    """`fill_a` warmed by nvcc; `fill_b` (another workload) warmed by NVRTC into the same
    bundle is told nothing of nvcc's builds (it said `bundle holds 2 kernel(s) ... built by
    'nvcc...': this run builds its own`); `fill_a` warmed by NVRTC is told, by its label."""
    nvcc_or_skip()
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(FILL)
    b.write_text(FILL.replace("fill_a", "fill_b"))
    bundle = tmp_path / "b.warm"
    nvcc = warm("run", a, "--compiler", "nvcc", "--arch", "sm_90", "-b", bundle)
    assert nvcc.returncode == 0, nvcc.stdout + nvcc.stderr
    other = warm("run", b, "--arch", "sm_90", "--compiler", "nvrtc", "-b", bundle)
    assert other.returncode == 0, other.stdout + other.stderr
    assert _notes(other.stdout + other.stderr) == [], other.stdout + other.stderr
    same = warm("run", a, "--arch", "sm_90", "--compiler", "nvrtc", "-b", bundle)
    assert same.returncode == 0, same.stdout + same.stderr
    notes = _notes(same.stdout + same.stderr)
    assert len(notes) == 1, same.stdout + same.stderr
    assert "fill_a[B=1]" in notes[0] and "'nvcc" in notes[0], notes
    assert "this run builds its own on sm_90" in notes[0], notes


TWO_FAILURES = '''
from warmcli import Kernel
SRC = """
#if BS == 1
#error first failure one
#else
#error second failure two
#endif
void fill(float *y) { y[0] = 1; }
"""
def workload(rt):
    y = rt.buffer(4, "float32")
    for bs in (1, 2):
        rt.launch(Kernel(SRC, "fill", "P", options=(f"-DBS={bs}",)), y, grid=1, block=1)
'''


def test_a_failed_compile_of_the_errors_label_and_other_options_is_said(
    warm: Warm, tmp_path: Path
) -> None:
    """Two kernels labelled `fill`, one `-DBS=1`, one `-DBS=2`, failing at different
    `#error`s in one batch: the run's error is the first's (`kernel fill failed to compile`,
    no options named), and the second's note was taken for it and left out, its error never
    said; it is said now (once), the first's log once, by the error."""
    workload = tmp_path / "w.py"
    workload.write_text(TWO_FAILURES)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert said.count("#error second failure two") == 1, said
    assert said.count("#error first failure one") == 1, said
    assert "compile of fill -DBS=2 (key " in said and "Traceback" not in said, said


def test_a_bundle_named_by_a_link_into_a_folder_taking_no_journal_is_said_so(
    warm: Warm, tmp_path: Path
) -> None:
    """`link.warm` -> `ro/b.warm`, `ro` immutable (no journal can be made there, where SQLite
    makes it: beside the file the link names): `warm run -b link.warm` said `SQLite could not
    open the bundle or its journal (too many open files?)`; it says the folder is not
    writable, as `-b ro/b.warm` does, the bundle unchanged."""
    folder = tmp_path / "ro"
    folder.mkdir()
    workload = tmp_path / "w.py"
    workload.write_text(TWO_FAILURES.replace("#error", "#warning"))
    bundle = folder / "b.warm"
    proc = warm("run", workload, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before = bundle.read_bytes()
    os.symlink(bundle, tmp_path / "link.warm")
    workload.write_text(TWO_FAILURES.replace("#error", "#warning").replace("= 1;", "= 2;"))
    made = os.geteuid() == 0 and shutil.which("chattr") is not None
    if not made or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
        pytest.skip("cannot make a folder immutable here (chattr +i needs root)")
    try:
        proc = warm("run", workload, "-b", tmp_path / "link.warm", "-q")
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "too many open files" not in proc.stderr, proc.stderr
    assert "its folder is not writable" in proc.stderr, proc.stderr
    assert bundle.read_bytes() == before
