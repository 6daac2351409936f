"""What warm's GPU-less PyCUDA stand-ins (`warmcli.pycuda.standins`) lack, named as theirs.

A script run by `warm run --pycuda --arch` may ask the stand-ins for what they do not hold
(what only a GPU has, or a part of PyCUDA a pre-build of `SourceModule` launches never
uses, such as `pycuda.tools` or `pycuda.compiler.compile`):
an attribute of a module, class or instance (`drv.mem_get_info`, `Device.make_context`),
a name imported from a module (`from pycuda.compiler import DynamicSourceModule`, which
Python would turn into its own `cannot import name ... (unknown location)`), or a submodule
(`pycuda.elementwise`: `LackingFinder`, last on `sys.meta_path` while they stand in). Each
is one `AttributeError`, `ImportError` or `ModuleNotFoundError` naming the stand-in (what
warm never gives, on a GPU either, says so: `NEVER_GIVEN`, PyCUDA's `CompileError`). A
dunder stays a plain AttributeError (Python's own protocols ask for those). No state.
"""

from __future__ import annotations

import dis
import importlib.abc
import sys
import types
from typing import Any

from warmcli.backends.cuda.device import pycuda_stands_in

LACKING = (  # what the stand-ins hold: a pre-build's needs, whether or not a name needs a GPU
    "not in warm's GPU-less stand-in for pycuda (warm run --arch), which holds only what a "
    "pre-build of SourceModule launches uses: run the script on a GPU (warm run --pycuda, "
    "without --arch)"
)

# What a stand-in lacks because warm never gives it, on a GPU either: said so, not "run it
# on a GPU". PyCUDA's `CompileError` (a `SourceModule()` whose nvcc failed; `pycuda.compiler`
# imports it too): warm compiles at a launch and raises its own `KernelCompileError` there.
_COMPILE_ERROR = (
    "warm's SourceModule compiles at a launch, not at SourceModule(), and a failed compile "
    "raises warmcli.errors.KernelCompileError there, with the compiler's log, never pycuda's "
    "CompileError, on a GPU too (a fallback taken on a failed compile is a miss of the verify "
    "pass: choose the kernel by what the machine supports)"
)
NEVER_GIVEN = {f"pycuda.{m}.CompileError": _COMPILE_ERROR for m in ("driver", "compiler")}


def why_lacking(name: str) -> str:
    """Why the stand-ins lack `name` (`pycuda.driver.X`)."""
    return NEVER_GIVEN.get(name, LACKING)


def lacking(owner: str, attribute: str) -> Any:
    """What a stand-in lacks, named as its (a dunder: plain AttributeError)."""
    if attribute.startswith("__"):
        raise AttributeError(attribute)
    raise AttributeError(f"{owner}.{attribute}: {why_lacking(f'{owner}.{attribute}')}")


_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def _imported_from(frame: types.FrameType) -> bool:
    """Is `frame` running `from module import name`? Python turns the AttributeError of
    that lookup into its own `cannot import name ... (unknown location)`, dropping ours."""
    code, at = frame.f_code.co_code, frame.f_lasti
    return 0 <= at < len(code) and code[at] == _IMPORT_FROM


def stand_in_module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name, f"warm's GPU-less stand-in for {name} (warm run --arch)")
    module.__dict__.update(attributes)

    def attribute(attribute: str) -> Any:
        if not attribute.startswith("__") and _imported_from(sys._getframe(1)):
            why = why_lacking(f"{name}.{attribute}")
            raise ImportError(f"{name}.{attribute}: {why}", name=name)
        return lacking(name, attribute)

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


class LackingFinder(importlib.abc.MetaPathFinder):
    """Last on `sys.meta_path` while the stand-ins are: a PyCUDA module they do not stand in
    for (`pycuda.cumath`, `pycuda.elementwise`) is named as not theirs, not as not installed."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name.startswith("pycuda.") and pycuda_stands_in():
            raise ModuleNotFoundError(f"{name}: {LACKING}", name=name)
        return None


class LackingClass(type):
    """The stand-ins' classes: what one lacks, asked of the class (`Context.get_current()`,
    as PyCUDA's static methods are called), is named as its, as an instance's is."""

    def __getattr__(cls, name: str) -> Any:
        return lacking(f"pycuda.driver.{cls.__name__.lstrip('_')}", name)
