"""`warm run --pycuda`: an unmodified PyCUDA script, warmed.

For the span of a run (`pycuda_modules`), `pycuda.compiler.SourceModule` resolves
to warm's for the script (PyCUDA's own modules, which look it up when they compile:
`pycuda.elementwise`, `pycuda.reduction`, `pycuda.scan`, `pycuda.curandom`, still get
PyCUDA's, as their kernels are not warm's: `_for_the_script`) and `pycuda.autoinit`
(and `warmcli.pycuda.autoinit`) to a module that makes no context of its own (warm
binds its device's primary context while the workload runs, so the script's
allocations and warm's launches share memory). With `--arch` (no GPU, maybe no
pycuda), every PyCUDA module the script imports is a shape-only stand-in
(`warmcli.pycuda.standins`). Without `--pycuda`, a GPU-less run still takes
`warmcli.pycuda.autoinit` (the README's changed import) as the stand-in's, which makes no
context (`own_autoinit`). Each `autoinit` put in `sys.modules` is its package's attribute
too, as an import makes it (`warmcli.pycuda.autoinit.context`). Whatever `sys.modules`,
`pycuda.compiler` and those packages held before is put back afterwards. The module owns
nothing beyond that span.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

from warmcli.backends.base import DeviceError
from warmcli.pycuda import context
from warmcli.pycuda.module import SourceModule

NAMES = (
    "pycuda",
    "pycuda.driver",
    "pycuda.gpuarray",
    "pycuda.compiler",
    "pycuda.autoinit",
    "pycuda.autoprimaryctx",
    "pycuda.characterize",
    "warmcli.pycuda.autoinit",
)


def _autoinit() -> types.ModuleType:
    """`pycuda.autoinit` without a context of its own: `device` and `context` are those of
    the bound runtime's GPU."""
    module = types.ModuleType("pycuda.autoinit", "warm: the bound runtime's primary context")

    def attribute(name: str) -> Any:
        device = context.current_runtime().device
        if name == "device":
            return device._dev  # type: ignore[attr-defined]
        if name == "context":
            return device._context  # type: ignore[attr-defined]
        raise AttributeError(name)

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def _for_the_script(original: type) -> type:
    """warm's `SourceModule` where the script calls it; PyCUDA's `original` where one of
    PyCUDA's own modules does (its `ElementwiseKernel`, `ReductionKernel`, gpuarray
    arithmetic, scan kernels: PyCUDA compiles and loads those itself)."""

    class SourceModuleForTheScript(SourceModule):
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            caller = str(sys._getframe(1).f_globals.get("__name__", ""))
            if caller.split(".")[0] == "pycuda":
                return original(*args, **kwargs)
            return super().__new__(cls)

    SourceModuleForTheScript.__name__ = SourceModuleForTheScript.__qualname__ = "SourceModule"
    return SourceModuleForTheScript


@contextlib.contextmanager
def pycuda_modules(gpu_less: bool) -> Iterator[None]:
    """PyCUDA's `SourceModule` is warm's in the block; with `gpu_less`, every PyCUDA module
    is a shape-only stand-in."""
    saved = {name: sys.modules.get(name) for name in NAMES}
    patched: Any = None
    finder: Any = None
    named: list[tuple[Any, str, Any]] = []
    try:
        if gpu_less:
            from warmcli.pycuda.lacking import LackingFinder
            from warmcli.pycuda.standins import modules

            sys.modules.update(modules())
            finder = LackingFinder()
            sys.meta_path.append(finder)
            sys.modules["warmcli.pycuda.autoinit"] = sys.modules["pycuda.autoinit"]
        else:
            try:
                import pycuda.compiler as patched
            except ImportError as exc:
                raise DeviceError(
                    f"--pycuda needs pycuda to run on a GPU ({exc}); for a GPU-less pre-build "
                    "pass --arch sm_XX"
                ) from None
            original = patched.SourceModule
            patched.SourceModule = _for_the_script(original)
            sys.modules["pycuda.autoinit"] = sys.modules["warmcli.pycuda.autoinit"] = _autoinit()
        named = _named_by_packages()
        yield
    finally:
        _put_back(named)
        if patched is not None:
            patched.SourceModule = original
        if finder is not None:
            with contextlib.suppress(ValueError):  # a workload that replaced sys.meta_path
                sys.meta_path.remove(finder)
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@contextlib.contextmanager
def own_autoinit() -> Iterator[None]:
    """`import warmcli.pycuda.autoinit` in the block, a GPU-less run without `--pycuda`
    (`warm run --arch`, `warm verify --workload --arch`), is the stand-in's `autoinit`: no
    GPU, so no context to make current (the real one would open the process's CUDA runtime
    at import, which has none)."""
    from warmcli.pycuda.standin_device import _Context, _Device

    name = "warmcli.pycuda.autoinit"
    saved = sys.modules.get(name)
    stand_in = types.ModuleType(name, "warm: a GPU-less pre-build's autoinit: no context")
    stand_in.device, stand_in.context = _Device(), _Context()  # type: ignore[attr-defined]
    sys.modules[name] = stand_in
    named = _named_by_packages()
    try:
        yield
    finally:
        _put_back(named)
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


_NONE = object()  # a package's attribute that was not there


def _named_by_packages() -> list[tuple[Any, str, Any]]:
    """Each `autoinit` module `sys.modules` holds now made its package's attribute too, as an
    import that loads it makes it (an import found in `sys.modules` sets none: `import
    warmcli.pycuda.autoinit` then `warmcli.pycuda.autoinit.context` was an AttributeError):
    what each package held before, for `_put_back`."""
    named = []
    for name in ("pycuda.autoinit", "warmcli.pycuda.autoinit"):
        package = sys.modules.get(name.rpartition(".")[0])
        if package is not None and name in sys.modules:
            named.append((package, "autoinit", package.__dict__.get("autoinit", _NONE)))
            package.autoinit = sys.modules[name]
    return named


def _put_back(named: list[tuple[Any, str, Any]]) -> None:
    """Each package's attribute as `_named_by_packages` found it."""
    for package, attribute, held in reversed(named):
        if held is _NONE:
            package.__dict__.pop(attribute, None)
        else:
            setattr(package, attribute, held)
