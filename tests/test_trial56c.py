"""Trial 56c: a production process's tries at warm, from the README, then an attacker's.

A process that ignores SIGCHLD (a daemon's idiom; an ignored signal stays ignored across exec, so
a service started by such a parent inherits it) has its children reaped by the kernel: Python
reads every child's exit status as 0. A host kernel that failed to compile in such a process was
taken for a C compiler that builds nothing (`ToolchainError: ... WARM_CC must name a C compiler`),
not the kernel's compile failure: a launch raised the wrong error, without cc's diagnostics, and a
tune with one candidate that does not compile failed whole, where every other process excludes
that candidate; an nvcc failure there said only `nvcc wrote no out.cubin`, not nvcc's diagnostics.
A process whose working folder was removed (a release folder a deploy replaced) raised a bare
`FileNotFoundError` for a relative bundle path (not the `BundleError` the README's fallback
catches), and a `ScratchError` blaming /tmp for a header a relative `-I` did not find. A `spawn` or
`forkserver` worker gets no `use_bundle` of its parent's: the README now says so, and how.
Real parts: the real cc and nvcc, the real CLI, real production processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import Warm, nvcc_or_skip

IGNORING = """
import json, signal
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
SRC = "void sc(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; TAIL }"
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)
rt = warmcli.runtime("host")
x = rt.upload(np.arange(4, dtype=np.float32))
"""
LAUNCH = (
    IGNORING
    + """
try:
    rt.launch(Kernel(SRC, "sc", "Pi", defines={"TAIL": "oops"}), x, 4)
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""
)
TUNE = (
    IGNORING
    + """
T = Tunable("sc", {name: Kernel(SRC, "sc", "Pi", defines={"TAIL": tail})
                   for name, tail in (("ok", ""), ("broken", "oops"))}, launch)
rt.tune(T, x, 4)
print(json.dumps(rt.read(x).tolist()))
"""
)


def test_a_kernel_that_fails_to_compile_where_sigchld_is_ignored_is_its_compile_failure(
    warm: Warm,
) -> None:
    name, message = warm.production(LAUNCH)
    assert name == "KernelCompileError", message  # was ToolchainError
    assert "oops" in message and "WARM_CC must name" not in message


def test_a_tune_where_sigchld_is_ignored_excludes_the_candidate_that_fails_to_compile(
    warm: Warm,
) -> None:
    assert warm.production(TUNE) == [0.0, 2.0, 4.0, 6.0]  # was ToolchainError, the tune failed


POOL = """
import concurrent.futures as cf, hashlib, json, multiprocessing as mp, sys, warmcli, svc
def job(i):
    digest = hashlib.sha256(svc.one(warmcli.runtime("host"), i)).hexdigest()
    said = str(warmcli.report())
    cold = "no bundle is loaded: this process compiled" in said and "compiled 0 " not in said
    return digest, "served" if "served everything" in said else "cold" if cold else said
if __name__ == "__main__":
    warmcli.use_bundle(sys.argv[1])
    given = {"initializer": warmcli.use_bundle, "initargs": (sys.argv[1],)}
    context = mp.get_context("forkserver")
    kw = given if sys.argv[2] == "init" else {}
    with cf.ProcessPoolExecutor(1, mp_context=context, **kw) as pool:
        print(json.dumps([list(row) for row in pool.map(job, range(4))]))
"""


def test_a_forkserver_worker_serves_the_bundle_its_initializer_names_as_the_readme_says(
    warm: Warm, served: Path
) -> None:
    """A `use_bundle` under `__main__` reaches no `forkserver` worker (it runs cold, the same
    results); one made by the pool's initializer serves it (README, Pre-fork servers)."""
    (served.parent / "pool.py").write_text(POOL)

    def pool(how: str) -> list[list[str]]:
        done = subprocess.run(
            [sys.executable, "pool.py", str(served), how],
            capture_output=True,
            text=True,
            env=warm.env,
            cwd=served.parent,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    cold, hot = pool("none"), pool("init")
    assert [h for h, _ in cold] == [h for h, _ in hot]  # the same results
    assert {how for _, how in cold} == {"cold"}
    assert {how for _, how in hot} == {"served"}


GONE = """
import json, os, tempfile, warmcli
os.chdir(folder := tempfile.mkdtemp())
os.rmdir(folder)  # (a release folder a deploy replaced under a running service)
try:
    warmcli.use_bundle("b.warm")
except warmcli.BundleError as exc:  # the README's pattern: log it, go on cold
    warmcli.use_bundle(None)
    print(json.dumps(str(exc)))
"""


def test_a_relative_bundle_path_from_a_removed_working_folder_is_a_bundle_error(
    warm: Warm,
) -> None:
    said = warm.production(GONE)  # was FileNotFoundError: [Errno 2] (no path), not caught
    assert said.startswith("b.warm: a relative path") and "working folder was removed" in said


GONE_HEADER = """
import json, os, tempfile
import numpy as np
import warmcli
os.chdir(folder := tempfile.mkdtemp())
os.rmdir(folder)
rt = warmcli.runtime("host")
x = rt.upload(np.zeros(1, dtype=np.float32))
source = '#include "h.h"\\nvoid k(float *x) { x[0] = 1; }'
try:
    rt.launch(warmcli.Kernel(source, "k", "P", options=("-Iinc",)), x)
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""


def test_a_header_not_found_under_a_relative_include_of_a_removed_folder_is_a_compile_error(
    warm: Warm,
) -> None:
    name, message = warm.production(GONE_HEADER)
    assert name == "KernelCompileError", message  # was ScratchError: "/tmp refused ..."
    assert "h.h" in message and "-Iinc names no folder" in message
    assert "which was removed" in message


CUDA_IGNORING = """
import signal
import numpy as np
from warmcli import Kernel
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
DEVICE = "cuda"
BAD = Kernel('extern "C" __global__ void bad(float *x) { x[0] = 1 }', "bad", "P", language="cuda")
def workload(rt):
    try:
        rt.launch(BAD, rt.upload(np.zeros(1, np.float32)), grid=(1,), block=(1,))
    except Exception as exc:
        print("caught", type(exc).__name__, repr(str(exc)))
"""


def test_an_nvcc_failure_where_sigchld_is_ignored_keeps_nvccs_diagnostics(
    warm: Warm, workload_file
) -> None:
    nvcc_or_skip()
    path = workload_file(CUDA_IGNORING)
    done = warm.with_env(WARM_CUDA_COMPILER="nvcc")("run", path, "--arch", "sm_90", "--no-verify")
    caught = [line for line in done.stdout.splitlines() if line.startswith("caught")]
    assert caught and "KernelCompileError" in caught[0], done.stdout + done.stderr
    assert "expected a" in caught[0], caught[0]  # nvcc's own diagnostic
    assert "wrote no out.cubin" not in caught[0]  # (it was all it said)
