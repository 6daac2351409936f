"""A CI engineer's flags, their bad values and what README says they print, through the real
CLI (trial57e).

An empty value of a flag naming a tool (`--nvcc ""`, `--compiler ""`, `check --driver ""`:
a CI's `--nvcc "$NVCC"` with the variable unset) was taken as the flag left out: warm
searched WARM_NVCC, CUDA_HOME and PATH, chose its compiler itself, or judged every build
for any driver, in silence, exit 0. Now each is one line naming the flag, exit 2, as an
empty `--bundle`, `--entry` or `--arch` already was. README's list of `warm run --json`'s keys
lacked five it prints: it names each now. An empty URL (`warm pull ""`) was named as nothing,
a line opening `warm: error: : `; it is `""` now. `warm run -m stat`, a `stat.py` beside it,
said there was no such module where the file lay: Python's own `stat` is said instead.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

EMPTY = {
    "--nvcc": "--nvcc '' names no nvcc",
    "--compiler": "--compiler '' is not a CUDA compiler",
}


def _refused(done: subprocess.CompletedProcess[str], said: str) -> None:
    """One line on stderr saying `said`, exit 2 (so no traceback)."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr


@pytest.mark.parametrize("flag", sorted(EMPTY))
@pytest.mark.parametrize("command", ["run", "check", "clean", "devices"])
def test_an_empty_tool_flag_is_refused_by_every_command(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path], flag: str, command: str
) -> None:
    """`--nvcc ""` and `--compiler ""` fail in one line before anything is read or run
    (before: exit 0, as if not given; `run` then warmed with the nvcc PATH found)."""
    bundle = host_bundle(tmp_path / "b.warm")
    before = bundle.read_bytes()
    operand: tuple[str | Path, ...] = {
        "run": (Path(__file__).parents[1] / "examples" / "matmul_host.py", "-b", bundle),
        "check": (bundle,),
        "clean": (bundle,),
        "devices": (),
    }[command]
    _refused(warm(command, *operand, flag, ""), EMPTY[flag])
    assert bundle.read_bytes() == before


def test_an_empty_compiler_flag_is_refused_in_json_too(warm: Warm, tmp_path: Path) -> None:
    """`--compiler " "` (blank) under `--json`: the error object on stdout, exit 2."""
    done = warm("devices", "--compiler", " ", "--json")
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout) == {
        "error": "--compiler ' ' is not a CUDA compiler: use nvrtc, nvcc or auto",
        "exit": 2,
    }


def test_check_refuses_an_empty_driver(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm check --arch sm_90 --driver ""` states no CUDA release: refused as `abc` is
    (before: exit 0, every build judged for any driver); `--driver 13.0` still checks."""
    bundle = host_bundle(tmp_path / "b.warm")
    said = "--driver '': give a CUDA release such as 13.0, with --arch"
    _refused(warm("check", bundle, "--arch", "sm_90", "--driver", ""), said)
    assert warm("check", bundle, "--arch", "sm_90", "--driver", "13.0").returncode == 0


def _documented_run_keys() -> set[str]:
    """Every name README's `warm run --json prints {...}` paragraph quotes."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    start = readme.index("`warm run --json` prints `")
    return set(re.findall(r'"(\w+)"', readme[start : readme.index("(`devices`:", start)]))


def test_readme_names_every_key_of_run_json(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    """Each top-level key `warm run --json` prints, local and under `--dask`, and a shard's
    keys, are named in README's list (before: `read_only` and `never_served`, and `--dask`'s
    `shards`, `merge` and `seed_notes`, were not)."""
    host = Path(__file__).parents[1] / "examples" / "matmul_host.py"
    local = warm.json("run", host, "-b", tmp_path / "a.warm", "--no-verify")
    fanned = warm.json("run", host, "-b", tmp_path / "d.warm", "--dask", dask_scheduler)
    printed = {*local, *fanned, *(key for shard in fanned["shards"] for key in shard)}
    assert printed - _documented_run_keys() == set()


@pytest.mark.parametrize("command", ["push", "pull"])
def test_an_empty_url_is_named_as_empty(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path], command: str
) -> None:
    """`warm push B ""` and `warm pull ""` name the URL `""` (before: a line opening with
    `: `, `warm: error: : not an https:// or s3:// URL`, naming nothing)."""
    operand = (host_bundle(tmp_path / "b.warm"), "") if command == "push" else ("",)
    done = warm(command, *operand)
    _refused(done, 'warm: error: "": ')
    assert "https:// " in done.stderr


def test_a_module_built_into_python_is_said_so(warm: Warm, tmp_path: Path) -> None:
    """`warm run -m stat` with a workload `stat.py` in the working folder: Python's own
    `stat` (frozen) is found before any folder, as under `python -m`; said so, with how to
    run the file (before: `stat: no such workload module (looked in <that folder> first)`,
    where the file lay). Where Python's own modules are not frozen (a debug build, `-X
    frozen_modules=off`), `stat` is searched along `sys.path` and the file is found: skipped."""
    if importlib.util.find_spec("stat").origin != "frozen":  # (the Python warm runs in)
        pytest.skip("this Python's stat module is not frozen")
    (tmp_path / "stat.py").write_text("def workload(rt):\n    pass\n")
    warm = warm.with_env(PYTHONPATH=str(Path(__file__).parents[1]))  # this warm, from tmp_path
    done = warm("run", "-m", "stat", "-b", tmp_path / "b.warm", cwd=tmp_path)
    said = "stat: a module built into Python (frozen), no workload: rename stat.py, or give "
    _refused(done, said + f"the file (warm run {tmp_path / 'stat.py'})")
    _refused(warm("run", "-m", "sys", cwd=tmp_path), "sys: a module built into Python (built-in)")
