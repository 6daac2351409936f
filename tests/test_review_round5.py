"""What a review of the README trial's fixes found, through the real CLI on real files: an
empty bundle name is refused in one line by every command (it named the user's default
bundle, which `warm clean ""` then emptied); a malformed URL is one line, never a
traceback; a workload that removes the folder warm run started in still has its kernels
stored; a workload that closes `sys.stdout` under `--json` still gets one JSON object.
The default bundle the empty-name cases guard is warmed once for the module, its home
copied to each case.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import (
    ForkedWarm,
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
)

ONE_KERNEL = """\
import os, shutil
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    {extra}
    rt.launch(INC, rt.upload(np.ones(4, np.int32)), 4)
"""


@pytest.fixture(scope="module")
def home_warmed(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """A warm home whose default bundle the host example warmed (`warm run matmul_host.py
    -q`, forked as `warm` is), once for the module: what `_home_bundle` copies."""
    folder = tmp_path_factory.mktemp("home-warmed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    home = folder / "home"
    home.mkdir()
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(home), COLUMNS="200")), forking_servers)
    proc = warm("run", EXAMPLES / "matmul_host.py", "-q")
    assert proc.returncode == 0, proc.stderr
    return home


def _home_bundle(warm: Warm, home_warmed: Path) -> Path:
    """The default bundle (WARM_HOME/bundle.warm), warmed by the host example: the
    module's warmed home copied as the test's WARM_HOME, as that run there leaves it."""
    home = Path(warm.env["WARM_HOME"])
    shutil.copytree(home_warmed, home, symlinks=True)
    return home / "bundle.warm"


@pytest.mark.parametrize(
    "args",
    [
        ("clean", "", "--max-size", "1"),
        ("run", str(EXAMPLES / "matmul_host.py"), "--bundle", ""),
        ("check", ""),
        ("stats", ""),
        ("verify", ""),
    ],
)
def test_an_empty_bundle_name_is_refused_and_the_default_bundle_kept(
    warm: Warm, home_warmed: Path, args: tuple[str, ...]
) -> None:
    default = _home_bundle(warm, home_warmed)
    before = default.read_bytes()
    proc = warm(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "empty" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert default.read_bytes() == before


@pytest.mark.parametrize("command", ["check", "stats", "verify", "diff", "clean", "sign", "run"])
def test_a_malformed_url_is_one_line(warm: Warm, tmp_path: Path, command: str) -> None:
    url = "https://[x/b.warm"
    args = {
        "diff": (url, str(tmp_path / "b.warm")),
        "sign": (url, "--key", str(tmp_path / "k.pem")),
        "run": (str(EXAMPLES / "matmul_host.py"), "--bundle", url),
    }.get(command, (url,))
    proc = warm(command, *args)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_malformed_url_in_warm_bundle_is_one_line_in_production(warm: Warm) -> None:
    import subprocess
    import sys

    env = dict(warm.env, WARM_BUNDLE="https://[x/b.warm")
    proc = subprocess.run(
        [sys.executable, "-c", "import warmcli; warmcli.use_bundle()"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "ValueError: Invalid IPv6 URL" not in proc.stderr, proc.stderr


def test_a_workload_that_removes_the_starting_folder_is_stored(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    start = tmp_path / "gone"
    start.mkdir()
    script = workload_file(ONE_KERNEL.replace("{extra}", f"shutil.rmtree({str(start)!r}, True)"))
    bundle = tmp_path / "b.warm"
    proc = warm("run", script, "-b", bundle, cwd=start)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stored 1 new kernel(s)" in proc.stdout


def test_a_workload_that_closes_sys_stdout_under_json_still_gives_one_object(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    script = workload_file(ONE_KERNEL.replace("{extra}", "import sys; sys.stdout.close()"))
    proc = warm("run", script, "-b", tmp_path / "b.warm", "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    json.loads(proc.stdout)  # one JSON document, whatever the exit
    shutil.rmtree(tmp_path / "home", ignore_errors=True)


LATE = """\
import copy
import numpy as np
import warmcli
from warmcli import Kernel

DEVICE = "host"
RT = warmcli.runtime()
RT2 = warmcli.runtime()
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    assert isinstance(RT, warmcli.Runtime), type(RT)
    assert RT is RT2 and RT == RT2
    copy.copy(RT)
    RT.launch(INC, RT.upload(np.ones(4, np.int32)), 4)
"""


def test_a_runtime_taken_at_import_under_warm_run_is_a_runtime(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """What `warmcli.runtime()` hands a workload's import under `warm run` is one object per
    device, an instance of `warmcli.Runtime`, and copies without recursing."""
    proc = warm("run", workload_file(LATE), "-b", tmp_path / "b.warm")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stored 1 new kernel(s)" in proc.stdout


@pytest.mark.parametrize("kind", ["int64", "int32", "uint8"])
def test_tunable_takes_numpy_integers(kind: str) -> None:
    import numpy as np

    from warmcli import Kernel, Tunable

    k = Kernel("void f(int *x) {}", "f", "P")
    number = getattr(np, kind)
    t = Tunable(
        "t", {"a": k}, lambda rt, c, *a, stream=None: None, warmup=number(2), repeats=number(3)
    )
    assert (t.warmup, t.repeats) == (2, 3)
