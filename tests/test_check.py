"""`warm check`, the real CLI in a subprocess, over bundles built for real here.

A foreign architecture on the host is written by `ForeignArch` (a test double of the
architecture label only, see test_explain); on CUDA, by a real GPU-less `--arch sm_80`
pre-build with nvcc, checked for sm_90.
"""

from __future__ import annotations

import json
import platform
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm, nvcc_or_skip
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from test_explain import ForeignArch, fake_cc, warm_into

from warmcli.backends.base import DeviceFingerprint
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.host import HostDevice
from warmcli.bundle.store import Bundle
from warmcli.ops.check import check_servable


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


TWICE = """
from warmcli import Kernel

DEVICE = "cuda"
TWICE = Kernel(
    'extern "C" __global__ void twice(float *x, int n) '
    '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }',
    "twice", "Pi", language="cuda",
)

def workload(rt):
    x = rt.buffer(256)
    rt.launch(TWICE, x, 256, grid=1, block=256)
"""


def test_a_bundle_built_here_is_servable_here(warm: Warm, tmp_path: Path) -> None:
    path = warm_into(tmp_path / "here.warm", HostDevice())
    proc = warm("check", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kernel(s), 1 tune(s): every entry is servable here" in proc.stdout
    doc = warm.json("check", path)
    assert doc["servable"] is True and doc["unservable"] == []
    assert doc["devices"][0]["arch"] == platform.machine()


def test_a_foreign_architecture_is_reported(warm: Warm, tmp_path: Path) -> None:
    device = ForeignArch()
    path = warm_into(tmp_path / "foreign.warm", device)
    proc = warm("check", path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "4 not servable here" in proc.stdout
    assert "architecture" in proc.stdout and device.arch in proc.stdout
    doc = warm("check", path, "--json")
    assert doc.returncode == 1
    unservable = json.loads(doc.stdout)["unservable"]
    kernels = [m for m in unservable if m["kind"] == "kernel"]
    assert {m["reason"] for m in kernels} == {"arch"} and len(kernels) == 3
    assert (
        kernels[0]["detail"] == f"bundle has {device.arch}, this machine has {platform.machine()}"
    )
    (tune,) = [m for m in unservable if m["kind"] == "tune"]
    assert tune["reason"] == "device" and tune["detail"].startswith("arch: bundle has")


def test_another_compilers_build_is_servable(warm: Warm, tmp_path: Path) -> None:
    """A host build of another cc runs on this CPU (`warmcli.backends.serving`): servable."""
    path = warm_into(tmp_path / "cc.warm", HostDevice(str(fake_cc(tmp_path))))
    proc = warm("check", path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["unservable"] == []


def test_a_corrupt_blob_is_not_servable(warm: Warm, tmp_path: Path) -> None:
    path = warm_into(tmp_path / "corrupt.warm", HostDevice())
    assert warm("check", path).returncode == 0
    conn = sqlite3.connect(path)
    sha = conn.execute("SELECT sha256 FROM blobs LIMIT 1").fetchone()[0]
    conn.execute("UPDATE blobs SET data = CAST('tampered' AS BLOB) WHERE sha256 = ?", (sha,))
    conn.commit()
    conn.close()
    proc = warm("check", path, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    unservable = json.loads(proc.stdout)["unservable"]
    assert unservable and {m["reason"] for m in unservable} == {"binary"}
    assert all(f"blob {sha[:16]} does not match its sha256" in m["detail"] for m in unservable)
    assert "binary unusable" in warm("check", path).stdout


def _need_two_nvccs() -> tuple[str, str]:
    """The PATH nvcc and the package's, when they are two releases (as on these machines)."""
    from warmcli.backends.cuda.nvcc import _candidates
    from warmcli.backends.toolchain import probe

    first = nvcc_or_skip()
    for _, other in _candidates():
        if other and probe("nvcc", other).version != probe("nvcc", first).version:
            return first, other
    pytest.skip("one nvcc release here: no second toolchain to serve with")


def test_a_two_arch_prebuild_checks_for_one_arch_with_any_nvcc_or_none(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    built_with, other = _need_two_nvccs()
    path = tmp_path / "two.warm"
    run = warm(
        "run", workload_file(TWICE), "--arch", "sm_90", "--arch", "sm_100",
        "--bundle", path, "--nvcc", built_with, "--no-verify",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    for nvcc in (built_with, other, str(tmp_path / "no-nvcc-here")):
        proc = warm("check", path, "--arch", "sm_90", "--nvcc", nvcc, "--json")
        assert proc.returncode == 0, (nvcc, proc.stdout + proc.stderr)
        doc = json.loads(proc.stdout)
        assert doc["not_for_this_machine"] == doc["other_builds"] == 1, doc
        assert (doc["kernels"], doc["builds"]) == (1, 3), doc  # sm_90, sm_100, compute_100
    text = warm("check", path, "--arch", "sm_90", "--nvcc", other).stdout
    line = "1 kernel(s) in 3 build(s), 0 tune(s) (1 build(s) only other architectures use): "
    assert line + "every entry is servable here" in text, text
    # and served so: a replay with the other nvcc compiles nothing
    wl = workload_file(TWICE)
    replay = warm("verify", path, "-w", wl, "--arch", "sm_90", "--nvcc", other)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "compiled 0 kernels" in replay.stdout


def test_pending_tunes_are_not_servable(warm: Warm, tmp_path: Path) -> None:
    nvcc_or_skip()
    path = tmp_path / "pending.warm"
    run = warm(
        "run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "--bundle", path, "--no-verify"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    proc = warm("check", path, "--arch", "sm_90", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert {m["reason"] for m in doc["unservable"]} == {"pending"}
    assert len(doc["unservable"]) == doc["tunes"] > 0


def test_a_missing_bundle_is_one_line_and_exit_2(warm: Warm, tmp_path: Path) -> None:
    proc = warm("check", tmp_path / "nothing.warm")
    assert proc.returncode == 2
    assert proc.stderr.startswith("warm: error: ") and "Traceback" not in proc.stderr


def test_an_sm_80_prebuild_is_not_servable_on_sm_90(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    nvcc_or_skip()
    path = tmp_path / "sm80.warm"
    # Cubins only: with its PTX kept (the default) sm_90 would be served by PTX JIT.
    run = warm(
        "run", workload_file(TWICE), "--arch", "sm_80", "--bundle", path, "--no-verify", "--no-ptx"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert warm("check", path, "--arch", "sm_80").returncode == 0
    proc = warm("check", path, "--arch", "sm_90")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (miss,) = json.loads(warm("check", path, "--arch", "sm_90", "--json").stdout)["unservable"]
    assert (miss["kind"], miss["label"], miss["reason"]) == ("kernel", "twice", "arch")
    assert miss["detail"] == "bundle has sm_80, this machine has sm_90"


_ROW_SUM = "entry = 'row_sum' AND arch = '{arch}'"
_TAMPERED = "ab" * 32  # a blob of its own (a host batch's blob serves its other kernels too)


@pytest.mark.parametrize(
    ("broken", "reason", "said"),
    [
        (None, None, None),  # the control: servable, its other build not for this machine
        (f"UPDATE kernels SET sha256 = '{'0' * 64}' WHERE {{here}}", "binary", "is missing"),
        (f"UPDATE kernels SET sha256 = '{_TAMPERED}' WHERE {{here}}", "binary", "does not match"),
        # a row its components (its key) do not name: README's `corrupt` (`toolchain` to 59)
        ("UPDATE kernels SET toolchain = 'cc:another' WHERE {here}", "corrupt", "names"),
    ],
    ids=["sound", "binary missing", "binary corrupt", "toolchain differs"],
)
def test_an_entry_for_this_machine_it_cannot_serve_is_never_not_for_this_machine(
    made: tuple[Warm, Path],
    tmp_path: Path,
    broken: str | None,
    reason: str | None,
    said: str | None,
) -> None:
    """A kernel with a build for this CPU and one for another arch: its other build is not
    for this machine only while the entry is servable here. When its build here cannot be
    served (its binary missing or corrupt, its toolchain not its key's), the entry is not
    servable, with that reason, and none of its builds is counted as not for this machine."""
    warm, good = made
    path = tmp_path / "two-arch.warm"
    shutil.copyfile(good, path)
    here = _ROW_SUM.format(arch=platform.machine())
    away = "riscv64" if platform.machine() != "riscv64" else "x86_64"
    columns = "device, backend, entry, label, symbol, sha256, toolchain, components, " + (
        "compile_log, seconds, created, last_used"
    )
    conn = sqlite3.connect(path)
    with conn:  # the same kernel built for another arch: a row of its own key
        conn.execute(
            f"INSERT INTO kernels (key, arch, {columns}) "
            # its symbol, warm_<key[:16]>_<entry>, is still its key's (else a corrupt row)
            f"SELECT substr(key, 1, 16) || lower(hex(randomblob(24))), '{away}', {columns} "
            f"FROM kernels WHERE {here}"
        )
        conn.execute(  # its symbol the one warm gives its entry under its key
            "UPDATE kernels SET symbol = 'warm_' || substr(key, 1, 16) || '_' || entry "
            f"WHERE arch = '{away}'"
        )
        conn.execute("INSERT INTO blobs VALUES (?, 1, x'00')", (_TAMPERED,))
        # rows of a warm before integrity35 (no content hash to recompute a key from): the
        # made-up key above, a toolchain changed below, are judged by serving's rules
        conn.execute("UPDATE kernels SET components = json_remove(components, '$.kernel')")
        if broken:
            conn.execute(broken.format(here=here))
    conn.close()
    doc = json.loads(warm("check", "--json", path).stdout)
    text = warm("check", path).stdout
    assert (doc["kernels"], doc["builds"]) == (6, 7), doc  # row_sum built twice
    if broken is None:
        assert doc["servable"] and doc["not_for_this_machine"] == doc["other_builds"] == 1, doc
        other = "(1 build(s) only other architectures use): every entry is servable here"
        assert other in text, text
        return
    (miss,) = doc["unservable"]
    assert (miss["label"], miss["reason"]) == ("row_sum", reason), miss
    assert said in miss["detail"], miss
    assert doc["not_for_this_machine"] == 0 and doc["unservable_count"] == 1, doc
    assert "6 kernel(s) in 7 build(s), 3 tune(s): 1 not servable here" in text, text


class FakeGpuSeen(ArchDevice):
    """Fake for the pure logic of `check_servable`: the compile-only device of `arch` (its
    real compiler) with the fingerprint of a GPU of that arch (`gpu`, its `driver`), which
    no machine here has."""

    def __init__(self, arch: str, gpu: str = "NVIDIA H200", driver: str = "13.0") -> None:
        super().__init__(arch)
        self.gpu, self.driver = gpu, driver

    @property
    def fingerprint(self) -> DeviceFingerprint:
        return DeviceFingerprint("cuda", self.gpu, self.arch, self.driver)


def test_a_gpu_less_pre_builds_tunes_are_named_pending_on_the_gpu(
    warm: Warm, tmp_path: Path
) -> None:
    """On the GPU, the tunes a CI pre-build recorded without one are said to be pending
    (measured by `warm run` there), not a device that differs in name."""
    bundle = tmp_path / "pre.warm"
    doc = warm.json("run", EXAMPLES / "matmul_cuda.py", "--arch", "sm_90", "-b", bundle)
    assert doc["passes"][1]["autotune"]["pending"] == 3
    with Bundle.open(bundle) as opened:
        report = check_servable(opened, [FakeGpuSeen("sm_90")])
    tunes = [m for m in report.unservable if m.kind == "tune"]
    assert len(tunes) == 3 and {m.reason for m in tunes} == {"pending"}
    assert all("pre-built without a GPU for sm_90" in m.detail for m in tunes)
