"""Explained misses, for real: a bundle built one way, replayed with one key component changed.

Every bundle here is compiled by the real C compiler and its tunes measured for real.
To change the toolchain, a `WARM_CC`-style wrapper script answers `--version` with
another version and compiles with `cc`; to change the architecture or the device
fingerprint, `ForeignArch` and `OtherCpu` are test doubles of the *label* only
(they compile, load and time exactly like the host).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, Warm, cc_binary
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, StatisticsCollector, Tunable
from warmcli.backends.base import Device, DeviceFingerprint
from warmcli.backends.host import HostDevice
from warmcli.bundle.store import Bundle
from warmcli.execution.statistics import StatisticsReader
from warmcli.kernel import kernel_key
from warmcli.runtime.explain import MissExplanation, describe

SOURCE = "void scale(float *x, float a, int n) { for (int i = 0; i < n; i++) x[i] *= a * FACTOR; }"
ADD = "void add(float *x, int n) { for (int j = 0; j < n; j++) x[j] += STEP; }"


def scale(source: str = SOURCE, options: tuple[str, ...] = (), factor: int = 2) -> Kernel:
    return Kernel(source, "scale", "Pfi", options=options, defines={"FACTOR": factor})


def launch_add(rt: Runtime, kernel: Kernel, x: object, n: int, *, stream: object = None) -> None:
    rt.launch(kernel, x, n, stream=stream)


def adder(steps: tuple[int, ...] = (1, 2)) -> Tunable:
    candidates = {f"step{s}": Kernel(ADD, "add", "Pi", defines={"STEP": s}) for s in steps}
    return Tunable("add", candidates, launch_add, repeats=2)


def workload(rt: Runtime, kernel: Kernel | None = None, tunable: Tunable | None = None, n=64):
    x = rt.upload(np.ones(n, dtype=np.float32))
    rt.launch(kernel or scale(), x, 2.0, n)
    rt.tune(tunable or adder(), x, n)


class OtherCpu(HostDevice):
    """Test double of the fingerprint only: another CPU name; compiles and times as the host."""

    @property
    def fingerprint(self) -> DeviceFingerprint:
        return dataclasses.replace(super().fingerprint, name="Other CPU (test double)")


class ForeignArch(HostDevice):
    """Test double of the architecture label only: says aarch64, builds with this host's cc."""

    def __init__(self, cc: str | None = None) -> None:
        super().__init__(cc)
        self.arch = "aarch64" if platform.machine() != "aarch64" else "x86_64"


def fake_cc(directory: Path) -> Path:
    """A C compiler that reports another version: `cc` behind a wrapper binary (a wrapper
    script is a toolchain whose builds no other compiler is served: it may add options)."""
    return cc_binary(directory / "cc-wrapper", "cc (warm test wrapper) 99.1")


def warm_into(
    path: Path, device: Device, run: Callable[[Runtime], object] = lambda rt: workload(rt)
) -> Path:
    """Both warming passes of `run` (default `workload`) on `device`, stored in the bundle
    at `path`."""
    with Bundle.open(path, write=True) as bundle:
        rt = Runtime(device, bundle, misses=None)
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode):
                run(rt)
        rt.persist(bundle)
        rt.close()
    return path


def replay(path: Path, device: HostDevice | None = None, **changes: object) -> StatisticsReader:
    """The workload (with `changes`) under Execute over the bundle; what it counted."""
    collector = StatisticsCollector()
    with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.EXECUTE, collector):
        rt = Runtime(device or HostDevice(), bundle)
        workload(rt, **changes)  # type: ignore[arg-type]
        rt.close()
    return collector.reader()


def only(reader: StatisticsReader, kind: str) -> MissExplanation:
    (miss,) = [m for m in reader.misses() if m.kind == kind]
    return miss


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return warm_into(tmp_path_factory.mktemp("explain") / "base.warm", HostDevice())


def test_a_complete_bundle_explains_nothing(base: Path) -> None:
    reader = replay(base)
    assert reader.misses() == []
    assert reader.compilation.compiled == 0 and reader.compilation.misses == {}
    assert reader.autotune.measured == 0 and reader.autotune.hits == 1


def test_toolchain_is_no_miss_when_serving(tmp_path: Path) -> None:
    """A host build of another cc runs on this CPU: production serves it
    (`warmcli.backends.serving`), while warming with this cc builds afresh (the toolchain
    stays in the key)."""
    path = warm_into(tmp_path / "cc.warm", HostDevice(str(fake_cc(tmp_path))))
    reader = replay(path)
    assert reader.compilation.compiled == 0 and reader.compilation.misses == {}
    assert reader.compilation.loaded > 0
    assert reader.autotune.hits == 1, "the tune key holds no toolchain: the pick is served"
    collector = StatisticsCollector()
    with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector):
        rt = Runtime(HostDevice(), bundle, misses=None)
        workload(rt)
        rt.close()
    assert collector.reader().compilation.queued > 0, "warming with a new cc builds afresh"


def test_another_toolchains_unloadable_build_is_rebuilt_as_ours(tmp_path: Path) -> None:
    """Its blob overwritten, another cc's build is rebuilt here, keyed by this cc."""
    path = warm_into(tmp_path / "cc.warm", HostDevice(str(fake_cc(tmp_path))))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE blobs SET data = CAST('tampered' AS BLOB)")
    conn.commit()
    conn.close()
    with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.EXECUTE):
        rt = Runtime(HostDevice(), bundle)
        workload(rt)
        built = [record for record, _ in rt.kernels.unpersisted()]
        rt.close()
    ours = HostDevice().compiler("c").toolchain.identity
    assert built and {r.toolchain for r in built} == {ours}
    (mine,) = [r for r in built if r.label == scale().label]
    assert mine.key == kernel_key(scale(), platform.machine(), ours)


def test_architecture(tmp_path: Path) -> None:
    device = ForeignArch()
    path = warm_into(tmp_path / "arch.warm", device)
    reader = replay(path)
    kernel = next(m for m in reader.misses() if m.label == "scale[FACTOR=2]")
    assert (kernel.reason, kernel.differs) == ("arch", ("arch",))
    assert kernel.detail == (f"bundle has {device.arch}, this process wants {platform.machine()}")
    tune = only(reader, "tune")
    assert tune.reason == "device" and tune.detail.startswith("arch: bundle has")


def test_compile_options(base: Path) -> None:
    miss = only(replay(base, kernel=scale(options=("-funroll-loops",))), "kernel")
    assert (miss.reason, miss.differs) == ("options", ("options",))
    assert miss.detail == "bundle has no options, this process wants -funroll-loops"


def test_defines(base: Path) -> None:
    reader = replay(base, kernel=scale(factor=3))
    miss = only(reader, "kernel")
    assert (miss.reason, miss.differs) == ("defines", ("defines",))
    assert miss.detail == "bundle has FACTOR=2, this process wants FACTOR=3"
    assert reader.compilation.misses == {"defines": 1} and reader.compilation.compiled == 1


def test_source(base: Path) -> None:
    miss = only(replay(base, kernel=scale(source=SOURCE + "\n/* edited */")), "kernel")
    assert (miss.reason, miss.differs) == ("source", ("source",))
    assert miss.detail.startswith("bundle has sha256 ")


def test_device_fingerprint(tmp_path: Path) -> None:
    path = warm_into(tmp_path / "fp.warm", OtherCpu())
    reader = replay(path)
    assert reader.compilation.compiled == 0, "same arch and toolchain: every kernel is served"
    miss = only(reader, "tune")
    assert (miss.reason, miss.differs) == ("device", ("device",))
    name = HostDevice().fingerprint.name
    assert miss.detail == (f"name: bundle has Other CPU (test double), this process wants {name}")
    assert reader.autotune.misses == {"device": 1} and reader.autotune.measured == 1


def test_candidate_set_checksum(base: Path) -> None:
    reader = replay(base, tunable=adder((1, 2, 3)))
    miss = only(reader, "tune")
    assert (miss.reason, miss.differs) == ("checksum", ("checksum",))
    assert miss.detail == "bundle has step1, step2, this process wants step1, step2, step3"
    new = next(m for m in reader.misses() if m.label == "add[STEP=3]")
    assert new.reason == "defines" and "bundle has STEP=1 | STEP=2" in new.detail


def test_shape_key(base: Path) -> None:
    reader = replay(base, n=128)
    miss = only(reader, "tune")
    assert (miss.reason, miss.differs) == ("shape", ("shape",))
    assert miss.label == "add float32[128] 128"
    assert miss.detail == "bundle has float32[64] 64, this process wants float32[128] 128"


def test_an_entry_the_bundle_never_saw_is_absent(base: Path) -> None:
    other = Kernel("void twice(float *x, float a, int n) { x[0] *= 2; }", "twice", "Pfi")
    miss = only(replay(base, kernel=other), "kernel")
    assert miss.reason == "absent" and "'twice'" in miss.detail


def test_warming_passes_explain_nothing(tmp_path: Path) -> None:
    collector = StatisticsCollector()
    with Bundle.open(tmp_path / "new.warm", write=True) as bundle:
        rt = Runtime(HostDevice(), bundle, misses=None)
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, collector):
            workload(rt)
        rt.close()
    assert collector.reader().misses() == []
    assert collector.reader().compilation.compiled > 0


def test_warm_verify_explains_each_miss(
    warm: Warm, workload_file, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """The real CLI: warm the example, edit one kernel and add a shape, verify."""
    source = (EXAMPLES / "matmul_host.py").read_text()
    host_bundle(bundle_path)  # as `warm run EXAMPLE --bundle bundle_path` makes it
    edited = workload_file(
        source.replace("double acc = 0.0;", "double acc = 0.0; /* edited */").replace(
            "(160, 160, 160)]", "(160, 160, 160), (32, 48, 40)]"
        )
    )
    proc = warm("verify", bundle_path, "--workload", edited, "--explain-misses")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("miss: ")]
    assert len(lines) == 2, proc.stdout
    assert any(ln.startswith("miss: tune matmul float32[32x40] float32[40x48] ") for ln in lines)
    assert any(ln.startswith("miss: kernel row_sum: source: bundle has sha256 ") for ln in lines)
    doc = warm("verify", bundle_path, "--workload", edited, "--json")
    report = json.loads(doc.stdout)
    assert report["compilation"]["misses"] == {"source": 1}
    assert report["autotune"]["misses"] == {"shape": 1}
    assert {m["reason"] for m in report["explanations"]} == {"source", "shape"}


def test_shape_explanation_names_the_nearest_shapes_first() -> None:
    """Pure logic (`describe` on plain components): nearest by the numbers, not by text."""
    held = [{"shape": f"float32[{n}] {n}"} for n in (1024, 120, 64, 2048)]
    detail = describe("shape", held, {"shape": "float32[128] 128"})
    assert detail.startswith("bundle has float32[120] 120 | float32[64] 64 | float32[1024] 1024")


def launch_add_twice(
    rt: Runtime, kernel: Kernel, x: object, n: int, *, stream: object = None
) -> None:
    rt.launch(kernel, x, n, stream=stream)
    rt.launch(kernel, x, n, stream=stream)


def test_a_checked_tunables_launch_function_is_named_among_what_may_differ(tmp_path: Path) -> None:
    """With a check the launch function is in the checksum: the miss says it may be what changed."""
    steps = {f"step{s}": Kernel(ADD, "add", "Pi", defines={"STEP": s}) for s in (1, 2)}
    checked = Tunable(
        "add", steps, launch_add, repeats=2, check="step1", check_tolerance=(10.0, 10.0)
    )
    path = warm_into(
        tmp_path / "checked.warm", HostDevice(), lambda rt: workload(rt, tunable=checked)
    )
    edited = Tunable(
        "add", steps, launch_add_twice, repeats=2, check="step1", check_tolerance=(10.0, 10.0)
    )
    miss = only(replay(path, tunable=edited), "tune")
    assert miss.reason == "checksum"
    assert miss.detail.startswith(  # its kernels the bundle's: the check or launch differs
        "same candidates and kernels as the bundle's: the output check or the launch function"
    )
