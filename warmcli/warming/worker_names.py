"""The names a worker process imports a workload file by, to unpickle what it defines.

A `spawn` or `forkserver` worker (multiprocessing, `concurrent.futures`) unpickles a
function by its module's name and imports that module afresh, as it imports a script's
`__main__` under Python. `warm run` imports the workload under a private name; where the
file's own name (its stem) is free, the module is known by that name too (`known_by`), so
the worker imports the file itself. Where it is not (a `test.py` or `calendar.py` would hide
Python's own module), the worker imports it by its private name, from a stub file that runs
the workload file as that module (`importable_by_stub`): one folder of stubs per process,
private to this user (0700, under a name of 96 random bits, as `mkdtemp` makes one), last
on `sys.path` (which a spawned worker inherits; the private names hide nothing). Its name
is chosen (`make_folder`) before `warm run` forks its worker, the folder made only by a
worker that writes a stub (most workloads hide no module: no `mkdir` and no `rmdir` for
them), or used as it is where a worker before it (a run started again after a crashed
candidate) made it; it is removed when the process that chose its name ends (nothing to
do where none was made), or (`remove_folder`) by `warm run`'s worker where that process
was killed (SIGKILL: no exit handler runs). A package such a worker lacks where this process
has a stand-in (`--pycuda --arch`'s `pycuda`, in `sys.modules` only) is a package there too
(`lacking_in_workers`): importing it raises a `ModuleNotFoundError` that says why, and marks
that it was imported (`lacking_imported`), so the run's error can say so where the worker's
own was not handed back (a pool broken by a worker that failed to unpickle its task). This
module owns that folder; it never imports or runs a workload itself.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import os
import shutil
import stat
import sys
import tempfile
import types
from pathlib import Path
from types import ModuleType

# A stub: the workload file run as this module, its `__file__` the file's own.
_STUB = """# warm: the workload file {path!r}, imported by a worker process by warm's private name.
__file__ = {path!r}
with open(__file__, "rb") as _warm_source:
    _warm_code = compile(_warm_source.read(), __file__, "exec")
del _warm_source
exec(_warm_code)
"""
_folder: list[str] = []  # this process's stub folder's name, once chosen
# A package a worker lacks: importing it raises why, its mark left beside it first.
_LACKING = """# warm: package {name!r} is not in a worker process that warm run's workload starts.
import os as _os
try:
    open(_os.path.join(_os.path.dirname(__file__), "imported"), "x").close()
except OSError:
    pass
raise ModuleNotFoundError({message!r}, name={name!r})
"""


def importable_name(path: Path) -> str | None:
    """The name a child process imports the workload file `path` by (its stem: a `spawn` or
    `forkserver` worker unpickles a function by its module's name), where that names no
    module imported yet, finds this very file (its folder first on `sys.path`) and names
    no other module the rest of `sys.path` holds (a `statistics.py` would hide Python's)."""
    stem = path.stem  # (Python imports `my-job` from `my-job.py` too: no identifier needed)
    if not stem or "." in stem or stem in sys.modules:
        return None
    if stem in sys.builtin_module_names:
        return None
    try:
        spec = importlib.util.find_spec(stem)
        rest = [
            p
            for p in sys.path
            if isinstance(p, str) and Path(os.path.abspath(p or os.curdir)) != path.parent
        ]
        other = importlib.machinery.PathFinder.find_spec(stem, rest)
    except (ImportError, ValueError):
        return None
    if other is not None or spec is None or spec.origin is None:
        return None
    return stem if os.path.isfile(spec.origin) and Path(spec.origin).resolve() == path else None


def known_by(module: ModuleType, stem: str, path: Path) -> None:
    """The imported workload `module` known by `stem` too, named so (what it defines as it
    runs is of `stem`), and its functions and classes (their methods too) named as of
    module `stem` alike, so a worker a `spawn` or `forkserver`
    pool starts imports the file by that name to unpickle one (as it imports a script's
    `__main__` under Python). Not where `stem` is by now another module (but a copy of
    this file a module beside it imported while it ran, as Python would: replaced)."""
    there = sys.modules.get(stem)
    if there is not None and getattr(there, "__file__", None) != str(path):
        return
    sys.modules[stem] = module
    private, module.__name__ = module.__name__, stem  # what it defines from now on too
    pending, seen = list(vars(module).values()), set()
    while pending:  # its functions, classes, and (in classes) methods and classes
        value = pending.pop()
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if not isinstance(value, type | types.FunctionType) or id(value) in seen:
            continue
        seen.add(id(value))
        if value.__module__ == private:
            value.__module__ = stem
            pending += list(vars(value).values()) if isinstance(value, type) else []


def make_folder() -> None:
    """Choose this process's stub folder's name now (the folder is made by the first stub,
    `_made_folder`), and remove the folder, if made, when this process ends: called before
    `warm run` forks the worker that imports the workload, so the folder goes whatever way
    the worker ends (it ends by `os._exit`, or by a crash)."""
    if not _folder:
        name = f"warm-workers-{os.urandom(12).hex()}"  # unguessable, as `mkdtemp`'s
        try:
            _folder.append(os.path.join(tempfile.gettempdir(), name))
        except OSError:  # no temporary folder at all: no stubs (as `_made_folder` says)
            return
        atexit.register(shutil.rmtree, _folder[0], True)  # (none made: one failed lstat)


def remove_folder() -> None:
    """Remove this process's stub folder now, if made (by the process it was forked from,
    which a SIGKILL ended before it could, or by a worker that has ended)."""
    if _folder:
        shutil.rmtree(_folder[0], True)


def _made_folder() -> str | None:
    """The stub folder, made now if no process made it yet (0700, as `mkdtemp` makes one);
    one made before is used where it is this user's own folder, private (a worker before
    this one made it), never a link. None where it cannot be made (a worker then fails to
    unpickle, as under Python for a function it cannot import)."""
    make_folder()
    if not _folder:
        return None
    folder = _folder[0]
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        try:
            st = os.lstat(folder)
        except OSError:
            return None
        private = stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o077  # (as mkdir made it)
        return folder if private and st.st_uid == os.getuid() else None
    except OSError:
        return None
    return folder


def importable_by_stub(name: str, path: Path) -> None:
    """Make the workload file `path`, imported as module `name`, importable by that name in
    the worker processes this process starts: a stub file in this process's stub folder
    (`_made_folder`), the folder last on `sys.path`."""
    folder = _made_folder()
    if folder is None:
        return
    try:
        with open(os.path.join(folder, name + ".py"), "w", encoding="utf-8") as out:
            out.write(_STUB.format(path=os.fsdecode(path)))
    except OSError:
        return
    if folder not in sys.path:
        sys.path.append(folder)


def lacking_in_workers(name: str, message: str) -> None:
    """Make the worker processes this process starts (`spawn`, `forkserver`: they take its
    `sys.path`) that import package `name`, found nowhere else on that path (the stub folder
    is last on it), raise `ModuleNotFoundError(message)`: a package of that name in the stub
    folder. Nothing where the folder cannot be made or written (Python's own error there)."""
    folder = _made_folder()
    if folder is None:
        return
    package = os.path.join(folder, name)
    try:
        os.makedirs(package, 0o700, exist_ok=True)
        with open(os.path.join(package, "__init__.py"), "w", encoding="utf-8") as out:
            out.write(_LACKING.format(name=name, message=message))
    except OSError:
        return
    if folder not in sys.path:
        sys.path.append(folder)


def lacking_imported(name: str) -> bool:
    """Whether a worker process imported package `name` that `lacking_in_workers` made."""
    return bool(_folder) and os.path.exists(os.path.join(_folder[0], name, "imported"))
