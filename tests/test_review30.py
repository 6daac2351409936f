"""Review of the first H200 runs' changes: `warm check`'s pending rule for a GPU-less
pre-build's tunes where the bundle also holds a measurement for another GPU of the arch."""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_check import FakeGpuSeen

from warmcli.bundle.store import Bundle
from warmcli.ops.check import check_servable
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

OTHER_GPU = "cuda|NVIDIA H100|sm_90|13.0"  # the same arch, measured on another GPU (a driver
# of the CUDA release the venv's NVRTC builds for: its cubins are served there)


def measured_elsewhere(t: TuneRecord) -> TuneRecord:
    """`t` as `warm run` on another sm_90 GPU stores it: measured, under that GPU's key."""
    key = tune_key(t.operation, t.shape_key, OTHER_GPU, t.checksum)
    timed = tuple(
        CandidateMeasurement(c.name, c.kernel_key, "ok", 0.001 * (i + 1), (0.001 * (i + 1),))
        for i, c in enumerate(t.candidates)
    )
    return TuneRecord(
        key, t.operation, t.shape_key, OTHER_GPU, t.checksum, "measured", timed[0].name, timed,
        0.001, 1.0,
    )  # fmt: skip


def test_a_pre_build_measured_on_another_gpu_is_not_said_never_measured(
    warm: Warm, tmp_path: Path
) -> None:
    """A bundle pre-built without a GPU for sm_90 and then measured on an H100: on an H200
    its tunes are not "never measured"; the check names the device that differs."""
    bundle = tmp_path / "pre.warm"
    warm.json("run", EXAMPLES / "matmul_cuda.py", "--arch", "sm_90", "-b", bundle)
    with Bundle.open(bundle, write=True) as opened:
        opened.put(tunes=[measured_elsewhere(t) for t in opened.tunes()])
    with Bundle.open(bundle) as opened:
        report = check_servable(opened, [FakeGpuSeen("sm_90")])
    tunes = [m for m in report.unservable if m.kind == "tune"]
    assert len(tunes) == 3, "\n".join(str(m.as_fields()) for m in tunes)
    assert not any("never measured" in m.detail for m in tunes), tunes
    assert all("NVIDIA H100" in m.detail for m in tunes), tunes


def test_with_two_gpus_here_one_measured_the_other_is_not_said_never_measured(
    warm: Warm, tmp_path: Path
) -> None:
    """An H200 and an H100 here, the bundle pre-built without a GPU then measured on the
    H100: the H200's misses name the H100's record, not a pre-build never measured."""
    bundle = tmp_path / "pre.warm"
    warm.json("run", EXAMPLES / "matmul_cuda.py", "--arch", "sm_90", "-b", bundle)
    with Bundle.open(bundle, write=True) as opened:
        opened.put(tunes=[measured_elsewhere(t) for t in opened.tunes()])
    with Bundle.open(bundle) as opened:
        report = check_servable(
            opened, [FakeGpuSeen("sm_90"), FakeGpuSeen("sm_90", "NVIDIA H100", "13.0")]
        )
    tunes = [m for m in report.unservable if m.kind == "tune"]
    assert len(tunes) == 3, tunes
    assert not any("never measured" in m.detail for m in tunes), tunes
