"""Warm existing PyCUDA code: a `SourceModule` that goes through warm, and foreign memory.

Change one import, `from pycuda.compiler import SourceModule` to
`from warmcli.pycuda import SourceModule`, and every `get_function(...)` launch goes
through the bound warm runtime (`context`): queued, compiled, executed or served from
the bundle like any warm launch (`module`). PyCUDA's argument objects become warm
buffers and scalars on the way (`args`); `autotune` turns a hand-rolled timing loop
into a `Tunable` (`tune`); `warm run --pycuda` redirects an unmodified script's
imports (`hook`), with shape-only stand-ins for PyCUDA's allocation calls under
`--arch` (`standins`; what they lack is named as theirs by `lacking`). Importing this
package never imports pycuda; nothing here prints.
"""

from warmcli.pycuda.args import ArgumentError, In, InOut, Out, wrap
from warmcli.pycuda.context import bound_runtime, current_runtime
from warmcli.pycuda.module import Function, PyCudaError, SourceModule
from warmcli.pycuda.tune import Autotuned, Config, autotune

__all__ = [
    "ArgumentError",
    "Autotuned",
    "Config",
    "Function",
    "In",
    "InOut",
    "Out",
    "PyCudaError",
    "SourceModule",
    "autotune",
    "bound_runtime",
    "current_runtime",
    "wrap",
]
