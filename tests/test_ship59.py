"""Trial 59 of the README's less-travelled paths (`-m` given a path, a namespace package):
the real CLI in a subprocess, each case refused in one line that names the `-m` that works."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm

ROOT = Path(__file__).parents[1]


def _refused(done: subprocess.CompletedProcess[str], said: str) -> str:
    """One line on stderr holding `said`, exit 2 (so no traceback); that line."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    return lines[0]


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A package `app` whose folder `sub` has no `__init__.py` (a namespace package) and a
    module `app/sub/warmup.py` defining the workload, with a relative import."""
    (tmp_path / "app" / "sub").mkdir(parents=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "kern.py").write_text("def go(rt):\n    pass\n")
    (tmp_path / "app" / "sub" / "warmup.py").write_text(
        "from ..kern import go\n\ndef workload(rt):\n    go(rt)\n"
    )
    return tmp_path


@pytest.mark.parametrize("given", ["app/sub/warmup.py", "app/sub/warmup", "./app/sub/warmup.py"])
def test_a_path_given_to_m_is_told_its_dotted_name(warm: Warm, app: Path, given: str) -> None:
    """`warm run -m app/sub/warmup.py` (a path, as a shell completes it) is told the module's
    name, `-m app.sub.warmup` (before: `or -m app/sub/warmup`, itself refused as `no such
    workload module`; and `-m app/sub/warmup` was told nothing)."""
    warm = warm.with_env(PYTHONPATH=str(ROOT))
    line = _refused(warm("run", "-m", given, "-b", app / "b.warm", cwd=app), "-m app.sub.warmup")
    assert "-m app/" not in line and "-m ./" not in line
    assert "app/sub/warmup.py" in line  # the file itself, to give without -m


def test_a_module_s_file_name_given_to_m_is_told_its_module(warm: Warm, app: Path) -> None:
    """`warm run -m app.kern.py` is told `-m app.kern`, as `-m w.py` is told `-m w`."""
    warm = warm.with_env(PYTHONPATH=str(ROOT))
    _refused(warm("run", "-m", "app.kern.py", cwd=app), "not -m, or -m app.kern)")


def test_a_namespace_package_is_no_missing_module(warm: Warm, app: Path) -> None:
    """`warm run -m app.sub`, a folder with no `__init__.py` nor `__main__.py` (a namespace
    package, which `python -m app.sub` calls a package that cannot be executed): said so,
    naming its modules that define a workload, as for a package with an `__init__.py`
    (before: `app.sub: no such workload module`, where it lay)."""
    warm = warm.with_env(PYTHONPATH=str(ROOT))
    line = _refused(warm("run", "-m", "app.sub", "-b", app / "b.warm", cwd=app), "app.sub: ")
    assert "no such" not in line
    assert "(its modules that define one: -m app.sub.warmup)" in line


FORKS_EACH_PASS = """
import os
import numpy as np
from warmcli import Kernel

OWN = Kernel("void own(float *x, int n) { x[0] = 1; }", "own", "Pi")
KID = Kernel("void kid(float *x, int n) { x[0] = 2; }", "kid", "Pi")


def workload(rt):
    x = rt.upload(np.zeros(2, np.float32))
    rt.launch(OWN, x, 2)
    pid = os.fork()
    if pid == 0:
        rt.launch(KID, x, 2)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_the_forked_children_note_counts_every_pass_s_children(warm: Warm, tmp_path: Path) -> None:
    """A workload forking one child a pass, each launching: the one note, said by the first
    pass and naming all three, counts the three children (before: `1 child process(es) ...
    (pid N) launched or tuned during CompileOnly, CompileAndAutotune and Verify`, one pid for
    three passes' children)."""
    (tmp_path / "forks.py").write_text(FORKS_EACH_PASS)
    done = warm("run", tmp_path / "forks.py", "-b", tmp_path / "f.warm", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "child process(es)" in line]
    assert len(said) == 1, done.stdout
    assert said[0].startswith("  note: 3 child process(es) the workload forked (pid "), said
    assert ", ...) launched or tuned during CompileOnly, CompileAndAutotune and Verify" in said[0]


SAXPY_CUDA = """
import numpy as np
from warmcli import Kernel

SAX = Kernel(
    'extern "C" __global__ void sax(float *x, float a, int n) {'
    " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }",
    "sax",
    "Pfi",
    language="cuda",
)


def workload(rt):
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(SAX, x, np.float32(2), 4, grid=(1,), block=(32,))
"""


def test_a_clean_by_age_after_a_run_keeps_the_ptx_of_the_cubins_it_used(
    warm: Warm, tmp_path: Path
) -> None:
    """README's CI cache: `warm clean --older-than 7d` after `warm run`, which stamps what it
    used. A pre-build `--arch sm_90` keeps each kernel's PTX (`compute_90`) beside its cubin,
    for newer GPUs; a later run loads the cubin only, so the PTX was never stamped and the
    clean removed it as unused (before: `Would remove ... not used in the last 1d: sax sm_90
    compute_90`), the next run building it again and the bundle shipped meanwhile lacking
    it. Now a PTX build is used when its cubin is. (Rows aged by their stored times, no
    waiting.)"""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    (tmp_path / "sax.py").write_text(SAXPY_CUDA)
    bundle = tmp_path / "ci.warm"
    done = warm("run", tmp_path / "sax.py", "-b", bundle, "--arch", "sm_90", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(bundle) as conn:  # built 3 days ago (a cache restored a job later)
        conn.execute(
            "UPDATE kernels SET created = created - 259200, last_used = last_used - 259200"
        )
        archs = sorted(arch for (arch,) in conn.execute("SELECT arch FROM kernels"))
    conn.close()
    assert archs == ["compute_90", "sm_90"], archs
    again = warm("run", tmp_path / "sax.py", "-b", bundle, "--arch", "sm_90", "-q")
    assert again.returncode == 0 and "stored 0 new kernel(s)" in again.stdout, again.stdout
    clean = warm("clean", bundle, "--older-than", "1d", "--dry-run")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "compute_90" not in clean.stdout and "would remove 0 kernel(s)" in clean.stdout, (
        clean.stdout
    )


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_merge_onto_a_read_only_mount_says_so(warm: Warm, tmp_path: Path) -> None:
    """README's library and CI-cache paths: `warm merge ... -o OUT` where OUT's folder is a
    read-only mount (an installed library's bundle, a restored cache). Said `its folder is not
    writable by you`, which no `chmod` (and, as root, nothing) would mend; now it names the
    read-only file system, as the write lock's refusal does. Nothing is written."""
    from full_disk import in_private_mount, one_line

    (tmp_path / "w.py").write_text("def workload(rt):\n    pass\n")
    src = tmp_path / "in.warm"
    done = warm("run", tmp_path / "w.py", "-b", src, "--no-verify", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    out = ro / "out.warm"
    merge = f"{sys.executable} -m warmcli merge {src} -o {out}"
    script = f"mount --bind -o ro {ro} {ro} || exit 99; {merge}"
    line = one_line(in_private_mount(script, dict(warm.env, PYTHONPATH=str(ROOT)), cwd=tmp_path))
    assert "read-only file system" in line and "by you" not in line, line
    assert line.endswith("nothing was merged"), line
    assert list(ro.iterdir()) == []
