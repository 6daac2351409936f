"""The host compiler: `HostCompiler`, the system C compiler as warm's host backend names it.

Its `toolchain` is cc's identity, which keys every host kernel: the compiler `WARM_CC` names,
else `cc`, with the versions of the `as` and `ld` it runs (`host.programs`) and where the
environment says it finds its programs, as `probe` remembers cc's line, with this CPU where cc
is a wrapper script tuning for it (`_tuned`); across processes, whole, while nothing it was
found by moved (`host.identity`); found anew, those programs' lines are asked while cc's own
`--version` runs (`_probed`). What builds (many C kernels in one translation unit, one `cc`
process, one shared object, checked before it is stored) is `warmcli.backends.host.building`,
which `command` and `compile_group` import on first use: a process that only serves asks the
identity and never builds. This module owns, per process, the identity of each cc it was asked
for; it never loads, builds or prints.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.backends.host.identity import recall, remember
from warmcli.backends.host.programs import Moved, programs_ahead, programs_line
from warmcli.backends.toolchain import (
    LAUNCHERS,
    NATIVE,
    WRAPPER_MARK,
    Toolchain,
    _find,
    environment_named,
    probe,
    resolved_name,
    script_words,
)
from warmcli.errors import ToolchainError
from warmcli.kernel import CC_SYSTEM
from warmcli.kernel_parts import NATIVE_OPTION
from warmcli.printable import Pattern

if TYPE_CHECKING:  # what compiles is imported on first use: a serving process never compiles
    from warmcli.backends.compiler import CompiledGroup, CompileUnit


def host_cc() -> str:
    """The C compiler to use: `WARM_CC`, else `cc` on PATH."""
    return config.cc() or "cc"


def _system_folders(cc: str) -> tuple[str, ...]:
    """`cc`'s own include folders (`system_folders`, imported where a key first asks)."""
    from warmcli.backends.system_folders import system_folders

    return system_folders(cc)


@functools.cache  # (once a process, as `probe` and `programs_line` are)
def _toolchain(cc: str, moved: Moved, search: str) -> Toolchain:
    """`HostCompiler.toolchain` of the C compiler `cc` where the variables `moved` are set and
    `PATH` is `search`: as remembered while nothing it was found by moved (`host.identity`),
    else found anew (and remembered so)."""
    toolchain, worth = recall(cc, moved, search)
    if toolchain is None:
        since = time.time()  # (a place changed from then on was maybe read before it changed)
        toolchain = found_anew(cc, moved, search)
        if worth:  # (not where a place it was found by is changing: its stamp racy)
            remember(cc, moved, search, toolchain, since)
    if toolchain.identity not in CC_SYSTEM:  # how the key asks for its own folders
        CC_SYSTEM[toolchain.identity] = functools.partial(_system_folders, toolchain.path)
    return toolchain


# A script's word naming a CPU to tune for, and `native` (a value of it: `-march="native"` is the
# words `-march=` and `native`; `A=native; ... -march=$A`): where both are, it is keyed as tuning.
# Compiled on first use: only a wrapper script's identity reads them (~0.2 ms an import).
_TUNING = Pattern(r"-m(?:arch|tune|cpu)=")
_NATIVE = Pattern(r"(?<![\w./-])native(?![\w./-])")


def _tuned(found: Toolchain) -> Toolchain:
    """`found`, keyed with this CPU (`native.keyed_identity`'s mark) where it is a wrapper script
    that tunes for the building CPU (`exec gcc -march=native "$@"`, or a variable it names says
    so, `$CFLAGS`; a script naming `-march=` and `native` apart, quoted or through a variable,
    is judged to): its builds run only on that CPU, as a kernel's own `-march=native`'s."""
    if WRAPPER_MARK not in found.version or NATIVE in found.version:
        return found
    words = script_words(found.path)
    if not any(NATIVE_OPTION.search(word) for word in words) and not (
        any(_TUNING.match(word) for word in words) and any(_NATIVE.search(w) for w in words)
    ):
        return found
    from warmcli.backends.native import this_cpu

    return Toolchain(
        name=found.name, path=found.path, version=f"{found.version}{NATIVE}{this_cpu()}"
    )


def found_anew(cc: str, moved: Moved, search: str) -> Toolchain:
    """`_toolchain`'s identity found by asking every folder (none remembered whole): cc's
    version line, then those of the programs it runs (`host.programs`) and the variables."""
    found = _probed(cc, moved, search)
    added = "".join(f"; {name}={environment_named(v)}" for name, v in moved)
    version = found.version + programs_line(found, moved, search) + added  # its `as` and `ld`
    return Toolchain(name=found.name, path=found.path, version=version)


def _probed(cc: str, moved: Moved, search: str) -> Toolchain:
    """`probe("cc", cc)`, cc's version line; where `cc` names a binary found as itself (no
    `#!` script, no launcher such as `ccache`, whose probe reads the compiler it runs), the
    lines of the programs it runs are asked meanwhile, in a thread of their own
    (`processes.at_once`, `programs_ahead`): a first run's `cc -print-search-dirs`, then `as`
    and `ld --version`, beside `cc --version`, not after it (one round of children fewer
    before the first compile; ~5-20 ms of a loaded two-core machine's `warm run`)."""
    first = _find(cc)
    if first is None or resolved_name(first[0]) in LAUNCHERS or _script(first[0]):
        return probe("cc", cc)
    from warmcli.backends.processes import at_once  # (a first run's: a hot start asks none)

    return at_once(lambda: programs_ahead(first[0], moved, search), lambda: probe("cc", cc))[1]


def _script(where: str) -> bool:
    """Whether the file `where` is a script (`#!`), or cannot be read (as one: asked after)."""
    try:
        with open(where, "rb") as file:
            return file.read(2) == b"#!"
    except OSError:
        return True


class HostCompiler:
    """Builds a shared object from a group of C kernels."""

    language = "c"

    def __init__(self, cc: str | None = None) -> None:
        self._cc = cc or host_cc()

    @property
    def toolchain(self) -> Toolchain:
        """cc and its version, those of the `as` and `ld` it runs (`host.programs`), and where
        it finds its programs (`cc1`, `as`, `ld`) where the environment says
        (`config.compiler_programs`): they change what it builds, so they key
        (`serving.host_programs`; a long one by its digest)."""
        moved = tuple(config.compiler_programs().items())
        try:
            return _tuned(_toolchain(self._cc, moved, config.path()))
        except ToolchainError as exc:  # what to do about it: the machine's, not the kernel's
            hint = "named by WARM_CC" if config.cc() else "set WARM_CC to one, or put cc on PATH"
            raise ToolchainError(f"{exc} (the host backend's C compiler: {hint})") from None

    def command(self, units: Sequence[CompileUnit], source: str, output: str) -> list[str]:
        from warmcli.backends.host.building import command  # (what builds: on first use)

        return command(self, units, source, output)

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup:
        from warmcli.backends.host.building import compile_group  # (a hot process never builds)

        return compile_group(self, units, timeout)
