"""The production side: a process that loads a bundle and runs its workload code unchanged.

`use_bundle(path)` (or the `WARM_BUNDLE` environment variable) names the bundle
this process serves kernels and picks from; `runtime()` hands out one `Runtime`
per device over it, opened read-only and read lazily. A miss still compiles or
tunes, as it would without warm, and is counted into the process's default
collector (`default_collector()`); with `write=True` (or `WARM_BUNDLE_WRITE=1`)
what was missed is written back at exit, under the bundle's lock. The module
owns the process's bundle and runtimes; it never prints.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

from warmcli.bundle import Bundle
from warmcli.devices import open_devices
from warmcli.runtime import Runtime

_lock = threading.Lock()
_path: Path | None = None
_write = False
_bundle: Bundle | None = None
_runtimes: dict[str, Runtime] = {}


def use_bundle(path: str | os.PathLike[str], *, write: bool = False) -> None:
    """Serve kernels and tune picks from the bundle at `path` from now on."""
    global _path, _write, _bundle
    with _lock:
        _close_locked()
        _path = Path(path)
        _write = write
        _bundle = Bundle.open(_path, write=write)


def bundle() -> Bundle | None:
    """The bundle in use: `use_bundle`'s, else `WARM_BUNDLE`'s, else none."""
    global _path, _write, _bundle
    with _lock:
        if _bundle is None and _path is None and os.environ.get("WARM_BUNDLE"):
            _path = Path(os.environ["WARM_BUNDLE"])
            _write = os.environ.get("WARM_BUNDLE_WRITE", "") not in ("", "0")
            _bundle = Bundle.open(_path, write=_write)
        return _bundle


def runtime(device: str = "auto") -> Runtime:
    """The process's runtime for `device` (`host`, `cuda:N`, `auto`), over the bundle in use."""
    loaded = bundle()
    with _lock:
        rt = _runtimes.get(device)
        if rt is None:
            rt = Runtime(open_devices(device)[0], loaded)
            _runtimes[device] = rt
        return rt


def _close_locked() -> None:
    global _bundle
    for rt in _runtimes.values():
        if _write and _bundle is not None:
            rt.persist(_bundle)
        rt.close()
    _runtimes.clear()
    if _bundle is not None:
        _bundle.close()
        _bundle = None


def close() -> None:
    """Write back misses (when writing) and release every runtime and the bundle."""
    global _path
    with _lock:
        _close_locked()
        _path = None


atexit.register(close)
