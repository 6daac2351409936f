"""The real `warm` CLI, in a process of its own, over a bundle read by forked workers
(thresholds lowered, as `test_stats_parallel` does): a worker that dies leaves its
ranges to the caller (same output, no hang), Ctrl-C to the process group prints one
line and exits 130, a reader that quits early or a SIGINT while tunes stream end
quietly (no "Exception ignored")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.big_bundle import build_big

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forked workers: Linux")

# Runs `warm ARGS...` with workers for a 400-tune bundle; FAULT is what the first worker
# to read does: nothing, SIGKILL itself, or SIGINT its whole process group.
DRIVER = """
import os, signal, sys
from warmcli.bundle import checking, listing, workers
from warmcli.cli import inspect
listing.PARALLEL_TUNES = checking.PARALLEL_TUNES = inspect.NAMED_TUNES = 1
listing.RANGE_TUNES = 20
listing.worker_count = checking.worker_count = lambda: 3
fault, marker, parent = sys.argv[1], sys.argv[2], os.getpid()
read = workers.Reopen.read

def faulty(self, reading):
    if os.getpid() != parent and fault != "none":
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os.killpg(0, signal.SIGINT)
    return read(self, reading)

workers.Reopen.read = faulty
sys.argv = ["warm", *sys.argv[3:]]
from warmcli.__main__ import main
main()
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_big(tmp_path_factory.mktemp("faults") / "big.warm", kernels=4, tunes=400)


def _warm(tmp: Path, fault: str, *args: str, **popen: object) -> subprocess.Popen[bytes]:
    env = dict(os.environ, WARM_HOME=str(tmp / "home"))
    marker = str(tmp / f"fired-{fault}")
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, fault, marker, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group: SIGINT reaches it and its workers
        **popen,  # type: ignore[arg-type]
    )


def _ran(tmp: Path, fault: str, *args: str) -> tuple[int, bytes, str]:
    proc = _warm(tmp, fault, *args)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"warm {' '.join(args)} hung (fault: {fault})")
    return proc.returncode, out, err.decode()


@pytest.mark.parametrize("command", [["stats", "--json"], ["verify"]])
def test_a_killed_worker_leaves_its_ranges_to_the_caller(
    big: Path, tmp_path: Path, command: list[str]
) -> None:
    code, whole, err = _ran(tmp_path, "none", *command, str(big))
    assert (code, err) == (0, "")
    code, crashed, err = _ran(tmp_path, "kill", *command, str(big))
    assert (tmp_path / "fired-kill").exists()  # a worker did die
    assert (code, err) == (0, "")
    assert crashed == whole


@pytest.mark.parametrize("command", [["stats", "--json"], ["verify"]])
def test_ctrl_c_to_the_group_is_one_line_and_130(
    big: Path, tmp_path: Path, command: list[str]
) -> None:
    code, _, err = _ran(tmp_path, "int", *command, str(big))
    assert (tmp_path / "fired-int").exists()
    assert code == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == ["warm: interrupted"]


def test_a_reader_that_quits_early_ends_quietly(big: Path, tmp_path: Path) -> None:
    proc = _warm(tmp_path, "none", "stats", "--json", str(big))
    assert proc.stdout is not None and proc.stderr is not None
    assert len(proc.stdout.read(1000)) == 1000  # `| head -c 1000`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert err == ""


def test_ctrl_c_while_tunes_stream_ends_quietly(big: Path, tmp_path: Path) -> None:
    proc = _warm(tmp_path, "none", "stats", "--json", str(big))
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1000)  # the tunes are streaming: the reader is slow, stdout full
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGINT)
    proc.stdout.read()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 130, err
    assert "Exception ignored" not in err and "Traceback" not in err, err


def test_a_snapshot_outliving_its_bundle_ends_quietly(big: Path) -> None:
    from warmcli.bundle.store import Bundle

    bundle = Bundle.open(big)
    with bundle.snapshot():
        assert bundle.count("tunes") == 400
        bundle.close()  # a listing closed after its bundle: no "corrupt bundle"


def test_ctrl_c_while_the_command_is_imported_is_one_line_and_130(tmp_path: Path) -> None:
    interrupted = (
        "import importlib, sys\n"
        "real = importlib.import_module\n"
        "def stopped(name, *args):\n"
        "    if name == 'warmcli.cli.inspect':\n"
        "        raise KeyboardInterrupt  # Ctrl-C while `warm stats` is imported\n"
        "    return real(name, *args)\n"
        "importlib.import_module = stopped\n"
    )
    _interrupted_in_one_line(tmp_path, interrupted)


def _interrupted_in_one_line(tmp_path: Path, stopping: str) -> None:
    """`warm stats` run after `stopping` (code that makes a Ctrl-C at some point of its
    start) says it in one line and exits 130."""
    code = (
        stopping
        + "sys.argv = ['warm', 'stats', 'x.warm']\nfrom warmcli.__main__ import main\nmain()\n"
    )
    env = dict(os.environ, WARM_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == ["warm: interrupted"]


def test_ctrl_c_while_the_workers_start_stops_them(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C between two parts handed to the workers (`warm verify`, `warm diff`) stops
    the pool before it goes on: left running, its thread and the interpreter's exit raced
    on the pool's wake-up pipe ("Exception ignored ... Bad file descriptor" after
    "warm: interrupted")."""
    from warmcli.bundle import checking, workers
    from warmcli.bundle.rows import AS_STORED
    from warmcli.bundle.store import Bundle

    monkeypatch.setattr(checking, "PARALLEL_TUNES", 1)
    monkeypatch.setattr(checking, "worker_count", lambda: 3)
    submit, stop = workers.Workers.submit, workers.Workers.stop
    handed: list[object] = []
    stopped: list[object] = []

    def interrupted(self: workers.Workers, fn: object, *args: object) -> object:
        handed.append(submit(self, fn, *args))  # type: ignore[arg-type]
        if len(handed) == 2:
            raise KeyboardInterrupt
        return handed[-1]

    def stopping(self: workers.Workers) -> None:
        stopped.append(self)
        stop(self)

    monkeypatch.setattr(workers.Workers, "submit", interrupted)
    monkeypatch.setattr(workers.Workers, "stop", stopping)
    with Bundle.open(big) as bundle, pytest.raises(KeyboardInterrupt):
        checking.TuneChecks(bundle, lambda bad: bundle.each_tune(on_error=bad, order=AS_STORED))
    assert len(handed) == 2 and len(stopped) == 1


@pytest.mark.parametrize("where", ["WarmGroup", "WarmCommand"])
def test_ctrl_c_while_the_command_line_is_parsed_is_one_line_and_130(
    tmp_path: Path, where: str
) -> None:
    """Typer answers a Ctrl-C while it parses `warm`'s options or a command's (outside
    the command's own run) with a bare exit 130: warm says it in one line too."""
    interrupted = (
        "import sys\n"
        "import warmcli.cli.app\n"
        "app = sys.modules['warmcli.cli.app']\n"
        f"cls = app.{where}\n"
        "def stopped(self, ctx, args):\n"
        "    raise KeyboardInterrupt  # Ctrl-C while the command line is parsed\n"
        "cls.parse_args = stopped\n"
    )
    _interrupted_in_one_line(tmp_path, interrupted)
