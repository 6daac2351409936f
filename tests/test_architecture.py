"""The package's house rules, checked on its source (ARCHITECTURE.md, issue 13).

One error base: every exception class warm defines derives from `warmcli.WarmError`
(every warning from `WarmWarning`), but `RunInterrupted`, a `KeyboardInterrupt`. One
config module: no module but `warmcli/config.py` reads the environment, and every
`WARM_*` variable it lists is documented. Every public name resolves. Every module
stays under about 400 lines. (The import contracts are import-linter's, in `make lint`.)
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import warmcli
from warmcli import config
from warmcli.errors import RunInterrupted, WarmError, WarmWarning

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "warmcli"
MAX_LINES = 400

# Not imported by the scan: importing it opens a GPU context (it holds no class; see below).
NOT_IMPORTED = {"warmcli.pycuda.autoinit"}
# Exceptions that are no `WarmError`, and why.
NOT_WARM_ERRORS = {
    "warmcli.errors.RunInterrupted": "a KeyboardInterrupt: `except Exception` must not swallow it",
    "warmcli.errors.KeptInterrupted": "likewise: a clean or pull interrupted once it is kept",
    "warmcli.errors.MergeInterrupted": "likewise: a merge interrupted once OUT is in place",
    "warmcli.errors.PushInterrupted": "likewise: a push interrupted once the store holds it",
}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


# Run in a fresh interpreter: importing every module (the CUDA and PyCUDA layers too) must
# not leak into the tests that check what a process imports.
_SCAN = """
import importlib, inspect, json, sys
names = json.loads(sys.argv[1])
found = []
for name in names:
    module = importlib.import_module(name)
    for attr, value in vars(module).items():
        if (inspect.isclass(value) and issubclass(value, BaseException)
                and value.__module__ == name):
            found.append([name, value.__qualname__])
print(json.dumps(found))
"""


@functools.cache
def _exception_classes() -> list[type[BaseException]]:
    names = [n for n in _modules() if n not in NOT_IMPORTED]
    out = subprocess.run(
        [sys.executable, "-c", _SCAN, json.dumps(names)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    return [getattr(importlib.import_module(m), q) for m, q in json.loads(out)]


def test_every_exception_derives_from_warm_error() -> None:
    classes = _exception_classes()
    named = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    assert {"warmcli.errors.WarmError", "warmcli.errors.StrictMissError"} <= named
    assert "warmcli.errors.BundleError" in named
    wrong = []
    for cls in classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name in NOT_WARM_ERRORS or cls.__name__.startswith("_"):  # private control flow
            continue
        base = WarmWarning if issubclass(cls, Warning) else WarmError
        if not issubclass(cls, base):
            wrong.append(f"{name} is no {base.__name__}")
    assert not wrong, "\n".join(wrong)
    assert not issubclass(RunInterrupted, Exception)  # so no `except Exception` catches it


def test_every_exception_is_defined_in_errors() -> None:
    """The modules that raise them import them from `warmcli.errors` (and so still export
    them); they define none of their own."""
    elsewhere = [
        f"{c.__module__}.{c.__qualname__}"
        for c in _exception_classes()
        if c.__module__ != "warmcli.errors" and not c.__name__.startswith("_")
    ]
    assert not elsewhere


def test_the_unimported_modules_define_no_class() -> None:
    for name in NOT_IMPORTED:
        tree = ast.parse(_modules()[name].read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)], name


_OS_ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _environment_reads(path: Path) -> list[str]:
    """Where a module touches the process environment through `os` (however imported)."""
    tree = ast.parse(path.read_text(), str(path))
    os_names = {"os"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
    reads: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            reads += [
                (node.lineno, f"from os import {a.name}")
                for a in node.names
                if a.name in _OS_ENVIRONMENT
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _OS_ENVIRONMENT
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        ):
            reads.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return [f"{line}: {what}" for line, what in sorted(reads)]


def test_only_config_reads_the_environment() -> None:
    found = {
        name: reads
        for name, path in _modules().items()
        if name != "warmcli.config" and (reads := _environment_reads(path))
    }
    assert not found
    assert _environment_reads(PACKAGE / "config.py")  # the scan does see a read


def test_the_scan_sees_every_way_to_read_the_environment(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nimport os as o\nfrom os import getenv, path\n"
        "os.environ.get('X')\no.getenv('Y')\n"
    )
    assert _environment_reads(sample) == [
        "3: from os import getenv",
        "4: os.environ",
        "5: o.getenv",
    ]


def test_every_variable_is_documented() -> None:
    """`config.VARIABLES` (which `warm --help` lists) is the README's table, both ways."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(WARM_[A-Z_]+)`", section))
    listed = {v.name for v in config.VARIABLES}
    assert documented == listed
    from warmcli.cli.app import ENV_HELP

    assert all(name in ENV_HELP for name in listed)


def test_config_reads_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARM_BUNDLE", "/some/where.warm")
    assert config.bundle() == "/some/where.warm"
    monkeypatch.setenv("WARM_BUNDLE", "")
    assert config.bundle() == ""
    monkeypatch.delenv("WARM_BUNDLE")
    assert config.bundle() is None
    assert config.bundle({"WARM_BUNDLE": "s3://b/k.warm"}) == "s3://b/k.warm"
    env = {"WARM_SHARD": "1/2", "RANK": "0", "PATH": "/bin"}
    assert config.shard_variables(env) == {"WARM_SHARD": "1/2", "RANK": "0"}
    assert config.worker_environment(env) == {"PATH": "/bin"}


def test_every_public_name_resolves() -> None:
    assert "WarmError" in warmcli.__all__ and warmcli.WarmError is WarmError
    for name in warmcli.__all__:
        assert getattr(warmcli, name) is not None, name


def _long_modules() -> list[str]:
    lengths = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    return [f"{n}: {count} lines" for n, count in sorted(lengths.items()) if count > MAX_LINES]


def test_no_module_is_over_400_lines() -> None:
    assert not _long_modules()
