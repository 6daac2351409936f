"""review40: what today's merges (leftovers40, trial40, serve40) got wrong in cases their
tests did not try.

- `stopped_by_signal` knew a stop signal's handler only by the code of what
  `signal.getsignal` returned then: a handler set as a `functools.partial`, or an object with
  `__call__`, or one that put its signal's default back before its `sys.exit` (a common
  shape), was still told `workload called sys.exit(...)`, exit 2; and a `sys.exit` in the
  handler the workload called itself (`shutdown()` at its end) was told `warm: interrupted`,
  exit 130, though no signal came. A handler is now known as Python calls one: its
  arguments are a stop signal's number and the frame the signal interrupted.
- A workload's `print` at its import that met stdout's reader gone (`warm run w.py | head`)
  was `warm: error: w.py:2: workload failed to import: BrokenPipeError`, exit 2; the
  README says a workload's print meeting it ends the run with exit 1, nothing said, as the
  same print in its entry does.
- The `--entry main` hint was given for a `main` behind a decorator (`@click.command()`),
  which `--entry main` cannot call with a runtime (it fails on it).
- The changed-`key=` hint read every held shape of the operation again for each key form
  a miss met first (1M tune rows: ~1 s a miss); a listing's forms are made once now.

Real signals sent to this process, the real CLI in a subprocess, real files (a fake held
tune, named so, only to count reads).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.warming.script_main import runtime_main
from warmcli.warming.stop_signals import stopped_by_signal


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _exits(handler: Any, then: Callable[[], None]) -> SystemExit:
    """The `SystemExit` a workload meets with `handler` set for SIGTERM, as `then` runs."""
    signal.signal(signal.SIGTERM, handler)
    try:
        then()
    except SystemExit as exc:
        return exc
    raise AssertionError("no sys.exit")


def _exit_on(*args: Any) -> None:
    sys.exit(0)


class _Server:
    def __call__(self, signum: int, frame: Any) -> None:
        self.stop(signum)

    def stop(self, signum: int) -> None:
        sys.exit(128 + signum)


def _reset_then_exit(signum: int, frame: Any) -> None:
    signal.signal(signum, signal.SIG_DFL)  # as many handlers do before they exit
    sys.exit(0)


def _signalled() -> None:
    signal.raise_signal(signal.SIGTERM)


@pytest.mark.usefixtures("sigterm_restored")
@pytest.mark.parametrize(
    "handler",
    [_exit_on, functools.partial(_exit_on, "server"), _Server(), _Server().__call__],
    ids=["function", "partial", "callable-object", "method"],
)
def test_a_stop_signal_handlers_exit_is_a_stop_however_it_is_set(handler: Any) -> None:
    assert stopped_by_signal(_exits(handler, _signalled))


@pytest.mark.usefixtures("sigterm_restored")
def test_a_handler_that_resets_its_signal_before_exit_is_a_stop() -> None:
    assert stopped_by_signal(_exits(_reset_then_exit, _signalled))


@pytest.mark.usefixtures("sigterm_restored")
def test_the_handler_called_by_the_workload_itself_is_no_stop() -> None:
    """No signal came: the workload called its own shutdown function, which exits."""
    assert not stopped_by_signal(_exits(_exit_on, lambda: _exit_on()))
    assert not stopped_by_signal(_exits(_exit_on, lambda: _exit_on(signal.SIGTERM, None)))


HOST = r"""
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
"""

SHUTS_ITSELF = (
    "import signal, sys\n"
    + HOST
    + r"""
def shutdown(*_):
    sys.exit(0)
signal.signal(signal.SIGTERM, shutdown)
def workload(rt):
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    shutdown()
"""
)


def test_a_workload_calling_its_own_handler_is_its_sys_exit(warm: Warm, tmp_path: Path) -> None:
    """It was `warm: interrupted: ... kept`, exit 130, though nothing stopped the run."""
    (tmp_path / "w.py").write_text(SHUTS_ITSELF)
    done = warm("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2, done.stderr
    assert "workload called sys.exit(0)" in done.stderr, done.stderr
    assert "interrupted" not in done.stderr, done.stderr


PRINTS_AT_IMPORT = (
    'print("loading", flush=True)\n'
    + HOST
    + r"""
def workload(rt):
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""
)


@pytest.mark.parametrize("how", ["file", "module"])
def test_a_print_at_import_meeting_stdouts_reader_gone(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    """`warm run w.py | head` where the print is at the workload's import: exit 1 and
    nothing said, as the README says (and as the same print in its entry gives)."""
    (tmp_path / "w.py").write_text(PRINTS_AT_IMPORT)
    given = (tmp_path / "w.py",) if how == "file" else ("-m", "w")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the workload prints
    try:
        done = subprocess.run(
            [sys.executable, "-m", "warmcli", "run", *map(str, given), "-b", "b.warm", "-q"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=warm.env,
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, ""), done.stderr


def test_no_entry_main_hint_for_a_decorated_main(warm: Warm, tmp_path: Path) -> None:
    """`@click.command() def main(n)` looks like a main one argument calls, but `--entry
    main` calls the command with the runtime, which fails; the hint named it."""
    script = tmp_path / "cli.py"
    script.write_text(
        "import click\n@click.command()\n@click.option('--n', default=1)\ndef main(n):\n"
        "    print(n)\nif __name__ == '__main__':\n    main()\n"
    )
    assert not runtime_main(script, "workload")
    done = warm("run", script, "-b", tmp_path / "b.warm", cwd=ROOT)
    assert done.returncode == 2 and "--entry main" not in done.stderr, done.stderr
    plain = tmp_path / "plain.py"
    plain.write_text("def main(rt=None):\n    pass\nif __name__ == '__main__':\n    main()\n")
    assert runtime_main(plain, "workload")  # undecorated: hinted, as before


def test_the_last_main_defined_is_the_one_hinted(tmp_path: Path) -> None:
    """Python binds the last `def main`: the hint asks about that one, not the first."""
    script = tmp_path / "twice.py"
    script.write_text("def main(rt):\n    pass\ndef main(a, b, c):\n    pass\n")
    assert not runtime_main(script, "workload")


class _CountedShape(dict[str, str]):
    """A fake held tune's components that counts how often its shape is read."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        if key == "shape":
            _CountedShape.reads += 1
        return super().get(key, default)


def test_the_key_form_hint_reads_a_listings_shapes_once() -> None:
    """Each miss of a key form not seen before read every held shape again (1M tune rows of
    an operation: ~1 s a miss); the listing's forms are now made once, at its first hint."""
    from warmcli.runtime.nearest import KEY_CHANGED, Listed, key_form_hint

    held = [_CountedShape(shape=f"float32[{i}] {i}") for i in range(1000)]
    listed: Listed[Any] = Listed(held)
    _CountedShape.reads = 0
    wanted = ['["rows", 16]', '["rows", 16, 2]', "[1, 2, 3]", "float32[7] 7", "7"]
    hints = [key_form_hint(listed, shape) for shape in wanted]
    assert hints == [KEY_CHANGED, KEY_CHANGED, KEY_CHANGED, "", KEY_CHANGED]
    assert _CountedShape.reads == len(held)
