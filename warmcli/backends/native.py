"""What `native` resolves to here: the CPU that keys a host kernel tuned for its builder.

A host kernel whose options tune for the CPU that builds it (`-march=native`,
`-mtune=native`, `-mcpu=native`, also inside a joined option: `Kernel.tunes_native`)
may use instructions only that CPU has, so its key names this machine's CPU: its
toolchain identity has `NATIVE` and the CPU's identity appended (`keyed_identity`), and
a build whose toolchain names another CPU runs nowhere else (`foreign_cpu`, which
`warmcli.backends.serving` asks of such a build only). A CPU's identity is its model's
name and a digest of every distinct model and instruction-set line of `/proc/cpuinfo`
(vendor, family, model, flags; on ARM implementer, part and features: each core's,
so a big.LITTLE counts all), never what varies between machines of one model
(stepping, microcode, clock, bugs). It is read from `CPUINFO` once per process, and
only by a process that keys or judges such a kernel (which alone imports this module; its
`NATIVE` mark is `warmcli.backends.toolchain`'s): no compiler is started and
nothing is remembered in warm's home (a home shared by machines of other CPUs would
give one the other's answer). Where no `/proc/cpuinfo` is (not Linux), the machine's
network name stands for its CPU: such a build is served only where it was built. The
module keeps that one answer per process and never compiles or prints.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from collections.abc import Callable

from warmcli.backends.toolchain import NATIVE  # the mark (a served process imports no more)

CPUINFO = "/proc/cpuinfo"
MAX_CPUINFO_BYTES = 16 << 20  # read no more of it (a few KB a core)
# The lines of a core's block that say which instructions it has.
_ISA_FIELDS = frozenset(
    {
        "vendor_id", "cpu family", "model", "model name", "flags",  # x86
        "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features",  # ARM
        "cpu", "isa", "uarch", "mmu", "features", "machine",  # POWER, RISC-V, s390
    }
)  # fmt: skip


def read_cpuinfo() -> str | None:
    """The text of `CPUINFO` (at most `MAX_CPUINFO_BYTES`), None where there is none."""
    try:
        fd = os.open(CPUINFO, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        chunks, size = [], 0
        while size < MAX_CPUINFO_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def cpu_identity(cpuinfo: str | None) -> str:
    """A CPU's identity from the text of its `/proc/cpuinfo`: its model's name and the
    digest of its distinct instruction-set lines (the machine's name where there are none)."""
    lines: set[str] = set()
    name = ""
    for line in (cpuinfo or "").splitlines():
        field, sep, value = line.partition(":")
        field, value = field.strip(), " ".join(value.split())
        if sep and field in _ISA_FIELDS and value:
            lines.add(f"{field}: {value}")
            if not name and field in ("model name", "cpu", "uarch"):
                name = value
    if not lines:
        return f"unknown CPU of {platform.node() or 'this machine'} ({platform.machine()})"
    digest = hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]
    return f"{name or platform.machine() or 'CPU'} #{digest}"


@functools.cache
def this_cpu() -> str:
    """This machine's CPU identity, read once per process."""
    return cpu_identity(read_cpuinfo())


def keyed_identity(identity: str, cpu: Callable[[], str] = this_cpu) -> str:
    """The toolchain identity `identity` that keys a kernel tuned for this CPU (`cpu()`): as
    it is where it names one already (a C compiler's wrapper script that tunes for it)."""
    return identity if NATIVE in identity else f"{identity}{NATIVE}{cpu()}"


def foreign_cpu(toolchain: str, cpu: Callable[[], str] = this_cpu) -> str:
    """Why a build whose toolchain identity is `toolchain` would not run here: it was
    tuned for another CPU ("" where it was not, or was tuned for this one)."""
    _, sep, theirs = toolchain.partition(NATIVE)
    if not sep:
        return ""
    ours = cpu()
    if theirs == ours:
        return ""
    return f"bundle's build is tuned for another CPU (-march=native on {theirs}); this is {ours}"
