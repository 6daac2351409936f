"""One inventory of this machine (`warmcli.backends.machine`): `warm devices`, `warm clean`
and `warm check` describe devices with one `DeviceInfo` spelling.

The CUDA listing needs a GPU: these are pure-logic unit tests that run the real
listing (`list_cuda_devices`) over a stand-in driver module, so its real dict shape
goes through the real mapping and the real rendering of `warm devices`.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from warmcli.backends import machine
from warmcli.backends.cuda import device as cuda_device
from warmcli.backends.host import HostDevice
from warmcli.backends.machine import DeviceInfo, Inventory, inventory, listed_cuda_device
from warmcli.cli.render.ops import devices_json, devices_table
from warmcli.ops.clean import Machine

H100_MEMORY = 85_045_870_592  # 79.2 GiB


class _Error(Exception):
    pass


class _Gpu:
    def __init__(self, index: int) -> None:
        self.index = index

    @staticmethod
    def count() -> int:
        return 1

    def compute_capability(self) -> tuple[int, int]:
        return (9, 0)

    def name(self) -> str:
        return "NVIDIA H100 80GB HBM3"

    def total_memory(self) -> int:
        return H100_MEMORY


_DRIVER = SimpleNamespace(Device=_Gpu, Error=_Error, get_driver_version=lambda: 12040)


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The real `list_cuda_devices` over a stand-in driver with one H100 (driver 12.4)."""
    monkeypatch.setattr(cuda_device, "_driver", lambda: _DRIVER)
    monkeypatch.setattr(machine, "pycuda_installed", lambda: True)
    return cuda_device.list_cuda_devices()


def _text(renderable: Any) -> str:
    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_unit_listing_keys_map_to_one_spelling(one_gpu: list[dict[str, Any]]) -> None:
    """The listing says `total_memory`/`driver_version`; DeviceInfo says memory/driver."""
    (entry,) = one_gpu
    assert {"total_memory", "driver_version"} <= set(entry)
    info = listed_cuda_device(entry)
    assert info == DeviceInfo(
        "cuda:0",
        "cuda",
        "NVIDIA H100 80GB HBM3",
        "sm_90",
        "12.4",
        H100_MEMORY,
        "cuda|NVIDIA H100 80GB HBM3|sm_90|12.4",
    )


def test_unit_warm_devices_shows_gpu_memory_and_driver(one_gpu: list[dict[str, Any]]) -> None:
    """The bug: every GPU row showed `-` for memory and a blank driver."""
    here = inventory()
    assert [d.id for d in here.devices] == ["host", "cuda:0"]
    row = next(r for r in _text(devices_table(here.devices)).splitlines() if "cuda:0" in r)
    assert "79.2 GiB" in row and "12.4" in row and "sm_90" in row, row
    gpu = devices_json(here)["devices"][1]
    assert (gpu["memory"], gpu["driver"]) == (H100_MEMORY, "12.4")


def test_unit_warm_devices_command_renders_the_gpu(one_gpu: list[dict[str, Any]]) -> None:
    from warmcli.cli import app

    shown = CliRunner().invoke(app, ["devices", "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.output)
    assert doc["devices"][1]["memory"] == H100_MEMORY
    assert doc["devices"][1]["driver"] == "12.4"


def test_unit_clean_judges_by_the_same_inventory(one_gpu: list[dict[str, Any]]) -> None:
    here = inventory()
    seen = Machine.of(here)
    host = HostDevice()
    assert seen.host_arch == host.arch
    assert seen.devices == {host.fingerprint.identity, "cuda|NVIDIA H100 80GB HBM3|sm_90|12.4"}
    assert seen.backends == {"host", "cuda"}
    assert seen.gpus == {("sm_90", "12.4")}


def test_inventory_takes_nvcc_and_compiler_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`warm clean --nvcc/--compiler` probe the compilers named, as `warm check` does."""
    from warmcli.backends.cuda import nvcc, nvrtc

    asked: list[str | None] = []

    class Probed:
        def __init__(self, path: str | None = None) -> None:
            asked.append(path)
            self.toolchain = SimpleNamespace(identity=f"nvcc:{path}")

    monkeypatch.setattr(nvcc, "NvccCompiler", Probed)
    monkeypatch.setattr(
        nvrtc,
        "NvrtcCompiler",
        lambda: SimpleNamespace(toolchain=SimpleNamespace(identity="nvrtc:13")),
    )
    only_nvcc = Inventory((DeviceInfo.of(HostDevice()),), False, "/opt/nvcc", "nvcc")
    assert only_nvcc.toolchains["nvcc"] == "nvcc:/opt/nvcc" and asked == ["/opt/nvcc"]
    assert "nvrtc" not in only_nvcc.toolchains
    both = Inventory((DeviceInfo.of(HostDevice()),), False, "/opt/nvcc")
    assert both.toolchains["nvrtc"] == "nvrtc:13"
    from warmcli.backends.toolchain import ToolchainError

    with pytest.raises(ToolchainError, match="not a CUDA compiler"):
        _ = Inventory((DeviceInfo.of(HostDevice()),), False, None, "gcc").toolchains


def test_warm_clean_takes_nvcc_and_compiler(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from warmcli.backends.cuda import nvcc
    from warmcli.bundle.store import Bundle
    from warmcli.cli import app

    path = tmp_path / "b.warm"
    with Bundle.open(path, write=True):
        pass
    refused = CliRunner().invoke(app, ["clean", str(path), "--compiler", "gcc", "--dry-run"])
    assert refused.exit_code == 2 and "not a CUDA compiler" in refused.output
    asked: list[str | None] = []

    def probed(path: str | None = None) -> Any:
        asked.append(path)
        return SimpleNamespace(toolchain=SimpleNamespace(identity="nvcc:12.4"))

    monkeypatch.setattr(nvcc, "NvccCompiler", probed)
    args = ["clean", str(path), "--nvcc", "/opt/cuda/bin/nvcc", "--compiler", "nvcc", "--dry-run"]
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert asked == ["/opt/cuda/bin/nvcc"]
