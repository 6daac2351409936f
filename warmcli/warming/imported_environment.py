"""The environment variables a module set or unset as it was imported, so the next warming pass
starts with them as the first left them (`over`): each pass starts in the environment the first
began in (`one_pass`), as a fresh process would, but a module the first pass imported is never
imported again, so what its import set (a library's `os.environ["CPATH"] = ...`) would be undone
for every later pass, where a fresh process has it from that import on.

Told by an audit hook (`watch`, added once a process: `os.putenv` and `os.unsetenv`, which
`os.environ` calls) that looks whether the change is made under an import (a frame of
`importlib._bootstrap`). Its one state: the last value each such variable was given (None: unset),
and whether the hook is added. It never changes the environment, never prints.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

_SET: dict[str, str | None] = {}  # by a module's import: its last value (None: unset)
_WATCHING: list[bool] = []
_IMPORTING = "<frozen importlib._bootstrap"  # (and `_bootstrap_external`: a module's exec)


def watch() -> None:
    """Note from now on what a module's import sets in the environment (once a process)."""
    if not _WATCHING:
        _WATCHING.append(True)
        sys.addaudithook(_heard)


def over(made: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The environment `made` (the one a pass began in) with what imports set or unset since."""
    env = dict(made)
    for name, value in _SET.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return tuple(env.items())


def _heard(event: str, args: tuple[Any, ...]) -> None:
    if (event == "os.putenv" or event == "os.unsetenv") and _under_import(sys._getframe(1)):
        name = os.fsdecode(args[0])
        _SET[name] = os.fsdecode(args[1]) if event == "os.putenv" else None


def _under_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORTING):
            return True
        frame = frame.f_back
    return False
