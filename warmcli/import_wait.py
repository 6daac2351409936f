"""Whether another thread is importing a module for warm, which a fork waits for (`forking`).

A module's import lock held by a thread a forked child lacks, the child would wait for ever
importing that module: `warmcli.forking` waits for such an import (importlib's module locks,
read where importlib keeps them; not found there, nothing is waited for) unless it is the
user's own (not a module of warm's, not begun by warm's code), which may last or wait on the
forking thread; the package's own hook asks it too, for a fork made before `warmcli.forking` is
imported (a thread's first `warmcli.use_bundle` imports it after a second of others). This module
reads importlib's module locks and the importing threads' stacks; it changes nothing.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType

_IMPORTLIB = "<frozen importlib"  # the file name of importlib's own frames


def importing_elsewhere() -> bool:
    """Whether another thread holds a module's import lock (importlib's `_module_locks`,
    each a weak reference to a lock whose `owner` is the importing thread's id) for warm: a
    module of warm's, or one that warm's code imports (another module's import, a user's
    that may last or wait on this thread, is the user's: a fork never waits for it)."""
    locks = getattr(sys.modules.get("importlib._bootstrap"), "_module_locks", None)
    if not isinstance(locks, dict):
        return False
    me = threading.get_ident()
    owners: set[int] = set()
    for ref in list(locks.values()):
        lock = ref() if callable(ref) else None
        owner = getattr(lock, "owner", None)
        if owner not in (None, 0, me):
            if _warms(getattr(lock, "name", None)):
                return True
            owners.add(owner)
    if not owners:
        return False
    frames = getattr(sys, "_current_frames", dict)()
    return any(_imports_for_warm(frames.get(owner)) for owner in owners)


def _imports_for_warm(frame: FrameType | None) -> bool:
    """Whether the thread at `frame` is in an import begun by warm's code."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_find_and_load" and code.co_filename.startswith(_IMPORTLIB):
            caller = frame.f_back
            while caller is not None and caller.f_code.co_filename.startswith(_IMPORTLIB):
                caller = caller.f_back
            if caller is not None and _warms(caller.f_globals.get("__name__")):
                return True
        frame = frame.f_back
    return False


def _warms(name: object) -> bool:
    return isinstance(name, str) and (name == "warmcli" or name.startswith("warmcli."))
