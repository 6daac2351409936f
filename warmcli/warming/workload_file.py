"""The file given as a workload, checked before it is imported: that it is a Python file.

A folder is told its `-m` name where it is a package (`warmcli.warming.script_main.as_module`), a
missing `w` whose `w.py` exists is told to name it whole, one that is there but no regular file
(a FIFO, a device) is said so, and a file that is not `.py` is refused;
a Jupyter notebook (`.ipynb`) is told how to make one of it, as warm does not run notebooks: its
cells may hold IPython's magics (`%timeit`, `!pip`), which are no Python, its top-level work is not
warmed anyway (only what `workload(rt)` does on its runtime is), and a `spawn` worker imports the
workload by its file. A module `-m` names that Python has built in (`stat`, `os`: found before
any folder, as `python -m` finds it) is said so, not as no module (a `stat.py` in the working
folder told how to run it), a namespace package (a folder with no `__init__.py`) as a package
naming its modules that define a workload, and a file's name or path given to `-m` (`w.py`,
`app/sub/w.py`) is told its dotted name (`-m app.sub.w`). This module owns nothing and never
imports the file; it raises `WorkloadError`, one line each (`no_such_module` says the `-m` one).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from warmcli.errors import WorkloadError
from warmcli.warming.script_main import as_module, package_modules


def check_workload_file(path: Path) -> None:
    """Raise `WorkloadError` unless `path` is a Python file warm can import as a workload."""
    if path.is_dir():
        hint = as_module(path, package=True)
        raise WorkloadError(f"{path}: is a directory, not a workload file{hint}")
    if path.exists() and not path.is_file():  # a FIFO, a device: never opened
        raise WorkloadError(f"{path}: is no regular file: a workload is a Python file (.py)")
    if not path.is_file():
        hint = f" ({path}.py is one: name it whole)" if Path(f"{path}.py").is_file() else ""
        raise WorkloadError(f"{path}: no such workload file{hint}")
    if path.suffix.lower() == ".ipynb":
        raise WorkloadError(f"{path}: a Jupyter notebook: {notebook_hint(path)}")
    if path.suffix != ".py":
        raise WorkloadError(f"{path}: a workload is a Python file (.py)")


def notebook_hint(path: Path) -> str:
    """How to warm notebook `path`: its Python file beside it (jupytext's pairing), else
    nbconvert's export, its kernels and launches moved into `def workload(rt)`."""
    script = path.with_suffix(".py")
    if script.is_file():
        return f"warm runs a Python file (.py): {script} is beside it, name that"
    return (
        f"warm runs a Python file (.py): export its code with `jupyter nbconvert --to script "
        f"{path}`, remove IPython's magics (%, !) and put its GPU work in def workload(rt)"
    )


def no_such_module(name: str, found: str | None, spec: Any = None, entry: str = "workload") -> str:
    """Why `-m name` is no workload module, found as `found` (None: not found at all, or a
    namespace package, found by `spec` with no `__init__.py`)."""
    folders = list(getattr(spec, "submodule_search_locations", None) or ())
    if found is None and folders and isinstance(folders[0], str):  # `python -m` runs none
        listed = package_modules(Path(folders[0]), name, entry)
        return f"{name}: a namespace package (no __init__.py nor __main__.py): no workload{listed}"
    if hint := module_path_hint(name):
        return f"{name}: no such workload module ({hint})"
    if name.startswith("."):
        return f"{name}: a relative module name: name it whole (pkg.module)"
    if found not in ("built-in", "frozen"):
        return f"{name}: no such workload module (looked in {os.getcwd()} first)"
    mine = Path(os.getcwd(), *name.split(".")).with_suffix(".py")
    run = f": rename {mine.name}, or give the file (warm run {mine})" if mine.is_file() else ""
    return f"{name}: a module built into Python ({found}), no workload{run}"


def module_path_hint(name: str) -> str:
    """Why `-m name` found no module where `name` is a file's name or path (`w.py`,
    `app/sub/w.py`), naming its dotted name, and the file where the working folder holds it
    (a folder's path, `app/sub/`, names no file); else ""."""
    stem = name.removesuffix(".py")
    if stem == name and "/" not in name and os.sep not in name:
        return ""
    rel = os.path.normpath(os.path.relpath(stem) if os.path.isabs(stem) else stem)
    parts = rel.replace(os.sep, ".").split(".")  # (`-m pkg.mod.py`: `-m pkg.mod`)
    dotted = f", or -m {'.'.join(parts)}" if all(p.isidentifier() for p in parts) else ""
    if "/" not in name and os.sep not in name:
        return f"a .py file is no module name: give the file itself, not -m{dotted}"
    file = f" (warm run {stem}.py)" if os.path.isfile(f"{stem}.py") else ""  # (not `app/.py`)
    return f"a path is no module name: give the file itself{file}, not -m{dotted}"
