"""Found on main at stop 37: a journal planted beside a bundle a writer has open, met at a
read or a vacuum; two miss lines that read alike; an option's C-linkage CUDA variable.

A writer's connection may write, so SQLite itself rolls back a hot journal it finds at the
writer's next read, unchecked: one naming a super-journal had SQLite delete the file it
named, one restoring a view had the writer's reads answered by the view. `warm clean`'s
vacuum ran outside the write transaction that settles a journal first, with the same
effect. Each test is a real process over a real bundle (`warm run`, real cc) and a real
journal (`tests/test_hostile36`'s).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_entry36 import needs_nvrtc
from test_hostile36 import journal_naming, view_journal

# A writer with the bundle `argv[1]` open reads it, then the journal `argv[2]` is planted
# beside it, then it does `argv[3]`: "read" (its kernels) or "vacuum".
WRITER = """
import shutil, sys
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
b = Bundle.open(sys.argv[1], write=True)
print(len(b.kernels()))
shutil.copyfile(sys.argv[2], sys.argv[1] + "-journal")
try:
    print(len(b.kernels()) if sys.argv[3] == "read" else b.vacuum())
except BundleError as exc:
    print("error:", exc)
"""


def _writer(warm: Warm, bundle: Path, journal: Path, then: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(bundle), str(journal), then],
        capture_output=True, text=True, env=warm.env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.splitlines()


def test_a_writers_read_or_vacuum_never_has_sqlite_delete_the_file_a_planted_journal_names(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    for then in ("read", "vacuum"):
        precious = tmp_path / f"precious-{then}.txt"
        precious.write_text("the user's data\n")
        journal = journal_naming(bundle, precious, tmp_path / f"super-{then}.journal")
        lines = _writer(warm, bundle, journal, then)
        assert precious.read_bytes() == b"the user's data\n", then  # it was deleted
        assert lines[0] == "6" and len(lines) == 2, lines
        assert lines[1].startswith("error: ") and "names another file" in lines[1], lines
        Path(f"{bundle}-journal").unlink()


def test_a_view_a_journal_planted_beside_a_writers_bundle_restores_never_answers_its_read(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # The writer's second read said 0 kernels: the restored view's (of none).
    bundle = host_bundle(tmp_path / "b.warm")
    lines = _writer(warm, bundle, view_journal(bundle, tmp_path / "view.journal"), "read")
    assert lines[0] == "6" and len(lines) == 2, lines
    assert lines[1].startswith("error: ") and "not warm's" in lines[1], lines


# Two kernels of one label (`name="h"`), apart only in an option, both reading `h.h`.
TWO_OF_ONE_LABEL = """
import os
from warmcli import Kernel
SRC = '#include "h.h"\\nvoid h(float *o) { o[0] = V; }\\n'
HERE = os.path.dirname(os.path.abspath(__file__))
A = Kernel(SRC, "h", "P", options=("-I", HERE, "-O1"), name="h")
B = Kernel(SRC, "h", "P", options=("-I", HERE, "-O2"), name="h")
def workload(rt):
    o = rt.buffer(1, "float32")
    rt.launch(A, o)
    rt.launch(B, o)
"""


def test_two_misses_that_would_read_alike_each_name_their_key(warm: Warm, tmp_path: Path) -> None:
    # `warm verify --workload` after the header changed said the same line twice.
    workload = tmp_path / "w.py"
    workload.write_text(TWO_OF_ONE_LABEL)
    (tmp_path / "h.h").write_text("#define V 1.0f\n")
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    (tmp_path / "h.h").write_text("#define V 2.0f\n")
    done = warm("verify", bundle, "--workload", workload)
    misses = [line for line in done.stdout.splitlines() if line.startswith("miss: kernel h:")]
    assert done.returncode == 1 and len(misses) == 2, done.stdout[-2000:]
    assert misses[0] != misses[1] and all("(key " in m for m in misses), misses


# Two CUDA kernels whose C-linkage device variable an option's macro declares.
CUDA_OPTION_COUNTERS = r"""
from warmcli import Kernel
DECL = '-DDECL=extern "C" __device__ int counter;'
def src(v):
    return ('DECL\nextern "C" __global__ void k%d(int *o) '
            '{ counter += %d; o[0] = counter; }\n' % (v, v))
KS = [Kernel(src(v), f"k{v}", "P", language="cuda", options=(DECL,)) for v in (1, 2)]
def workload(rt):
    o = rt.buffer(1, "int32")
    for k in KS:
        rt.launch(k, o, grid=1, block=1)
"""


@needs_nvrtc
def test_cuda_kernels_whose_option_declares_a_c_linkage_variable_never_share_one_cubin(
    warm: Warm, tmp_path: Path
) -> None:
    # They shared one cubin (one blob): one `counter` object for both, as in test_entry36.
    workload = tmp_path / "w.py"
    workload.write_text(CUDA_OPTION_COUNTERS)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q", "-j", "1")
    assert done.returncode == 0, done.stderr
    kernels = warm.json("stats", bundle)["kernels"]
    blobs = {k["label"]: k["sha256"] for k in kernels if k["arch"] == "sm_90"}
    assert len(blobs) == 2 and blobs["k1"] != blobs["k2"], blobs
