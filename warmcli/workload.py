"""Loading a workload: a Python file that defines `workload(runtime)` (or `main()`).

The file is imported as a fresh module under a private name, so two workloads
never share state and nothing of it is imported twice by accident. Every way
this can go wrong (a missing file, a file that is not Python, a syntax error, an
import that raises, no entry point, an exception inside the entry point) becomes
one `WorkloadError` whose message names the workload's own file and line. An entry
that takes no argument (a PyCUDA script's `main()`) is called without the runtime;
either way the runtime is bound while it runs (`warmcli.pycuda.context`), so
PyCUDA-style launches go through it. The module owns nothing once loaded; it never
runs the passes itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_POSITIONAL += (inspect.Parameter.VAR_POSITIONAL,)


class WorkloadError(Exception):
    """A workload could not be loaded, or raised while it ran."""


@dataclass(frozen=True)
class Workload:
    path: Path
    entry: str
    module: ModuleType
    function: Callable[[Any], Any]

    @property
    def device_hint(self) -> str | None:
        """The workload's own `DEVICE` ("host" or "cuda"), if it names one."""
        hint = getattr(self.module, "DEVICE", None)
        return hint if isinstance(hint, str) else None

    @property
    def takes_runtime(self) -> bool:
        """Whether the entry takes the runtime (`workload(rt)`) or nothing (`main()`)."""
        try:
            parameters = inspect.signature(self.function).parameters.values()
        except (TypeError, ValueError):
            return True
        return any(p.kind in _POSITIONAL for p in parameters)

    def run(self, runtime: Any, pass_name: str) -> None:
        """Call the entry with `runtime` bound (PyCUDA-style launches go through it)."""
        from warmcli.pycuda.context import bound_runtime

        try:
            with bound_runtime(runtime):
                if self.takes_runtime:
                    self.function(runtime)
                else:
                    self.function()
        except WorkloadError:
            raise
        except Exception as exc:
            raise WorkloadError(
                f"workload raised during {pass_name}: {where(exc, self.path)}"
                f"{type(exc).__name__}: {str(exc).strip()}"
            ) from exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def where(exc: BaseException, path: Path) -> str:
    """`file:line: ` of the innermost frame in the workload's file, else of the raise."""
    frames = traceback.extract_tb(exc.__traceback__)
    resolved = str(path.resolve())
    mine = [f for f in frames if f.filename == resolved]
    frame = mine[-1] if mine else (frames[-1] if frames else None)
    return f"{frame.filename}:{frame.lineno}: " if frame else ""


def load_workload(
    path: str | Path, entry: str = "workload", fallback: str | None = None
) -> Workload:
    """Import the workload file and find its entry point (else `fallback`, if it has one)."""
    path = Path(path)
    if path.is_dir():
        raise WorkloadError(f"{path}: is a directory, not a workload file")
    if not path.is_file():
        raise WorkloadError(f"{path}: no such workload file")
    if path.suffix != ".py":
        raise WorkloadError(f"{path}: a workload is a Python file (.py)")
    resolved = path.resolve()
    name = "warm_workload_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise WorkloadError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        sys.modules.pop(name, None)
        raise WorkloadError(f"{path}: not a Python source file ({first_line(exc)})") from None
    except Exception as exc:
        sys.modules.pop(name, None)
        failure = f"{type(exc).__name__}: {first_line(exc)}"
        raise WorkloadError(f"{where(exc, resolved)}workload failed to import: {failure}") from None
    function = getattr(module, entry, None)
    if not callable(function) and fallback and callable(getattr(module, fallback, None)):
        entry, function = fallback, getattr(module, fallback)
    if not callable(function):
        also = f" or {fallback}()" if fallback else ""
        raise WorkloadError(f"{path}: defines no function {entry}(runtime){also}")
    return Workload(resolved, entry, module, function)
