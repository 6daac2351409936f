"""GPU-less pre-build for named architectures, for real with nvcc, through the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.cuda.cubin import check_cubin, cubin_functions, cubin_sm
from warmcli.backends.cuda.nvcc import find_nvcc
from warmcli.backends.cuda.ptx import ptx_header
from warmcli.backends.host import HostDevice
from warmcli.backends.toolchain import ToolchainError
from warmcli.bundle.store import Bundle

try:
    find_nvcc()
except ToolchainError as exc:  # pragma: no cover - make test installs nvcc
    pytest.skip(f"nvcc not found: {exc}", allow_module_level=True)

MATMUL = EXAMPLES / "matmul_cuda.py"


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    import os
    import subprocess
    import sys

    path = tmp_path_factory.mktemp("prebuild") / "cuda.warm"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warmcli",
            "run",
            str(MATMUL),
            "--arch",
            "sm_80",
            "--arch",
            "sm_90",
            "--jobs",  # batches as on 2 cores (more cores: fewer kernels a process)
            "2",
            "--bundle",
            str(path),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    return path, json.loads(proc.stdout)


def test_prebuild_compiles_every_kernel_for_both_archs_in_few_processes(prebuilt) -> None:
    _, doc = prebuilt
    first, second, verify = doc["passes"]
    assert first["compilation"]["queued"] == 16 and first["compilation"]["compiled"] == 0
    c = second["compilation"]
    assert c["compiled"] == 16 and c["failed"] == 0
    assert c["compiler_processes"] < c["compiled"], "fewer nvcc processes than kernels"
    assert second["autotune"]["pending"] == 6 and second["autotune"]["measured"] == 0
    assert verify["mode"] == "Verify (CompileOnly)"
    assert verify["compilation"]["queued"] == 0 and doc["verified"] is True


def test_every_stored_kernel_is_a_cubin_for_its_arch(prebuilt) -> None:
    path, _ = prebuilt
    with Bundle.open(path) as bundle:
        kernels = bundle.kernels()
        # Cubins for both archs, PTX for the highest only (what a newer GPU is served).
        assert sorted({k.arch for k in kernels}) == ["compute_90", "sm_80", "sm_90"]
        for arch in ("sm_80", "sm_90", "compute_90"):
            mine = [k for k in kernels if k.arch == arch]
            assert {k.entry for k in mine} == {"matmul", "bias_relu", "row_sum"}
            assert len(mine) == 8, "six matmul candidates and two kernels"
        for k in kernels:
            blob = bundle.blob(k.sha256)
            if k.arch == "compute_90":
                assert ptx_header(blob)[1:] == (90, "") and k.symbol.encode() in blob
                continue
            assert blob[:4] == b"\x7fELF"
            assert int.from_bytes(blob[18:20], "little") == 190, "e_machine EM_CUDA"
            check_cubin(blob, k.arch)
            assert f"sm_{cubin_sm(blob)}" == k.arch
            assert k.symbol in cubin_functions(blob)
        tunes = bundle.tunes()
        assert len(tunes) == 6
        assert all(t.status == "pending" and t.pick is None for t in tunes)
        assert all(len(t.candidates) == 6 for t in tunes)


def test_stats_lists_the_pending_tunes(prebuilt, warm: Warm) -> None:
    path, _ = prebuilt
    doc = warm.json("stats", path)
    assert {t["status"] for t in doc["tunes"]} == {"pending"}
    assert {k["arch"] for k in doc["kernels"]} == {"sm_80", "sm_90", "compute_90"}


def test_rerun_over_the_bundle_compiles_nothing(prebuilt, warm: Warm, tmp_path: Path) -> None:
    path, _ = prebuilt
    copy = tmp_path / "copy.warm"
    copy.write_bytes(path.read_bytes())
    doc = warm.json("run", MATMUL, "--arch", "sm_90", "--bundle", copy)
    first, second = doc["passes"][:2]
    assert first["compilation"]["queued"] == 0, "everything is in the bundle"
    assert second["compilation"]["compiled"] == 0
    # the two launched kernels, and the 6 candidates of the pending tunes, whose launch
    # functions run again, discarded (test_review41b): loaded, not compiled; still pending
    assert second["compilation"]["loaded"] == 8, second["compilation"]
    assert second["autotune"]["measured"] == 0


def test_a_machine_without_nvcc_is_served_from_the_bundle(prebuilt) -> None:
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.warming.workload import load_workload

    path, _ = prebuilt
    workload = load_workload(MATMUL)
    with Bundle.open(path) as bundle:
        rt = Runtime(ArchDevice("sm_90", nvcc="/nonexistent/nvcc"), bundle)
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
            workload.run(rt, "CompileOnly")
        assert collector.reader().compilation.queued == 0


def test_host_serving_without_a_c_compiler(tmp_path: Path) -> None:
    kernel = Kernel(
        "void twice(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "twice", "Pi"
    )
    path = tmp_path / "h.warm"
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.launch(kernel, rt.buffer(3), 3)
    with Bundle.open(path, write=True) as bundle:
        rt.persist(bundle)
    rt.close()
    with Bundle.open(path) as bundle:
        serving = Runtime(HostDevice(cc="/nonexistent/cc"), bundle)
        buf = serving.upload(np.array([1, 2, 3], dtype=np.float32))
        serving.launch(kernel, buf, 3)
        assert serving.read(buf).tolist() == [2.0, 4.0, 6.0]
        other = Kernel("void other(float *x) { x[0] = 1; }", "other", "P")
        with pytest.raises(ToolchainError, match="not found"):
            serving.launch(other, buf)
        serving.close()


def test_allowed_discarded_reads_are_allowed_in_the_compile_only_verify_pass(
    tmp_path: Path, workload_file
) -> None:
    """`--allow-discarded-reads` holds for every pass: on a GPU-less device the verify pass
    runs under CompileOnly, where a read is discarded too, and must not fail the run."""
    import warnings

    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.errors import DiscardedReadWarning
    from warmcli.warming.passes import warm_bundle
    from warmcli.warming.workload import load_workload

    path = workload_file(
        "from warmcli import Kernel\n"
        "FILL = Kernel('extern \"C\" __global__ void fill(float *x) { x[threadIdx.x] = 1; }', "
        '"fill", "P", language="cuda")\n'
        "def workload(rt):\n"
        "    x = rt.buffer(32)\n"
        "    rt.launch(FILL, x, block=32)\n"
        "    rt.read(x)\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DiscardedReadWarning)
        report = warm_bundle(
            load_workload(path),
            lambda: [ArchDevice("sm_90")],
            tmp_path / "reads.warm",
            allow_discarded_reads=True,
        )
    verify = report.passes[-1]
    assert verify.mode == "Verify (CompileOnly)" and report.verified is True
    assert verify.total.execution.discarded_reads == 1


def test_compile_only_verify_names_a_missing_tune(prebuilt, warm: Warm, tmp_path: Path) -> None:
    import sqlite3

    path, _ = prebuilt
    copy = tmp_path / "copy.warm"
    copy.write_bytes(path.read_bytes())
    assert warm("verify", copy, "--workload", MATMUL, "--arch", "sm_90").returncode == 0
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM tunes WHERE rowid = (SELECT min(rowid) FROM tunes)")
    conn.commit()
    conn.close()
    proc = warm("verify", copy, "--workload", MATMUL, "--arch", "sm_80", "--arch", "sm_90")
    assert proc.returncode == 1
    assert "1 tune(s) reached, not recorded in the bundle" in proc.stdout
