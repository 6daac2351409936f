"""The CLI's start: its values converted without Pydantic, exactly as Typer's own would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_hostile_schema import matmul_bundle

from warmcli.cli import app
from warmcli.cli.plain_params import plain

# Typer's private seam warm's converter sits in (typer 0.2x): other Typers keep their own.
BadParameter = pytest.importorskip("typer._click.exceptions").BadParameter
build_runtime_param = pytest.importorskip("typer._coercion").build_runtime_param

TEXTS = [
    "3", " 3 ", "3.0", "3.5", "1e3", "0x10", "1_000", "+3", "-0", "0", "inf", "nan", "",
    "abc", "\uff11\uff12", "0.05", "1e400", "3.", ".5", "0.1", "yes", "NO", "On", "t", "F",
    "y", "2", " true ", "maybe", "some/path.warm", "-", "sm_90", "3.00", "1__0", "_1", "1_", " ",
    "+", "-1", "1e-1", "Infinity", "+inf", "nul\x00inside",
]  # fmt: skip


NAN = "Input should be a valid number, not NaN (not a number)"


def _outcome(runtime: Any, value: Any, param: Any) -> Any:
    try:
        return ("ok", runtime.coerce(value, param=param, ctx=None))
    except BadParameter as exc:
        return ("error", exc.message)


def _params() -> list[Any]:
    root = typer.main.get_command(app)
    params = list(root.params)
    for command in root.commands.values():  # type: ignore[attr-defined]
        params += command.params
    return params


def test_every_parameter_of_warm_converts_as_typer_does() -> None:
    params = _params()
    covered = 0
    for param in params:
        ours = plain(param.type_descriptor)
        if ours is None:
            continue
        covered += 1
        theirs = build_runtime_param(param.type_descriptor)
        many = param.multiple or param.nargs == -1
        for text in TEXTS:
            value: Any = (text, text) if many else text
            expected = _outcome(theirs, value, param)
            if text == "nan" and "should be" in str(expected[1]) and "than" in str(expected[1]):
                expected = ("error", NAN)  # a bound NaN misses: warm says why instead
            if text == "" and param.type_descriptor.annotation is Path:  # Typer's: `.`
                expected = ("error", "the path is empty: name a file")  # (test_cli42)
            assert _outcome(ours, value, param) == expected, (param.name, text)
    assert covered == len(params), "every parameter of warm's is plain"


def test_a_path_that_exists_is_checked_as_typer_does(tmp_path: Path) -> None:
    unreadable = tmp_path / "locked.warm"
    unreadable.write_bytes(b"")
    unreadable.chmod(0)
    paths = [p for p in _params() if p.type_descriptor.annotation is Path]
    param = paths[0]
    ours, theirs = plain(param.type_descriptor), build_runtime_param(param.type_descriptor)
    for value in (str(unreadable), str(tmp_path), str(tmp_path / "none.warm")):
        assert _outcome(ours, value, param) == _outcome(theirs, value, param)


@pytest.mark.parametrize(
    "args", [["stats", "--help"], ["--help"], ["stats", "/no/such.warm", "--json"]]
)
def test_a_command_imports_no_pydantic(args: list[str]) -> None:
    code = (
        "import sys; sys.argv = ['warm', *sys.argv[1:]]\n"
        "from warmcli.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('PYDANTIC', 'pydantic' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    assert "PYDANTIC False" in done.stderr, done.stderr


def test_a_process_that_holds_nothing_ends_at_once_its_atexit_functions_run(
    tmp_path: Path,
) -> None:
    mark = tmp_path / "atexit-ran"
    code = (
        "import atexit, pathlib, sys\n"
        "from warmcli.cli.common import end_process, holds_nothing, out\n"
        f"atexit.register(lambda: pathlib.Path({str(mark)!r}).write_text('yes'))\n"
        "out.print('printed', end='')\n"  # a partial line, flushed on the way out
        "holds_nothing()\n"
        "end_process(3)\n"
        "sys.exit(9)  # never reached\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3 and done.stdout == "printed" and mark.read_text() == "yes"


def test_a_process_ends_as_usual_unless_it_holds_nothing_and_no_thread_works() -> None:
    import threading

    from warmcli.cli import common

    common._Teardown.needless = False  # (an in-process command of an earlier test may have)
    assert common.end_process(0) is None  # nobody said holds_nothing
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        common.holds_nothing()
        assert common.end_process(0) is None  # a thread still works: the usual exit waits
    finally:
        common._Teardown.needless = False
        release.set()
        worker.join()


@pytest.mark.parametrize(
    ("args", "absent"),
    [
        (["--version"], ["typing", "re", "warmcli.cli"]),  # answered before the CLI's imports
        (["stats", "/no/such.warm", "--json"], ["warmcli.bundle.remote"]),  # a path: no fetching
    ],
)
def test_a_command_imports_nothing_it_does_not_use(args: list[str], absent: list[str]) -> None:
    code = (
        "import sys; sys.argv = ['warm', *sys.argv[1:]]\n"
        "from warmcli.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('IMPORTED', [m for m in {absent!r} if m in sys.modules], file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    assert "IMPORTED []" in done.stderr, done.stderr


def test_stats_of_a_bundle_imports_no_numpy(warm: Warm, tmp_path: Path) -> None:
    """`warm stats` reads kernels' stored defines (`kernel_parts.stored`): that module's
    reading of numpy defines imported numpy for it (~40 ms of a 130 ms command)."""
    bundle = tmp_path / "b.warm"
    matmul_bundle(warm, bundle)
    done = subprocess.run(  # every module imported, said on stderr as it is
        [sys.executable, "-X", "importtime", "-m", "warmcli", "stats", str(bundle)],
        capture_output=True,
        text=True,
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "matmul" in done.stdout and "warmcli.kernel_parts" in imported, done.stderr
    assert "numpy" not in imported, done.stderr
