"""A user's install (stop 53): warm as `pip install` makes it, a wheel in a fresh venv, run
from a folder that is not the checkout, where every other test runs warm from the checkout.
The sdist and its wheel are built once, offline (setuptools' own backend, no build isolation),
from a copy of the tree whose `warmcli/_version.py` says another version, the wheel installed
with pip (`--no-index --no-deps`) into a venv that finds warm's libraries in the test venv's
(a `.pth`). What the trial found, by hand (fresh venvs on 3.11.7, 3.12.1 and 3.13.0, each extra):
- `typer>=0.12` was asked, but warm's CLI imports typer's private `typer._click` (typer 0.26
  made it), `typer._coercion` and `typer._param_types` (0.29): with typer 0.12 to 0.25 every
  command but `--version` ended in `ModuleNotFoundError: No module named 'typer._click'`, a
  traceback, exit 1; with 0.26 to 0.28 warm started, its own value checks gone (`warm run w.py
  -b -q` wrote a bundle named `-q`). It asks for `typer>=0.29` now (and `rich>=13.8`, what
  typer 0.29 asks, the oldest it ran with), and a CLI whose imports fail (a typer another
  install put back) says so in one line, exit 2, naming what warm needs.
- the version was written twice, pyproject.toml's for pip and `_version.py`'s for `warm
  --version` and the bundle's manifest: a release that bumped one said two versions. pip's
  is `_version.py`'s now (setuptools' `dynamic`).
- the sdist held 472 of tests/' 497 files, the `test*.py` setuptools takes by default, none of
  the conftest.py and helpers they import: tests that could not run. It holds none now
  (MANIFEST.in): they need a checkout. The wheel is built from the sdist, as pip does."""

from __future__ import annotations

import ast
import email.parser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OTHER_VERSION = "0.1.0.dev53"  # the copy's `_version.py`: a version pyproject.toml never says

# typer's private modules warm imports, and the typer release that first had each (read from
# their wheels): a new one warm imports is added here, and pyproject.toml's floor follows it.
TYPER_PRIVATE_SINCE = {"typer._click": (0, 26), "typer._coercion": (0, 29)}
TYPER_PRIVATE_SINCE["typer._param_types"] = (0, 29)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """warm's sdist, and its wheel built from the sdist unpacked, as pip builds one from an
    sdist: from a copy of the tree (no `build/` of the checkout's to take stale modules from)
    whose `_version.py` says OTHER_VERSION."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "warmcli", tree / "warmcli", ignore=shutil.ignore_patterns("__py*"))
    (tree / "tests").mkdir()  # a test and its conftest.py: setuptools took the first alone
    for name in ("conftest.py", Path(__file__).name):
        shutil.copy(ROOT / "tests" / name, tree / "tests" / name)
    version = tree / "warmcli" / "_version.py"
    said = re.sub(r'__version__ = "[^"]+"', f'__version__ = "{OTHER_VERSION}"', version.read_text())
    assert OTHER_VERSION in said
    version.write_text(said)
    out = tmp_path_factory.mktemp("built")
    build = (  # (setuptools' backend rewrites sys.argv: the folder is read first)
        "import os, sys, tarfile; from setuptools import build_meta as b; out = sys.argv[1]\n"
        "sdist = os.path.join(out, 'sdist', b.build_sdist(out + '/sdist'))\n"
        "tarfile.open(sdist).extractall(out + '/unpacked', filter='data')\n"
        "os.chdir(out + '/unpacked/' + os.path.basename(sdist).removesuffix('.tar.gz'))\n"
        "print(sdist); print(os.path.join(out, 'wheel', b.build_wheel(out + '/wheel')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, out], cwd=tree, capture_output=True, text=True, check=True
    )
    sdist, wheel = [line for line in done.stdout.splitlines() if line.startswith(str(out))]
    return Path(sdist), Path(wheel)


@pytest.fixture(scope="module")
def wheel(built: tuple[Path, Path]) -> Path:
    return built[1]


def test_the_sdist_holds_what_builds_the_wheel_and_no_tests_cut_from_theirs(
    built: tuple[Path, Path],
) -> None:
    with tarfile.open(built[0]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    top = {n.split("/")[0] for n in names}
    assert top == {"warmcli", "warmcli.egg-info", "README.md", "pyproject.toml", "PKG-INFO"} | {
        "setup.cfg",
        "MANIFEST.in",
    }, top


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        text = z.read(f"warmcli-{OTHER_VERSION}.dist-info/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def test_the_wheel_says_the_version_warm_says(wheel: Path) -> None:
    assert wheel.name == f"warmcli-{OTHER_VERSION}-py3-none-any.whl"
    meta = _metadata(wheel)
    assert meta["Version"] == OTHER_VERSION
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"
    extras = set(meta.get_all("Provides-Extra"))
    assert {"cuda", "nvrtc", "nvcc", "sign", "s3", "dask"} <= extras  # as the README names them


def test_the_wheel_holds_warmcli_whole_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = z.read(f"warmcli-{OTHER_VERSION}.dist-info/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"warmcli", f"warmcli-{OTHER_VERSION}.dist-info"}
    tracked = subprocess.run(
        ["git", "ls-files", "warmcli"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked and set(tracked) <= names  # every file of the package: data too, were any
    assert "warm = warmcli.__main__:main" in entry.splitlines()


def test_typer_is_asked_for_from_the_release_with_what_warm_imports_of_it(wheel: Path) -> None:
    imported = set()
    for path in (ROOT / "warmcli").rglob("*.py"):
        imported |= set(re.findall(r"\b(typer\._\w+)", path.read_text()))
    assert imported and imported <= set(TYPER_PRIVATE_SINCE), imported - set(TYPER_PRIVATE_SINCE)
    asked = [r for r in _metadata(wheel).get_all("Requires-Dist") if r.startswith("typer")]
    floor = re.fullmatch(r"typer>=(\d+)\.(\d+)(?:\.\d+)?", asked[0])
    assert floor, asked
    assert (int(floor[1]), int(floor[2])) >= max(TYPER_PRIVATE_SINCE[m] for m in imported)


def test_a_cli_whose_typer_is_too_old_says_so_in_one_line(tmp_path: Path) -> None:
    """A typer 0.20 (one with no `typer._click`, as an install for another tool may put back)
    first on the path: the typer package as such a release is, its version, no `_click`."""
    old = tmp_path / "old" / "typer"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text('"""typer 0.20: no _click yet."""\n__version__ = "0.20.0"\n')
    env = dict(os.environ, PYTHONPATH=f"{old.parent}{os.pathsep}{ROOT}")
    for args in (["stats", "b.warm"], ["stats", "b.warm", "--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "warmcli", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        line = re.escape("warm: error: the CLI cannot start: No module named 'typer._click' (")
        line += r"typer 0\.20\.0 is installed; warm \S+ needs typer>=0\.29: pip install 'typer"
        assert re.fullmatch(line + r">=0\.29'\)\n", proc.stderr), proc.stderr
    assert '"exit": 2' in proc.stdout


def test_the_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """pip installs it (no index, no dependencies: the test venv's, through a `.pth`), and
    `warm` runs from a folder that is no checkout, its modules the installed ones."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "-q", "--no-cache-dir"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    subprocess.run([*pip, "install", "--no-index", "--no-deps", wheel], env=env, check=True)
    env["WARM_HOME"] = str(tmp_path / "home")
    there = subprocess.run(
        [venv / "bin" / "warm", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert there.stdout == f"warm {OTHER_VERSION}\n"
    code = "import sys, warmcli; print(warmcli.__file__); print(sorted(m for m in sys.modules))"
    imported = subprocess.run(
        [python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert imported[0] == f"{site}/warmcli/__init__.py"
    loaded = ast.literal_eval(imported[1])
    unwanted = [m for m in loaded if m.split(".")[0] in ("cuda", "pycuda", "typer")]
    assert unwanted == []  # import warmcli imports no CUDA, nor the CLI's libraries
    missing = subprocess.run(
        [venv / "bin" / "warm", "stats", "none.warm"], cwd=tmp_path, env=env, capture_output=True
    )
    assert (missing.returncode, missing.stderr) == (2, b"warm: error: none.warm: no such bundle\n")
