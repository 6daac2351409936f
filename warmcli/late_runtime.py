"""What `warmcli.runtime()` hands a workload's import under `warm run`, and the runtime bound.

While `warm run` imports a workload (`late_runtimes`), before any pass binds its runtime,
`warmcli.production.runtime` hands out one `LateRuntime` per device name (`handed`): each use
goes to the runtime bound then (a pass's: warmed), else to the process's own (not warmed:
where code first used one unbound is noted). `bound` is the runtime a pass bound for a
device (`warmcli.runtime.binding`, read only where it was imported). The module owns the
late runtimes handed out (`_HANDED`) and, while an import runs, where each was used unbound
(`_LATE`); it opens nothing itself (a late runtime's own is `production`'s) and never prints.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, cast

from warmcli.runtime.runtime import Runtime

_LATE: list[list[str]] = []  # while `late_runtimes` runs: where each unbound use was
_HANDED: dict[str, LateRuntime] = {}  # the `LateRuntime` handed out for each device name


@contextlib.contextmanager
def late_runtimes() -> Iterator[list[str]]:
    """While `warm run` imports a workload, before any pass binds its runtime: `runtime()`
    hands out `LateRuntime`s, and the list yielded gets where code used one unbound."""
    unbound: list[str] = []
    _LATE.append(unbound)
    try:
        yield unbound
    finally:
        _LATE.remove(unbound)


def importing() -> bool:
    """Whether `late_runtimes` runs (a workload's import under `warm run`)."""
    return bool(_LATE)


def handed(device: str, own: Callable[[str], Runtime]) -> Runtime:
    """The `LateRuntime` for `device` (one a device name), its unbound uses going to
    `own(device)`, the process's own runtime."""
    return cast(Runtime, _HANDED.setdefault(device, LateRuntime(device, own)))


class LateRuntime:
    """What `runtime()` hands a workload's import under `warm run` (warm's own layers, the
    PyCUDA shim's, get this process's runtime as before): each use goes to the
    runtime bound then (a pass's: warmed), else to this process's own (not warmed: the
    place of the first such use is noted while the import runs)."""

    def __init__(self, device: str, own: Callable[[str], Runtime]) -> None:
        object.__setattr__(self, "_device", device)
        object.__setattr__(self, "_own", own)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # `isinstance(rt, warmcli.Runtime)` holds, as for a runtime
        return Runtime

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_device", "_own"):  # copy's, pickle's probes
            raise AttributeError(name)
        return getattr(self._active(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._active(), name, value)

    def _active(self) -> Runtime:
        active = bound(self._device)
        if active is None:
            if _LATE and not _LATE[-1]:
                caller = sys._getframe(2)  # the use (through __getattr__ or __setattr__)
                _LATE[-1].append(f"{caller.f_code.co_filename}:{caller.f_lineno}")
            active = self._own(self._device)
        return active

    def __repr__(self) -> str:
        return f"<warmcli runtime {self._device!r}: the bound pass's, when one is>"


def bound(device: str) -> Runtime | None:
    """The bound runtime (`warmcli.runtime.binding`) when it is `device`'s, else the
    pass's runtime of `device` where it warms one (`companion`), else None."""
    binding = sys.modules.get("warmcli.runtime.binding")  # imported only where one is bound
    active = binding.bound() if binding is not None else None
    if active is None:
        return None
    own = active.device.id
    if device in ("auto", own) or (device == "cuda" and own != "host"):
        return active
    return cast(Runtime | None, binding.companion(device))  # a pass's, where it warms one
