"""Review of minor version compatibility (serving31): what each consumer of the serving
rule does with a cubin served on any driver of its major release and PTX only on its own.

No GPU here: a production device with a driver is an `--arch` device whose driver is
stated (`Stated`), as `warm check --driver` states it; its compiler is real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip, nvrtc_release_or_skip, this_warms
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_explain import warm_into

from bench import generated, start, suite
from bench.rows import TINY
from warmcli import Kernel
from warmcli.backends.base import DeviceFingerprint
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.bundle.store import Bundle
from warmcli.errors import StrictMissError
from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride
from warmcli.execution.statistics import StatisticsCollector
from warmcli.ops.clean import Machine, plan_clean
from warmcli.records import KernelRecord
from warmcli.runtime.misses import MissPolicy, Strictness
from warmcli.runtime.runtime import Runtime

TOUCH = Kernel(
    'extern "C" __global__ void touch(int *p) { p[0] = 1; }', "touch", "P", language="cuda"
)


class Stated(ArchDevice):
    """An `--arch` device whose CUDA driver is stated (the fleet's), not absent."""

    def __init__(self, arch: str, driver: str, compiler: str) -> None:
        super().__init__(arch, compiler=compiler)
        self.driver = driver

    @property
    def fingerprint(self) -> DeviceFingerprint:
        return DeviceFingerprint("cuda", "stated", self.arch, self.driver)


def _nvrtc_bundle(path: Path) -> Path:
    """TOUCH pre-built for sm_90 by NVRTC (13.5 here), as `warm run --arch` stores it."""
    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    nvcc_or_skip()
    with Bundle.open(path, write=True) as bundle, ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        rt = Runtime(ArchDevice("sm_90", compiler="nvrtc"), bundle, misses=None)
        rt.launch(TOUCH, rt.buffer(4, "int32"), grid=1, block=1)
        rt.kernels.flush()
        rt.persist(bundle)
        rt.close()
    return path


def _serve(path: Path, device: Stated, policy: MissPolicy) -> StatisticsCollector:
    collector = StatisticsCollector()
    with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector):
        rt = Runtime(device, bundle, misses=policy)
        try:
            rt.launch(TOUCH, rt.buffer(4, "int32"), grid=1, block=1)
        finally:
            rt.close()
    return collector


def test_a_build_the_driver_refuses_is_explained_by_the_driver(tmp_path: Path) -> None:
    # NVRTC 13.5's cubin on a 12.8 driver, served by a process whose compiler is nvcc: the
    # bundle holds the build, its release is what refuses it (not "parameter letters")
    major, minor = nvrtc_release_or_skip()
    path = _nvrtc_bundle(tmp_path / "rtc.warm")
    older = f"{major - 1}.8"
    reader = _serve(path, Stated("sm_90", older, "nvcc"), MissPolicy()).reader()
    ((reason, detail),) = [(m.reason, m.detail) for m in reader.misses()]
    assert reason == "toolchain", detail
    assert f"built by CUDA {major}.{minor}, the driver supports CUDA {older}" in detail
    assert reader.compilation.queued == 1  # rebuilt here, not an error


def test_strict_mode_names_the_driver_as_the_reason(tmp_path: Path) -> None:
    major, _ = nvrtc_release_or_skip()
    path = _nvrtc_bundle(tmp_path / "rtc.warm")
    with pytest.raises(StrictMissError, match=rf"driver supports CUDA {major - 1}\.8"):
        _serve(path, Stated("sm_90", f"{major - 1}.8", "nvcc"), MissPolicy(strict=Strictness.RAISE))


def test_a_newer_minor_release_is_served_by_another_toolchains_process(tmp_path: Path) -> None:
    major, _ = nvrtc_release_or_skip(older_minor=True)
    path = _nvrtc_bundle(tmp_path / "rtc.warm")
    reader = _serve(path, Stated("sm_90", f"{major}.0", "nvcc"), MissPolicy()).reader()
    assert reader.misses() == [] and reader.compilation.queued == 0


NVCC = "nvcc:Cuda compilation tools, release {}, V{}.1"


def _build(arch: str, release: str) -> KernelRecord:
    toolchain = this_warms(NVCC.format(release, release))
    parts = {"toolchain": toolchain, "arch": arch, "source": "s", "options": "[]"}
    return KernelRecord(
        f"k{arch}{release}", f"cuda|{arch}", "cuda", arch, "touch", "touch", "touch",
        f"sha{arch}{release}", toolchain, parts, size=10,
    )  # fmt: skip


def _machine(release: str, gpu: str, driver: str) -> Machine:
    toolchains = {"nvcc": this_warms(NVCC.format(release, release))}
    backends, gpus = frozenset({"host", "cuda"}), frozenset({(gpu, driver)})
    return Machine(toolchains, "x86_64", frozenset(), backends, gpus)


@pytest.mark.parametrize(
    ("local", "other", "gpu", "driver"),
    [
        (_build("compute_90", "13.5"), _build("compute_90", "13.0"), "sm_100", "13.0"),  # PTX
        (_build("sm_90", "13.0"), _build("sm_90", "12.8"), "sm_90", "12.8"),  # older major
    ],
)
def test_clean_keeps_the_build_this_driver_serves_when_its_own_toolchains_is_refused(
    local: KernelRecord, other: KernelRecord, gpu: str, driver: str
) -> None:
    # this machine's nvcc built `local`, which its driver refuses: it supersedes nothing
    release = local.toolchain.split("release ")[1].split(",")[0]
    plan = plan_clean([(local, 0.0), (other, 0.0)], [], _machine(release, gpu, driver))
    assert [r.key for r in plan.removals] == [local.key]
    assert "the driver supports" in plan.removals[0].reason


def test_clean_still_drops_a_build_its_own_servable_toolchains_supersedes() -> None:
    ours, older = _build("sm_90", "13.5"), _build("sm_90", "13.0")
    plan = plan_clean([(ours, 0.0), (older, 0.0)], [], _machine("13.5", "sm_90", "13.0"))
    assert [r.key for r in plan.removals] == [older.key]
    assert "superseded" in plan.removals[0].reason


def test_devices_json_names_the_driver_the_ptx_a_prebuild_keeps_needs(warm: Warm) -> None:
    # `warm run --arch` keeps PTX by default (`--ptx auto`): its JIT needs the release
    major, minor = nvrtc_release_or_skip()
    proc = warm("devices", "--compiler", "nvrtc", "--json")
    assert proc.returncode == 0, proc.stderr
    cuda = next(c for c in json.loads(proc.stdout)["compilers"] if c["device"] == "cuda")
    assert cuda["needs_driver"] == f"{major}.0"
    assert cuda["ptx_needs_driver"] == f"{major}.{minor}"


def test_check_help_says_a_cubin_needs_its_major_release(warm: Warm) -> None:
    text = " ".join(warm("check", "--help").stdout.split())
    assert "CUDA version within the driver's" not in text and "major release" in text


def test_gpu_less_bench_skips_both_cuda_start_rows_by_their_suite_names() -> None:
    rows = suite.run(TINY, only=["cuda_start"])
    assert [r.name for r in rows] == list(suite.FAMILIES["cuda_start"][1])
    assert all(r.ratio is None and "no GPU" in r.detail for r in rows)
    assert rows[1].target == f"≥ {start.GENERATED_TARGET:g}×"


@pytest.mark.parametrize("cuda", [False, True])
def test_generated_workloads_warm(warm: Warm, tmp_path: Path, cuda: bool) -> None:
    if cuda and find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    path = generated.write(tmp_path / "gen.py", 3, cuda=cuda)
    args = ("--arch", "sm_90", "--compiler", "nvrtc") if cuda else ("--device", "host")
    proc = warm("run", path, *args, "-b", tmp_path / "g.warm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verified"] is True


@pytest.mark.parametrize(
    ("claims", "arch", "served"),
    [
        ("release 99.9", "sm_90", False),  # a newer major release: refused, not an error
        ("release 99.9", "compute_90", False),
        ("release 13.5", "sm_90", True),  # minor version compatibility
        ("release 13.5", "compute_90", False),  # PTX: its own release
        ("release 12.4", "sm_90", True),  # backward compatibility
        ("release 12.4", "compute_90", True),
        ("no release at all", "sm_90", True),  # not judged (as a driver-less device)
        ("release 9" + "9" * 4000 + ".0", "sm_90", False),  # a long number: no int limit
    ],
)
def test_what_a_rows_toolchain_claims_is_judged_against_a_13_0_driver(
    claims: str, arch: str, served: bool
) -> None:
    from warmcli.backends.serving import Target, choose, why_not

    toolchain = this_warms(f"nvrtc:NVRTC {claims}")
    record = KernelRecord("k", "cuda", "cuda", arch, "t", "t", "t", "h", toolchain)
    for driver, judged in (("13.0", True), ("13", False), ("none", False), ("", False)):
        target = Target("cuda", "sm_100" if arch.startswith("compute") else "sm_90", driver)
        assert (why_not(record, target) is None) == (served or not judged), driver
        assert (choose([record], target, lambda _: True) is record) == (served or not judged)


def test_check_serves_nvrtc_ptx_on_a_newer_gpu_only_with_a_driver_of_its_release(
    warm: Warm, tmp_path: Path
) -> None:
    major, minor = nvrtc_release_or_skip(older_minor=True)
    path = generated.write(tmp_path / "gen.py", 2, cuda=True)
    bundle = tmp_path / "g.warm"
    args = ("--arch", "sm_90", "--compiler", "nvrtc", "-q")
    assert warm("run", path, *args, "-b", bundle).returncode == 0

    def check(driver: str) -> dict:
        proc = warm("check", bundle, "--arch", "sm_100", "--driver", driver, "--json")
        assert proc.returncode in (0, 1), proc.stderr
        return json.loads(proc.stdout)

    refused = check(f"{major}.0")["unservable"]
    assert len(refused) == 2 and {m["reason"] for m in refused} == {"toolchain"}
    assert f"pre-build with CUDA {major}.0 or older" in refused[0]["detail"]
    assert check(f"{major}.{minor}")["unservable"] == []  # JIT by a driver of its release


def test_a_build_the_device_refuses_at_load_is_a_binary_miss_rebuilt(tmp_path: Path) -> None:
    # the path a cubin the driver still refuses takes (`serve` catches the DeviceError of
    # the load): shown on the host, whose loader refuses a hash-true blob that is no object
    import hashlib
    import sqlite3

    import numpy as np

    from warmcli.backends.host import HostDevice

    add = Kernel(
        "void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0f; }", "add", "Pi"
    )

    def run(rt: Runtime, read: bool = True) -> object:
        buf = rt.upload(np.zeros(8, dtype=np.float32))
        rt.launch(add, buf, 8)
        return rt.read(buf) if read else None

    path = warm_into(tmp_path / "h.warm", HostDevice(), lambda rt: run(rt, read=False))
    junk = b"\x7fELF refused by the loader"
    sha = hashlib.sha256(junk).hexdigest()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE blobs SET data = ?, sha256 = ?, size = ?", (junk, sha, len(junk)))
        db.execute("UPDATE kernels SET sha256 = ?", (sha,))
    db.close()
    for strict in (Strictness.OFF, Strictness.RAISE):
        collector = StatisticsCollector()
        with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.EXECUTE, collector):
            rt = Runtime(HostDevice(), bundle, misses=MissPolicy(strict=strict))
            try:
                if strict is Strictness.OFF:
                    assert list(run(rt)) == [1.0] * 8  # type: ignore[arg-type]
                else:
                    with pytest.raises(StrictMissError, match="binary"):
                        run(rt)
            finally:
                rt.close()
        reader = collector.reader()
        assert [m.reason for m in reader.misses()] == ["binary"]
        assert reader.compilation.compiled == (strict is Strictness.OFF)
