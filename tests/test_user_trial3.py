"""What a new user, reading only the README, hit in round 3 with workloads of their own.

Through the real CLI in a subprocess, on real files: a workload that asks for
`warmcli.runtime()` itself has what it launches there stored by `warm run`; an `--arch`
pre-build of a tune whose every candidate fails to compile is exit 2 with each
candidate's error, not a pending tune and "the bundle is complete"; `--dask` passes
`--compiler` and `--no-ptx` on to its shards, runs `-m MODULE` from the caller's folder
and verifies it; `--ptx` with `--no-ptx` is refused; under `--json` a workload's prints
go to stderr; an `async def` workload runs to its end; `warm check` and `warm diff` read a
bundle by URL and the writing commands refuse one in one line; a workload that changes
folder keeps a relative `--bundle`; a PyCUDA script run without `--pycuda` where pycuda is
not installed is told of the flag; `--arch` with `--device` named is refused in one line.
"""

from __future__ import annotations

import json
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from dask_cluster import SharedCluster
from test_remote import Store, http_store  # noqa: F401  (a fixture)
from test_user_trial import FAILING_CANDIDATE_CUDA

from warmcli.backends.cuda.nvrtc import find_nvrtc


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


TWO_RUNTIMES = """\
import numpy as np
import warmcli
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")

def workload(rt):
    other = warmcli.runtime("host")
    x = rt.upload(np.ones(4, np.int32))
    rt.launch(INC, x, 4)
    other.launch(DBL, other.upload(np.ones(4, np.int32)), 4)
"""


def test_what_a_workload_launches_on_warmcli_runtime_is_stored(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(TWO_RUNTIMES)
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stored 2 new kernel(s)" in proc.stdout
    proc = warm("verify", bundle_path, "--workload", script, "--quiet")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


ALL_FAIL_CUDA = FAILING_CANDIDATE_CUDA.replace("y[0] += B;", "y[0] += B + BROKEN;")


def test_an_arch_prebuild_whose_every_candidate_fails_to_compile_is_an_error(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    prebuild = ("--arch", "sm_90", "--compiler", "nvrtc", "--no-ptx", "--quiet")
    proc = warm("run", workload_file(ALL_FAIL_CUDA), "-b", bundle_path, *prebuild)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert "every candidate failed" in proc.stderr
    assert proc.stderr.count('identifier "BROKEN" is undefined') == 2, proc.stderr
    assert not bundle_path.exists()


@pytest.fixture(scope="module")
def scheduler(shared_cluster: SharedCluster):
    with shared_cluster.using() as address:
        yield address


def test_dask_shards_build_with_the_compiler_and_ptx_choice_given(
    warm: Warm, scheduler: str, bundle_path: Path
) -> None:
    """`--compiler` and `--no-ptx` were not passed on to the shards: they built with the
    default compiler (NVRTC) and kept PTX."""
    from conftest import EXAMPLES

    from warmcli.backends.cuda.nvcc import locate_nvcc

    try:
        locate_nvcc(None)
    except Exception:
        pytest.skip("nvcc not installed")
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--no-ptx", "--dask", scheduler)
    doc = warm.json("run", EXAMPLES / "saxpy_cuda.py", "-b", bundle_path, *args)
    assert doc["verified"] is True, doc
    stats = warm.json("stats", bundle_path)
    assert {k["arch"] for k in stats["kernels"]} == {"sm_90"}  # no compute_90 PTX
    toolchains = [f["name"] for f in stats["fingerprints"] if f["kind"] == "toolchain"]
    assert toolchains == ["nvcc"]


def test_dask_runs_a_module_from_the_callers_folder_and_verifies_it(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """`-m MODULE --dask`: the shards looked for the module in the worker's folder, and
    the verify pass was skipped (`verified` absent) for a module."""
    (tmp_path / "trialpkg").mkdir()
    (tmp_path / "trialpkg" / "__init__.py").write_text("")
    (tmp_path / "trialpkg" / "wl.py").write_text(TWO_RUNTIMES)
    bundle = tmp_path / "mod.warm"
    proc = warm(
        "run", "-m", "trialpkg.wl", "-b", bundle, "--dask", scheduler, "--json", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["stored"]["kernels"] == 2
    assert doc["passes"][-1]["mode"].startswith("Verify")


def test_ptx_and_no_ptx_together_are_refused(warm: Warm, workload_file, bundle_path: Path) -> None:
    """The synopsis offers `--ptx compute_XX | --no-ptx`; given both, --no-ptx silently won."""
    script = workload_file(TWO_RUNTIMES)
    proc = warm(
        "run", script, "-b", bundle_path, "--arch", "sm_90", "--ptx", "compute_90", "--no-ptx"
    )
    assert proc.returncode == 2
    assert proc.stderr == "warm: error: --ptx keeps PTX, --no-ptx keeps none: give one of them\n"
    assert not bundle_path.exists()


PRINTS = """\
import os
import numpy as np
from warmcli import Kernel

print("loaded")
DEVICE = "host"
K = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    print("hello from the workload")
    os.write(1, b"and from its native side\\n")
    rt.launch(K, rt.upload(np.zeros(4, np.int32)), 4)
"""


def test_under_json_what_the_workload_prints_goes_to_stderr(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`warm run --json` and `warm verify --workload --json` put the workload's prints
    before the JSON object on stdout, so `| jq` failed."""
    script = workload_file(PRINTS)
    for args in (("run", script, "-b", bundle_path), ("verify", bundle_path, "--workload", script)):
        proc = warm(*args, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["verified"] is True
        assert "hello from the workload" in proc.stderr
        assert "and from its native side" in proc.stderr
        assert "loaded" in proc.stderr
    proc = warm("run", script, "-b", bundle_path, "--quiet")  # without --json: on stdout
    assert "hello from the workload" in proc.stdout and proc.stderr == ""


ASYNC = """\
import asyncio
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

async def workload(rt):
    await asyncio.sleep(0)
    rt.launch(K, rt.upload(np.zeros(4, np.int32)), 4)
"""


def test_an_async_workload_is_run_to_its_end(warm: Warm, workload_file, bundle_path: Path) -> None:
    """`async def workload(rt)` was called and never awaited: three RuntimeWarnings, the
    workload "launched nothing", exit 0 with an empty bundle."""
    script = workload_file(ASYNC)
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout and proc.stderr == ""
    proc = warm("verify", bundle_path, "--workload", script, "--quiet")
    assert proc.returncode == 0 and proc.stderr == ""


def test_check_and_diff_read_a_bundle_by_url_and_writers_refuse_one_in_one_line(
    warm: Warm,
    workload_file,
    bundle_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """Production serves `WARM_BUNDLE=https://...`, but `warm check URL` (its preflight)
    and `warm diff` said `http:/host/b.warm: no such bundle` (the URL read as a path), and
    `warm run -b URL`, `clean URL` and `sign URL` named a mangled path too."""
    store, base, _ = http_store
    assert warm("run", workload_file(ASYNC), "-b", bundle_path, "--quiet").returncode == 0
    store.files["/b.warm"] = bundle_path.read_bytes()
    url = f"{base}/b.warm"
    proc = warm("check", url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every entry is servable here" in proc.stdout
    proc = warm("diff", url, bundle_path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["same"] is True
    refused = f"warm: error: {url} is a URL, which is read-only: give a local bundle"
    for args in (("run", workload_file(ASYNC), "-b", url), ("clean", url), ("sign", url)):
        proc = warm(*args, *(("--key", bundle_path) if args[0] == "sign" else ()))
        assert proc.returncode == 2 and proc.stderr.startswith(refused), (args, proc.stderr)


CHDIR = """\
import os
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    os.makedirs("data", exist_ok=True)
    os.chdir("data")  # relative: each pass must start where the first did
    rt.launch(K, rt.upload(np.zeros(4, np.int32)), 4)
"""


def test_a_workload_that_changes_folder_keeps_a_relative_bundle(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`warm run w.py -b rel.warm` of a workload calling os.chdir: 'rel.warm: the bundle
    was removed while open', exit 2; and each pass started in the folder the last left."""
    script = workload_file(CHDIR)
    proc = warm("run", script, "-b", "rel.warm", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout
    assert not (tmp_path / "data" / "data").exists()
    proc = warm("verify", "rel.warm", "--workload", script, "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_pycuda_script_run_without_pycuda_installed_names_the_flag(
    warm: Warm, bundle_path: Path
) -> None:
    """`warm run examples/pycuda_style.py` (the README's PyCUDA example) on a machine
    without pycuda said only `No module named 'pycuda'`."""
    try:
        import pycuda  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pycuda is installed here")
    from conftest import EXAMPLES

    proc = warm("run", EXAMPLES / "pycuda_style.py", "-b", bundle_path)
    assert proc.returncode == 2
    assert proc.stderr.rstrip().endswith(
        "No module named 'pycuda' (a PyCUDA script: warm run --pycuda, and --arch sm_XX "
        "without a GPU)"
    ), proc.stderr


def test_arch_with_a_device_named_is_refused_in_one_line(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`--device host --arch sm_90`: --device was ignored, and a host workload failed at
    its launch with `sm_90 compiles CUDA kernels only, not 'c'`."""
    script = workload_file(TWO_RUNTIMES)
    expected = "warm: error: --arch sm_90 stands in for a GPU: leave out --device host\n"
    proc = warm("run", script, "-b", bundle_path, "--device", "host", "--arch", "sm_90")
    assert (proc.returncode, proc.stderr) == (2, expected)
    assert warm("run", script, "-b", bundle_path, "--quiet").returncode == 0
    proc = warm("verify", bundle_path, "-w", script, "--device", "host", "--arch", "sm_90")
    assert (proc.returncode, proc.stderr) == (2, expected)


def test_dask_verifies_a_pycuda_script(warm: Warm, scheduler: str, bundle_path: Path) -> None:
    """`--pycuda --dask`: the shards warmed the script, but the verify replay ran it without
    warm's PyCUDA modules (exit 2, and a hint to add the --pycuda already given)."""
    from conftest import EXAMPLES

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    args = ("--pycuda", "--arch", "sm_90", "--allow-discarded-reads", "--dask", scheduler)
    proc = warm("run", EXAMPLES / "pycuda_style.py", "-b", bundle_path, *args, "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert json.loads(proc.stdout)["verified"] is True
