"""The host backend: kernels in C, built by the system C compiler, called through ctypes.

A real backend, not a stand-in: its compiles run the real `cc`, its launches run
real machine code and its timings are real. It is the embedded default on a
machine without a GPU and drives the end-to-end tests. See `compiler` (the batch
translation units) and `device` (loading, launching, timing).
"""

from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.host.device import HostDevice

__all__ = ["HostCompiler", "HostDevice"]
