"""Leftovers of stop 42 (c): a failed `warm run` says the notes its pass made before its
error line; `-` is no bundle (stdin/stdout are not streamed) unless a file of that name is
there to read; a new user's first `warm stats` says how to make the default bundle;
`--older-than` takes upper-case units as `--max-size` does, but not `M` (minutes or
months?). The real CLI in subprocesses, real SQLite files, the real C compiler."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import ForkedWarm, Servers

from warmcli.ops.clean_age import parse_age

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = """
import threading
from warmcli import Kernel

DEVICE = "host"
BODY = "o[0] = 1;"


def feeder():
    raise ValueError("boom")


def workload(rt):
    t = threading.Thread(target=feeder, name="feeder")
    t.start()
    t.join()
    o = rt.buffer(4, "float64")
    rt.launch(Kernel("void f(double *o, int n) { " + BODY + " }", "f", "Pi"), o, 4)
"""


def _warm(
    servers: Servers, tmp: Path, *args: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """`python -m warmcli ARGS` in `tmp` (warm's home there), forked from a server of
    `servers` (`tests/forked_cli.py`: a process of its own, as a started one)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    environ = dict(base, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"), **env)
    return ForkedWarm(Warm(environ), servers)(*args, cwd=cwd or tmp, timeout=120)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> Path:
    tmp = tmp_path_factory.mktemp("made")
    (tmp / "work.py").write_text(WORKLOAD)
    made = _warm(forking_servers, tmp, "run", str(tmp / "work.py"), "-b", str(tmp / "b.warm"), "-q")
    assert made.returncode == 0, made.stderr
    return tmp / "b.warm"


def test_a_failed_run_says_the_notes_of_its_pass_before_its_error(
    forking_servers: Servers, tmp_path: Path
) -> None:
    (tmp_path / "work.py").write_text(WORKLOAD.replace('BODY = "o[0] = 1;"', 'BODY = "nope }"'))
    run = _warm(
        forking_servers, tmp_path, "run", str(tmp_path / "work.py"), "-b", str(tmp_path / "b.warm")
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("warm: error: "))
    notes = [line for line in lines[:error] if line.startswith("warm: note: thread feeder")]
    assert notes and "ValueError: boom" in notes[0], run.stderr


@pytest.mark.parametrize(
    "args",
    [("merge", "{b}", "-o", "-"), ("run", "work.py", "-b", "-"), ("stats", "-")],
)
def test_dash_is_refused_as_a_bundle_in_one_line(
    forking_servers: Servers, tmp_path: Path, bundle: Path, args: tuple[str, ...]
) -> None:
    (tmp_path / "work.py").write_text(WORKLOAD)
    done = _warm(forking_servers, tmp_path, *(a.format(b=bundle) for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "warm: error: -: stdin/stdout are not supported: name a file (./- for one named -)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work.py"]  # no `-`, no `-.lock`


def test_warm_bundle_dash_is_refused_too(forking_servers: Servers, tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(WORKLOAD)
    done = _warm(forking_servers, tmp_path, "run", "work.py", WARM_BUNDLE="-")
    assert done.returncode == 2 and done.stderr.startswith("warm: error: WARM_BUNDLE=-: stdin")
    assert not (tmp_path / "-").exists()


def test_a_file_named_dash_is_read(forking_servers: Servers, tmp_path: Path, bundle: Path) -> None:
    (tmp_path / "-").write_bytes(bundle.read_bytes())
    done = _warm(forking_servers, tmp_path, "stats", "-", "--json")
    assert done.returncode == 0, done.stderr


def test_a_new_users_first_stats_says_how_to_make_the_default_bundle(
    forking_servers: Servers, tmp_path: Path
) -> None:
    done = _warm(forking_servers, tmp_path, "stats")
    default = tmp_path / "home" / "bundle.warm"
    assert done.returncode == 2
    assert done.stderr == (
        f"warm: error: {default}: no such bundle (make one with `warm run WORKLOAD`)\n"
    )
    named = _warm(forking_servers, tmp_path, "stats", str(tmp_path / "x.warm"))  # no hint
    assert named.stderr == f"warm: error: {tmp_path / 'x.warm'}: no such bundle\n"


def test_ages_take_upper_case_units_as_sizes_do_but_not_m() -> None:
    assert parse_age("30D") == parse_age("30d") == 30 * 86400
    assert parse_age("2W") == parse_age("2w") and parse_age("12H") == parse_age("12h")
    with pytest.raises(ValueError, match="minutes or months"):
        parse_age("6M")


def test_clean_older_than_upper_case_days(
    forking_servers: Servers, tmp_path: Path, bundle: Path
) -> None:
    copy = tmp_path / "c.warm"
    copy.write_bytes(bundle.read_bytes())
    done = _warm(forking_servers, tmp_path, "clean", str(copy), "--older-than", "30D", "--dry-run")
    assert done.returncode == 0, done.stderr
    refused = _warm(forking_servers, tmp_path, "clean", str(copy), "--older-than", "6M")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "minutes or months" in refused.stderr


POOL = """
import concurrent.futures
import os

import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv


def work(i):
    try:
        drv.get_driver_version()
    except RuntimeError:
        if not os.environ.get("CAUGHT"):
            raise


def main():
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for i in range(2):
            pool.submit(work, i)  # its future never read
"""


@pytest.mark.parametrize("caught", ["", "1"])
def test_a_pool_task_ended_by_a_gpu_less_prebuilds_want_of_a_gpu_fails_it(
    forking_servers: Servers, tmp_path: Path, caught: str
) -> None:
    (tmp_path / "pool.py").write_text(POOL)
    args = ("run", "pool.py", "--entry", "main", "--pycuda", "--arch", "sm_80", "-q")
    done = _warm(forking_servers, tmp_path, *args, "-b", str(tmp_path / "p.warm"), CAUGHT=caught)
    if caught:  # a task that caught it and went on: as a thread that does
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(
        "warm: error: workload raised during CompileOnly in a task of a thread pool: "
        f"{tmp_path / 'pool.py'}:11: DeviceError: pycuda.driver.get_driver_version() needs a GPU"
    ), done.stderr
