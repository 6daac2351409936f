"""What a workload's import did that `warm run` warns of: the production runtime asked for at
import (bound late: `workload.late_runtimes`), and modules beside the workload it does not get.

A workload's folder is first on `sys.path`, as under `python workload.py`, so `import copy`
would take a `copy.py` beside it, but only where no `copy` was imported before: warm's worker
imported many of the standard library's modules before the workload (`copy`, `uuid`, `base64`,
`zlib`, `fnmatch`, ...) and Python's `import` hands back the module already imported, so the
workload got the standard library's, where `python workload.py` imports the user's (a
`copy.X` of its own: `AttributeError: module 'copy' has no attribute 'X'`, exit 2, with
nothing saying why; or, where both define the name, other code warmed than production runs).
`shadowed` finds each: a module the workload's own modules (its file and those beside it) hold,
or hold a function or class of, whose file is not the one of its name beside the workload
(none where the folder holds no other module: `_nothing_beside`, one listing of it).
Pure reads of `sys.modules` and the folder: no state, nothing imported, nothing printed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import FunctionType, ModuleType

from warmcli.printable import printable

UNBOUND = (
    "the workload's import used warmcli.runtime() before warm binds a pass's runtime: what "
    "it did there is not warmed (what workload() does on that runtime is): do it inside "
    "workload(rt)"
)


_NEVER_BESIDE = frozenset({*sys.builtin_module_names, "__main__"})


def _file(module: object) -> Path | None:
    """Where `module` was loaded from (None: a builtin, a namespace package, no module)."""
    file = getattr(module, "__file__", None) if isinstance(module, ModuleType) else None
    return _file_of(Path(file)) if isinstance(file, str) else None


def _file_of(path: Path) -> Path | None:
    """`path` resolved (None where it cannot be)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError):  # a link loop, a NUL: no file of the folder's
        return None


def _folder(
    module: object, folders: dict[str, Path | None], mark: tuple[int, int] | None
) -> Path | None:
    """The folder `module`'s file resolves into, as `_file(module).parent` (None where it has
    no file or it cannot be resolved), or None where that is not the workload's (`mark`: its
    folder's device and inode; None where unknown): a file that is no link is in its folder
    resolved, each folder resolved once in `folders`, by the text of its file's name before
    its last `/` (a run holds ~500 modules in ~40 folders: resolving each file whole, an
    `lstat` per part of its path, took 30-60 ms of every `warm run`; a `Path` made and hashed
    for each module, ~7 ms more: only a folder not yet seen is made one), and only where one
    `stat` finds it the workload's folder (resolving each of the ~40, an `lstat` per part of
    its path, was ~2.5 ms of every run: a folder of another inode resolves elsewhere)."""
    file = getattr(module, "__file__", None) if isinstance(module, ModuleType) else None
    if not isinstance(file, str):
        return None
    head, name = os.path.split(file)
    if name in ("", ".", "..") or os.path.islink(file):  # (a link's target's folder, whole;
        path = Path(file)  # a name `Path` reads otherwise than its text: as it reads it)
        if path.name in ("", "..") or os.path.islink(path):
            return getattr(_file_of(path), "parent", None)
        return _file_of(path.parent)
    if head not in folders:
        folders[head] = _file_of(Path(file).parent) if _may_be(head, mark) else None
    return folders[head]


def _may_be(head: str, mark: tuple[int, int] | None) -> bool:
    """Whether the folder `head` names may resolve to the one `mark` is of (True where either
    is unknown: `stat` failed, or no mark)."""
    if mark is None:
        return True
    try:
        found = os.stat(head)
    except (OSError, ValueError):  # (none there, a NUL: as resolving it says)
        return True
    return (found.st_dev, found.st_ino) == mark


def _named(value: object) -> str | None:
    """The top-level module `value` is or was defined in (a module, a function, a class)."""
    if isinstance(value, ModuleType):
        name = value.__name__
    elif isinstance(value, FunctionType | type):
        name = value.__module__
    else:
        return None
    return name.partition(".")[0] if isinstance(name, str) else None


def _nothing_beside(folder: Path, own_file: Path) -> bool:
    """Whether `folder` holds no module a name could find beside the workload `own_file`: no
    entry but its own ends `.py` (in any case: a case-blind file system finds `Copy.PY` for
    `copy.py`) and no folder in it holds an `__init__.py` (as `shadowed` looks for either, by
    `isfile`); False where it cannot be listed. Then no warning can be made, and the ~400
    modules a run holds need not be looked at (~2-4 ms of every `warm run`'s worker)."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name == own_file.name:
                    continue
                if entry.name.lower().endswith(".py") or (
                    not entry.is_file() and os.path.isfile(os.path.join(entry.path, "__init__.py"))
                ):
                    return False
    except (OSError, ValueError):
        return False
    return True


def shadowed(workload: Path) -> list[str]:
    """One warning per module beside `workload` that its modules use another of the name of."""
    own_file = workload.resolve()
    folder = own_file.parent
    if _nothing_beside(folder, own_file):
        return []
    folders: dict[str, Path | None] = {}
    try:
        found = os.stat(folder)
        mark: tuple[int, int] | None = (found.st_dev, found.st_ino)
    except (OSError, ValueError):
        mark = None
    own = [m for m in list(sys.modules.values()) if _folder(m, folders, mark) == folder]
    used = {_named(v) for m in own for v in list(vars(m).values())} - {None}
    lines = []
    # (a builtin module is Python's first under Python too; `__main__` is the running script
    # under Python, never a `__main__.py` beside it: that is a folder's, for `python folder`)
    names = (n for n in used if n.isidentifier() and n not in _NEVER_BESIDE)
    for name in sorted(names):
        got = _file(sys.modules.get(name))
        for beside in (f"{name}.py", f"{name}/__init__.py"):  # (`isfile`: a name too long
            # for a file, a folder it may not read, is none there; `Path.is_file` raised)
            if os.path.isfile(folder / beside) and _file_of(folder / beside) not in (got, own_file):
                lines.append(
                    f"{beside} beside the workload is not the {name} it imports: warm had "
                    f"imported {printable(got or name)} first, which it gets under warm run "
                    f"(python {printable(workload.name)} may import yours): rename "
                    f"{beside.split('/')[0]}"
                )
                break
    return lines


def import_warnings(unbound: str, workload: Path | None) -> list[str]:
    """What `warm run` warns of once the workload is imported, each one line (`workload`: its
    file; None for a module, `-m pkg.mod`, whose folder is not first on `sys.path`)."""
    return ([f"{unbound}: {UNBOUND}"] if unbound else []) + (
        shadowed(workload) if workload is not None else []
    )
