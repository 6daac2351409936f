"""Ctrl-C that lands at a chosen instruction of a `warm` command, made deterministic: a
`sitecustomize` in a folder put on the child's PYTHONPATH (no `WARM_*` variable) sends the
process SIGINT as the named function is entered (a `sys.setprofile` hook, removed as it
fires), and Python answers it at that function's first instruction (or, sent from a
generator's `finally`, as that generator is finalized). A CI run once saw `warm stats` exit
130 with stderr empty; these are the places that did so, or said the line twice, or lost it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm

PLAIN = """\
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
"""

HOOK = """\
import os, signal, sys

AT = {at!r}  # (file, qualified name): SIGINT as the first call of each begins, in turn


def _begins(frame, event, at):
    code = frame.f_code
    return event == "call" and code.co_qualname == at[1] and code.co_filename.endswith(at[0])


def _first(frame, event, arg):
    if _begins(frame, event, AT[0]):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)


def _second(frame, event, arg):  # (a trace function: a profile one that raised is dropped)
    if sys.getprofile() is None and _begins(frame, event, AT[1]):
        sys.settrace(None)
        os.kill(os.getpid(), signal.SIGINT)


sys.setprofile(_first)
if len(AT) > 1:
    sys.settrace(_second)
"""


def interrupted_at(
    warm: Warm, folder: Path, at: list[tuple[str, str]], *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """`python -m warmcli *args`, sent SIGINT as the first call of each function of `at`
    (a file's ending, the function's qualified name) begins, one after the other."""
    return hooked(warm, folder, HOOK.format(at=at), *args)


def hooked(
    warm: Warm, folder: Path, hook: str, *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """`python -m warmcli *args` with `hook` as its `sitecustomize`, in `folder`."""
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(hook)
    paths = [str(folder), *filter(None, [warm.env.get("PYTHONPATH")])]
    return subprocess.run(
        [sys.executable, "-m", "warmcli", *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(warm.env, PYTHONPATH=os.pathsep.join(paths)),
        cwd=ROOT,
        timeout=120,
    )


@pytest.fixture
def bundle(warm: Warm, tmp_path: Path) -> Path:
    (tmp_path / "plain.py").write_text(PLAIN)
    path = tmp_path / "b.warm"
    assert warm("run", tmp_path / "plain.py", "-b", path).returncode == 0
    return path


@pytest.mark.parametrize("name", ["WarmGroup.make_context", "WarmGroup.invoke"])
def test_ctrl_c_as_warms_group_begins_is_one_line_for_every_command(
    warm: Warm, tmp_path: Path, bundle: Path, name: str
) -> None:
    """Typer answers a KeyboardInterrupt that reaches its own `_main` with a bare exit 130:
    one landing as warm's group begins to parse or to invoke (before their `try`) printed
    nothing (stats, check, devices: exit 130, stderr empty; `--json`: stdout empty too)."""
    for args in (("stats", bundle), ("check", bundle), ("devices",)):
        done = interrupted_at(warm, tmp_path / "hook", [("warmcli/cli/app.py", name)], *args)
        assert (done.returncode, done.stderr) == (130, "warm: interrupted\n"), (args, done)
    at = [("warmcli/cli/app.py", name)]
    done = interrupted_at(warm, tmp_path / "hook", at, "stats", bundle, "--json")
    assert (done.returncode, done.stderr) == (130, "warm: interrupted\n"), done
    assert json.loads(done.stdout) == {"error": "interrupted", "exit": 130}


@pytest.mark.parametrize("name", ["Console.__exit__", "Console._exit_buffer"])
def test_ctrl_c_as_a_line_on_stderr_ends_leaves_that_line_and_interrupted(
    warm: Warm, tmp_path: Path, name: str
) -> None:
    """A Ctrl-C as Rich's print of a line ends (its `with` block left open: every later
    line of that console held, never written) lost the line and `warm: interrupted` with
    it: exit 130, stderr empty. Here the warning `devices` prints first."""
    args = ("devices", "--nvcc", "/no/nvcc", "--compiler", "nvrtc")
    warning = (
        "warm: warning: --nvcc /no/nvcc is not used: --compiler nvrtc compiles CUDA with NVRTC\n"
    )
    done = interrupted_at(warm, tmp_path / "hook", [("rich/console.py", name)], *args)
    assert (done.returncode, done.stderr) == (130, warning + "warm: interrupted\n"), done


@pytest.mark.parametrize(
    "second", [("rich/console.py", "Console._check_buffer"), ("cli/common.py", "json_requested")]
)
def test_a_second_ctrl_c_as_the_interrupt_is_said_leaves_one_line(
    warm: Warm, tmp_path: Path, bundle: Path, second: tuple[str, str]
) -> None:
    """A second Ctrl-C while `warm: interrupted` was said (Rich writing it, or once written,
    as `fail` went on to its JSON) escaped `fail` and was answered again: the line twice."""
    at = [("warmcli/cli/inspect.py", "stats"), second]
    done = interrupted_at(warm, tmp_path / "hook", at, "stats", bundle)
    assert (done.returncode, done.stderr) == (130, "warm: interrupted\n"), done
    done = interrupted_at(warm, tmp_path / "hook", at, "stats", bundle, "--json")
    assert (done.returncode, done.stderr) == (130, "warm: interrupted\n"), done
    assert json.loads(done.stdout) == {"error": "interrupted", "exit": 130}


FINALIZED = """\
import os, signal, sys


def _sends():  # SIGINT sent as this generator is finalized (its `finally`, run by its close)
    try:
        yield
    finally:
        os.kill(os.getpid(), signal.SIGINT)


def _at(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_qualname == "stats" and code.co_filename.endswith("inspect.py"):
        sys.setprofile(None)
        sending = _sends()
        next(sending)
        del sending  # (collected here: finalized as a Rich table's cell generator may be)


sys.setprofile(_at)
"""


def test_ctrl_c_as_a_generator_is_finalized_is_answered_not_printed_as_ignored(
    warm: Warm, tmp_path: Path, bundle: Path
) -> None:
    """A Ctrl-C answered while a generator is finalized (closed as it is collected: Rich's
    `Table._get_cells` as a table prints) raised where Python only prints what is raised:
    "Exception ignored in: <generator object ...>", a traceback, and the command went on to
    exit 0, the interrupt lost."""
    done = hooked(warm, tmp_path / "hook", FINALIZED, "stats", bundle)
    assert (done.returncode, done.stderr) == (130, "warm: interrupted\n"), done
