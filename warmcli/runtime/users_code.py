"""Whose code a function is: the user's own (a file outside the standard library and the
site-packages folders, such as a `checks.py` beside the workload) or a library's; and
whether two modules are of one top-level package (`same_package`: `app.util` and
`app.work`), so an app's helpers key alike in a CI checkout and pip-installed; and a
path a check holds inside its own folder, as relative to it (`located`: a checkout's
`HERE = os.path.dirname(__file__)` keys alike wherever the checkout is).

A checked tunable keys the user's helpers by their code and a library's by their name
(`warmcli.runtime.check_keys`): an edit of the user's changes the key, a library's upgrade
does not. State: the library folders, read once from `sys.path`, and a bounded memo of
the files judged. It never reads a file.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any


@functools.cache
def _library_folders() -> tuple[str, ...]:
    """The folders a library's files lie in: the standard library's (`os`'s folder, its
    `lib-dynload`) and every `site-packages` or `dist-packages` folder on `sys.path`."""
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    folders = {stdlib, *(p for p in sys.path if os.path.basename(p) in _SITE_FOLDERS)}
    return tuple(os.path.join(os.path.realpath(f), "") for f in folders if f)


_SITE_FOLDERS = ("site-packages", "dist-packages")


@functools.lru_cache(maxsize=1024)
def users_file(filename: Any) -> bool:
    """Whether a code's (or module's) file is the user's: a path outside the standard library
    and the site-packages folders (not `<frozen ...>`, `<string>`, a built-in module)."""
    if not isinstance(filename, str) or not os.path.isabs(filename):
        return False
    return not os.path.realpath(filename).startswith(_library_folders())


def same_package(module: Any, other: Any) -> bool:
    """Whether the modules named `module` and `other` (dotted names) are of one top-level
    package (`app.util`, `app.work`), wherever its files lie."""
    if not (isinstance(module, str) and isinstance(other, str)):
        return False
    top = module.partition(".")[0]
    return bool(top) and top == other.partition(".")[0]


def users_module(module: Any, function: Any) -> bool:
    """Whether a module a check reads through (`checks.close`) is the user's code: outside
    the libraries' folders, or of the check `function`'s own top-level package wherever it
    lies (a CI checkout's `app.util` and production's pip-installed one key alike)."""
    kin = same_package(getattr(module, "__name__", None), getattr(function, "__module__", None))
    return kin or users_file(getattr(module, "__file__", 0))


def located(value: Any, function: Any) -> Any:
    """`value`, but an absolute path inside the folder of `function`'s file as relative to
    that folder (`<here>/data/ref.txt`): what a check holds of its own folder (`HERE`, a
    path joined to it) keys alike wherever the checkout lies."""
    filename = getattr(getattr(function, "__code__", None), "co_filename", None)
    if not (isinstance(value, str) and isinstance(filename, str) and os.path.isabs(filename)):
        return value
    folder = os.path.dirname(filename)
    if value == folder or value.startswith(os.path.join(folder, "")):
        return "<here>" + value[len(folder) :]
    return value
