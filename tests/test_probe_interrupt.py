"""An interrupt while the compiler probe (`warmcli.warming.probe`) waits for a slow
`cc --version`: the real `warm run` in a subprocess, SIGINT while it waits; and the
probe's `stop` in this process, over a real slow `--version` and its grandchild."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _left_alive(pids: Path) -> list[int]:
    """The processes of `pids` still running once a SIGKILL sent them has had 2 s to end: its
    delivery and the exit are the kernel's, after `kill` returns (a loaded machine showed a
    killed `sleep` still running when looked at at once)."""
    deadline = time.monotonic() + 2.0
    while (alive := [p for p in map(int, pids.read_text().split()) if _alive(p)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.01)
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_interrupt_during_the_probe_stops_its_child_and_leaves_no_bundle(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    slow = tmp_path / "slowcc"  # answers --version in 20 s (a grandchild holds its pipe)
    slow.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo $$ >> {pids}; sleep 20 & echo $! >> {pids};'
        ' wait; echo "cc (slow) 1.0"; exit 0; fi\n'
        'exec cc "$@"\n'
    )
    slow.chmod(0o755)
    bundle = tmp_path / "new.warm"
    env = {**os.environ, "WARM_HOME": str(tmp_path / "home"), "WARM_CC": str(slow)}
    script = Path(sys.executable).with_name("warm")  # the installed command, as users run it
    warm = [script] if script.exists() else [Path(sys.executable), "-m", "warmcli"]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*warm, "run", ROOT / "examples" / "matmul_host.py", "--bundle", bundle, "--quiet"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert time.perf_counter() - started < 15, out  # not the probe's 20 s
    assert "interrupted" in out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("new.warm")) == []
    assert _left_alive(pids) == []


def test_a_probe_failure_closes_the_devices_and_leaves_no_bundle(tmp_path: Path) -> None:
    from warmcli.backends.host import HostDevice
    from warmcli.warming.passes import warm_bundle
    from warmcli.warming.workload import load_workload

    closed: list[str] = []

    class Failing(HostDevice):
        def compiler(self, language: str):  # type: ignore[no-untyped-def]
            raise RuntimeError("the probe failed")

        def close(self) -> None:
            closed.append(self.id)
            super().close()

    bundle = tmp_path / "new.warm"
    with pytest.raises(RuntimeError, match="the probe failed"):
        warm_bundle(
            load_workload(ROOT / "examples" / "matmul_host.py"), lambda: [Failing()], bundle
        )
    assert closed == [Failing().id]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stopping_the_probe_kills_what_its_thread_started_and_what_it_starts_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CompilerProbe.stop` kills the `--version` groups its thread started (a grandchild
    holding the pipe included), and one the thread starts after the stop, at once; a
    process another thread started is left alone."""
    from warmcli.backends import processes
    from warmcli.warming import probe as probe_module

    pids = tmp_path / "pids"
    slow = tmp_path / "slowcc"  # a grandchild holds its pipe for 20 s
    slow.write_text(f"#!/bin/sh\necho $$ >> {pids}; sleep 20 & echo $! >> {pids}; wait\n")
    slow.chmod(0o755)
    other = subprocess.Popen(["sleep", "20"])  # not the probe's: must outlive its stop

    class Device:
        id = "slow"

    def compiler_info(device: object) -> dict[str, str]:
        for _ in range(2):  # the second starts after the stop: killed at once
            processes.run([str(slow)], timeout=30)
        return {"device": "slow"}

    compilers: list[dict[str, str]] = []
    monkeypatch.setattr(probe_module, "compiler_info", compiler_info)
    try:
        started = time.perf_counter()
        probe = probe_module.CompilerProbe([Device()], compilers)  # type: ignore[list-item]
        deadline = time.monotonic() + 30
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        probe.stop()
        probe.join()
        assert other.poll() is None  # not the probe's: left running
    finally:
        other.kill()
    assert time.perf_counter() - started < 10
    assert compilers == [{"device": "slow"}]
    assert _left_alive(pids) == []
