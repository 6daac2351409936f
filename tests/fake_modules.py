"""Stand-in modules for the shadowed-module check's tests (fakes: `types.ModuleType`s with a
`__file__`, never imported nor run), what `warmcli.warming.shadowed` walks in a run that has
loaded hundreds of modules. It owns only the entries it puts in `sys.modules`, and always takes
them out again; it never writes a module's file."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def spread_modules(
    tmp_path: Path, prefix: str, count: int = 400, spread: int = 4
) -> Iterator[tuple[list[Path], Path]]:
    """`count` modules named `prefix` and a number, their files in `spread` folders of
    `tmp_path` (made), in `sys.modules` while the block runs; yields the folders and an empty
    workload file in a folder of its own (`work/workload.py`)."""
    folders = [tmp_path / f"f{i}" for i in range(spread)]
    names = []
    try:
        for i in range(count):
            folder = folders[i % spread]
            folder.mkdir(exist_ok=True)
            module = types.ModuleType(f"{prefix}{i}")
            module.__file__ = str(folder / f"m{i}.py")
            names.append(module.__name__)
            sys.modules[module.__name__] = module
        workload = tmp_path / "work" / "workload.py"
        workload.parent.mkdir()
        workload.write_text("")
        yield folders, workload
    finally:
        for name in names:
            sys.modules.pop(name, None)
