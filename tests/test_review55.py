"""Faults review55 found trying warm as users and attackers would, each failing before its fix.

A workload that names its include folder in `CPATH` itself (`os.environ["CPATH"] = ...`) after
its first kernel was keyed: `kernel._env_includes` read `CPATH` once a process, so the kernels
keyed after it kept the first value (unset: no header keyed), while cc, started later, read the
variable as set: the header an edit changed was served the old build (101 where a cold start
computes 105). Real parts: the real CLI (forked) warms with the real cc, a real production
process serves.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_readme54 import SERVE

# A plain kernel keyed first (CPATH unset then), then one including `cfg.h` from the folder
# the workload names in CPATH itself.
CPATH_SET_LATE = """
import os
from warmcli import Kernel
DEVICE = "host"
INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc")
PLAIN = Kernel("void hundred(int *y) { y[0] = 100; }", "hundred", "P")
CFG = Kernel('#include "cfg.h"\\nvoid cfg(int *y) { y[0] += K; }', "cfg", "P")
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(PLAIN, y)
    os.environ["CPATH"] = INC
    rt.launch(CFG, y)
    return [y]
"""


def test_a_header_found_through_cpath_set_after_the_first_key_is_keyed(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: the edited `cfg.h` (K 5) was served the build of K 1: 101, where cold 105."""
    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "cfg.h"
    header.write_text("#define K 1\n")
    path, bundle = workload_file(CPATH_SET_LATE), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr
    assert warm.production(SERVE, path, bundle=bundle) == [101]
    header.write_text("#define K 5\n")
    assert warm.production(SERVE, path) == [105]  # cold
    assert warm.production(SERVE, path, bundle=bundle) == [105]


# Two kernels including `cfg.h`, each launched under a CPATH of its own that the workload sets;
# the second pass's first launch compiles the queue, both, under the first's CPATH.
CPATH_PER_KERNEL = """
import os
from warmcli import Kernel
DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = '#include "cfg.h"\\nvoid %s(int *y) { y[0] += %d * K; }'
ONE, TEN = Kernel(SRC % ("one", 1), "one", "P"), Kernel(SRC % ("ten", 10), "ten", "P")
def workload(rt):
    y = rt.buffer(1, "int32")
    os.environ["CPATH"] = os.path.join(HERE, "x")
    rt.launch(ONE, y)
    os.environ["CPATH"] = os.path.join(HERE, "y")
    rt.launch(TEN, y)
    return [y]
"""


def test_a_kernel_queued_under_one_cpath_is_built_under_it(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before the first fix: `ten`, keyed by x's `cfg.h` (CPATH read once), was served the build
    of x's K 1 (11 where a cold start computes 21); after it, before this: the batch built `ten`
    under the CPATH of its run (x), so it was never stored ('a header it includes changed
    between its key and its compile') and `warm run` exited 1 (`miss: kernel ten`)."""
    for folder, value in (("x", 1), ("y", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cfg.h").write_text(f"#define K {value}\n")
    path, bundle = workload_file(CPATH_PER_KERNEL), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [21]  # cold
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "never served" not in done.stderr
    assert warm.production(SERVE, path, bundle=bundle) == [21]


# A C compiler that is a wrapper script adding `$MYFLAGS` (its variables key its builds), the
# workload setting `MYFLAGS` for one kernel's launch only, as a context manager would.
WRAPPER = '#!/bin/sh\nexec cc $MYFLAGS "$@"\n'
FLAGS_FOR_ONE = """
import os
from warmcli import Kernel
DEVICE = "host"
PLAIN = Kernel("void hundred(int *y) { y[0] = 100; }", "hundred", "P")
ADD = Kernel("void add(int *y) { y[0] += K; }", "add", "P")
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(PLAIN, y)
    os.environ["MYFLAGS"] = "-DK=2"
    rt.launch(ADD, y)
    os.environ["MYFLAGS"] = "-DK=1"
    return [y]
"""


def test_a_kernel_is_built_in_the_environment_it_was_launched_in(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: `add`, queued while `MYFLAGS` said K 2 (a cold start builds it so: 102), was
    built by the second pass's batch under K 1, the value restored before it ran, and served
    so (101): its key, the wrapper's identity, was asked once, before either."""
    (cc := tmp_path / "mycc").write_text(WRAPPER)
    cc.chmod(0o755)
    warm = warm.with_env(WARM_CC=str(cc), MYFLAGS="-DK=1")
    path, bundle = workload_file(FLAGS_FOR_ONE), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [102]  # cold
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr + done.stdout
    assert warm.production(SERVE, path, bundle=bundle) == [102]


def test_a_queued_unit_keeps_its_environment_out_of_its_repr(monkeypatch) -> None:
    """What a unit keeps of the environment (a credential may be in it) is never shown."""
    from warmcli.backends.compiler import CompileUnit
    from warmcli.errors import CompileFailure
    from warmcli.kernel import Kernel

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    unit = CompileUnit.queued("k" * 64, Kernel("void f(int *y) { }", "f", "P"), "x86_64")
    assert ("AWS_SECRET_ACCESS_KEY", "s3cr3t-value") in unit.environ
    assert "s3cr3t-value" not in repr(unit) + repr(CompileFailure("log", (unit,)))


# As FLAGS_FOR_ONE, but the workload leaves `MYFLAGS` set and its first kernel reads it too.
FLAGS_LEFT_SET = """
import os
from warmcli import Kernel
DEVICE = "host"
FIRST = Kernel("void first(int *y) { y[0] = 100 * K; }", "first", "P")
ADD = Kernel("void add(int *y) { y[0] += K; }", "add", "P")
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(FIRST, y)
    os.environ["MYFLAGS"] = "-DK=2"
    rt.launch(ADD, y)
    return [y]
"""


def test_each_pass_starts_in_the_environment_the_first_did(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: the second pass started with `MYFLAGS=-DK=2` left set by the first, so `first`,
    launched (and built) before the workload sets it, was built with K 2 and served so: 202
    where a cold start computes 102."""
    (cc := tmp_path / "mycc").write_text(WRAPPER)
    cc.chmod(0o755)
    warm = warm.with_env(WARM_CC=str(cc), MYFLAGS="-DK=1")
    path, bundle = workload_file(FLAGS_LEFT_SET), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [102]  # cold
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr + done.stdout
    assert warm.production(SERVE, path, bundle=bundle) == [102]


def two_cuda_kernels(second: tuple[str, str], between: str, after: str = "") -> str:
    """A CUDA workload: kernel `one` adds 1, then `between` runs (a statement), then the kernel
    `second` names (its entry, what it adds) is launched, then `after` runs."""
    name, adds = second
    return f"""
import os
from warmcli import Kernel
DEVICE = "cuda"
SRC = 'extern "C" __global__ void %s(float *x) {{ x[threadIdx.x] += %s; }}'
ONE, TWO = Kernel(SRC % ("one", "1"), "one", "P", language="cuda"), Kernel(
    SRC % ({name!r}, {adds!r}), {name!r}, "P", language="cuda"
)
def workload(rt):
    x = rt.buffer(4, "float32")
    rt.launch(ONE, x, grid=(1, 1, 1), block=(4, 1, 1))
    {between}
    rt.launch(TWO, x, grid=(1, 1, 1), block=(4, 1, 1))
    {after}
"""


# Two CUDA kernels, `NVCC_APPEND_FLAGS` set between them (after nvcc's identity was asked, once).
NVCC_FLAGS_LATE = two_cuda_kernels(("kay", "K"), 'os.environ["NVCC_APPEND_FLAGS"] = "-DK=2"')


def test_a_kernel_built_under_flags_its_key_never_read_is_refused_for_that(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """`kay`, keyed by nvcc's identity asked before the workload set `NVCC_APPEND_FLAGS`, is built
    with the flag (as a cold start builds it): its build is not of its key, never stored, and
    said so. Before: `one` (launched before the flag) was refused too, both said to include a
    header that changed; with units built in their environment but the identity asked as the
    batch ran, `kay` was stored, a hit for a process whose flag says K 3."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    path, bundle = workload_file(NVCC_FLAGS_LATE), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--arch", "sm_90", "--compiler", "nvcc")
    assert done.returncode == 1, done.stderr + done.stdout  # `kay` missed, as it must
    assert "kernel kay: not stored: never served (its compiler's settings changed" in done.stdout
    assert "kernel one: not stored" not in done.stdout
    assert "miss: kernel kay" in done.stdout + done.stderr
    assert "miss: kernel one" not in done.stdout + done.stderr


# A kernel computing a macro a specs file may define, launched with LIBRARY_PATH set around it,
# after a plain kernel whose launch in the second pass compiles the queue (LIBRARY_PATH unset).
SPECS_AROUND_ONE = """
import os
from warmcli import Kernel
DEVICE = "host"
LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
PLAIN = Kernel("void zero(long *o) { o[0] = 0; }", "zero", "P")
K = Kernel("#ifndef R55\\n#define R55 1\\n#endif\\nvoid f(long *o) { o[0] = R55; }", "f", "P")
def workload(rt):
    o = rt.buffer(1, "int64")
    rt.launch(PLAIN, o)
    os.environ["LIBRARY_PATH"] = LIB
    rt.launch(K, o)
    del os.environ["LIBRARY_PATH"]
    return [o]
"""


def test_a_compile_reads_the_environment_its_units_were_queued_in(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """The refusal of a specs file cc reads in a `LIBRARY_PATH` folder (test_review51c) asked
    `LIBRARY_PATH` as the batch ran, not as `f` was queued: built with the specs file's R55 7
    and stored (exit 0) where it is refused at a cold start's launch."""
    import subprocess

    import pytest

    dumped = subprocess.run(["cc", "-dumpspecs"], capture_output=True, text=True)
    if dumped.returncode != 0 or "*cpp:\n" not in dumped.stdout:
        pytest.skip("cc is no gcc (it has no specs)")
    head, _, rest = dumped.stdout.partition("*cpp:\n")
    line, _, tail = rest.partition("\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "specs").write_text(f"{head}*cpp:\n{line} -DR55=7\n{tail}")
    path, bundle = workload_file(SPECS_AROUND_ONE), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "-q")
    said = " ".join((done.stderr + done.stdout).split())
    assert done.returncode != 0, said
    assert "cc reads the specs file" in said and "Traceback" not in said, said
