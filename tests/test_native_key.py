"""A host kernel tuned for its building CPU (`-march=native`) is keyed with that CPU.

Built on an AVX-512 machine and served to one without, it would die by SIGILL: its key
names what `native` is here (`warmcli.backends.native`), and a build for another CPU is
served nowhere else. Kernels without `native` keep their keys exactly. The pure-logic
tests inject the CPU through the seam the key takes (a fake CPU reader); the real ones
warm with the real `cc` and serve in processes of their own (forks of one that imported
numpy and warmcli once, `tests/forked_cli.py`), one of them warmed with a fake
`/proc/cpuinfo` standing for another machine's CPU (a started process).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, StatisticsCollector
from warmcli.backends import native
from warmcli.backends.host import HostDevice
from warmcli.backends.native import cpu_identity, foreign_cpu, keyed_identity
from warmcli.bundle.store import Bundle
from warmcli.kernel import kernel_key
from warmcli.warming.workload import load_workload

SOURCE = "void axpy(float *y, const float *x, float a, int n) { for (int i = 0; i < n; i++) y[i] += a * x[i]; }"  # noqa: E501
IDENTITY = "cc:gcc (Debian 12.2.0-14+deb12u1) 12.2.0"
AVX512 = "model name\t: Fake Xeon\nflags\t\t: fpu sse2 avx2 avx512f\nstepping\t: 4\n"
AVX2 = "model name\t: Fake Xeon\nflags\t\t: fpu sse2 avx2\nstepping\t: 4\n"


def _fake_cpu(cpuinfo: str):  # the CPU reader a key takes, faked
    return lambda: cpu_identity(cpuinfo)


@pytest.mark.parametrize(
    "options",
    [("-march=native",), ("-O3", "-mtune=native"), ("-mcpu=native+nosve",), ("-Wp,-march=native",)],
)
def test_a_native_kernel_is_keyed_with_the_cpu(options: tuple[str, ...]) -> None:
    kernel = Kernel(SOURCE, "axpy", "PPfi", options=options)
    assert kernel.tunes_native
    big = kernel_key(kernel, "x86_64", keyed_identity(IDENTITY, _fake_cpu(AVX512)))
    small = kernel_key(kernel, "x86_64", keyed_identity(IDENTITY, _fake_cpu(AVX2)))
    again = kernel_key(kernel, "x86_64", keyed_identity(IDENTITY, _fake_cpu(AVX512)))
    assert big != small
    assert big == again
    assert big != kernel_key(kernel, "x86_64", IDENTITY)


def test_what_varies_between_machines_of_one_model_is_not_the_cpu() -> None:
    other_stepping = AVX512.replace("stepping\t: 4", "stepping\t: 7") + "cpu MHz\t\t: 1200.0\n"
    assert cpu_identity(AVX512) == cpu_identity(other_stepping)
    assert cpu_identity(AVX512).startswith("Fake Xeon #")
    assert cpu_identity(AVX512) != cpu_identity(AVX2)


@pytest.mark.parametrize(
    "options", [(), ("-O3",), ("-march=x86-64-v3",), ("-mcpu=neoverse-v1",), ("-DNATIVE=1",)]
)
def test_a_kernel_without_native_keeps_its_key(options: tuple[str, ...]) -> None:
    kernel = Kernel(SOURCE, "axpy", "PPfi", options=options)
    assert not kernel.tunes_native


def test_a_plain_kernel_key_is_unchanged() -> None:
    """The key of a kernel without `native`, as it was before (no bundle invalidated)."""
    kernel = Kernel(SOURCE, "axpy", "PPfi", options=("-O3",), defines={"N": 4})
    assert (
        kernel_key(kernel, "x86_64", IDENTITY)
        == "a914cd515e8f6e5e4a2bfc63c76f5b96f9e7fcc8f16b3eb3b49416e1a287ac88"
    )


def test_a_build_for_another_cpu_is_foreign() -> None:
    theirs = keyed_identity(IDENTITY, _fake_cpu(AVX512))
    assert foreign_cpu(theirs, _fake_cpu(AVX512)) == ""
    assert "tuned for another CPU" in foreign_cpu(theirs, _fake_cpu(AVX2))
    assert foreign_cpu(IDENTITY, _fake_cpu(AVX2)) == ""  # no native: judged by nothing here


WORKLOAD = f"""\
import numpy as np
from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, StatisticsCollector
from warmcli.backends.host import HostDevice

DEVICE = "host"
AXPY = Kernel({SOURCE!r}, "axpy", "PPfi", options=("-O2", "-march=native"))

def workload(rt):
    y = rt.upload(np.ones(8, np.float32))
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(AXPY, y, x, 2.0, 8)
    return y
"""

# Serves the workload in a process of its own: the key it gives the kernel, what it loaded
# from the bundle, and what the kernel computed.
PRODUCTION = """\
import json, sys
import warmcli
sys.path.insert(0, sys.argv[1])
import nat
rt = warmcli.runtime("host")
y = nat.workload(rt)
cache = rt.kernels
print(json.dumps({"key": cache.key(nat.AXPY), "served": sorted(cache.loaded_from_bundle()),
                  "y": rt.read(y).tolist()}))
"""

EXPECTED = [1.0 + 2.0 * i for i in range(8)]


def _keys(bundle: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(bundle) as conn:
        return [tuple(r) for r in conn.execute("SELECT key, toolchain FROM kernels")]


def test_a_native_kernel_is_stored_and_served_hot_with_its_key(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "nat.py").write_text(WORKLOAD)
    bundle = tmp_path / "nat.warm"
    proc = warm("run", tmp_path / "nat.py", "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    ((key, toolchain),) = _keys(bundle)
    assert native.NATIVE in toolchain
    hot = warm.production(PRODUCTION, tmp_path, bundle=bundle)
    assert hot["key"] == key
    assert hot["served"] == [key]
    assert hot["y"] == EXPECTED
    assert warm("check", bundle).returncode == 0


def test_a_native_build_for_another_cpu_is_not_served(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warmed on a machine whose CPU the fake `/proc/cpuinfo` describes: here it is rebuilt
    (not served), and `warm check` and a serving runtime's miss say why."""
    monkeypatch.setenv("WARM_HOME", warm.env["WARM_HOME"])
    (tmp_path / "nat.py").write_text(WORKLOAD)
    (tmp_path / "cpuinfo").write_text("model name\t: Elsewhere CPU\nflags\t\t: fpu avx512f\n")
    bundle = tmp_path / "nat.warm"
    elsewhere = (
        "import sys; from warmcli.backends import native; native.CPUINFO = sys.argv.pop(1); "
        "from warmcli.__main__ import main; sys.argv[0] = 'warm'; main()"
    )
    run = [sys.executable, "-c", elsewhere, str(tmp_path / "cpuinfo"), "run"]
    proc = subprocess.run(
        [*run, str(tmp_path / "nat.py"), "-b", str(bundle), "-q"],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    ((key, toolchain),) = _keys(bundle)
    assert toolchain.endswith(cpu_identity("model name: Elsewhere CPU\nflags: fpu avx512f"))
    hot = warm.production(PRODUCTION, tmp_path, bundle=bundle)
    assert hot["key"] != key
    assert hot["served"] == []  # compiled here, not served
    assert hot["y"] == EXPECTED
    check = warm("check", bundle)
    assert check.returncode != 0, check.stdout
    assert "tuned for another CPU" in check.stdout + check.stderr
    assert _explained(bundle, tmp_path / "nat.py", warm) == ("toolchain", "Elsewhere CPU #")


def _explained(bundle: Path, workload: Path, warm: Warm) -> tuple[str, str]:
    """How a serving runtime explains the workload's one kernel miss over `bundle`: its
    reason, and the CPU named after the bundle's `+native`."""
    collector = StatisticsCollector()
    with Bundle.open(bundle) as opened, ProcessModeOverride(ProcessMode.EXECUTE, collector):
        rt = Runtime(HostDevice(), opened)  # serving: any toolchain's build that runs here
        try:
            load_workload(workload).function(rt)
        finally:
            rt.close()
    (miss,) = [m for m in collector.reader().misses() if m.kind == "kernel"]
    held = miss.detail.split(native.NATIVE, 1)[-1]
    return miss.reason, held[: len("Elsewhere CPU #")]
