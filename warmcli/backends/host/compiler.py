"""The host compiler: many C kernels in one translation unit, one `cc` process, one shared object.

Each kernel's defines and the macros it defines itself are undefined after it, its
entry and helpers are renamed to unique symbols, so a group of kernels shares one
`cc -O2 -fPIC -shared` process; a kernel whose text could reach past that (an
`#include`, a pragma, ...: `warmcli.backends.sharing`) is a group of its own, its source
as written after its defines (nothing renamed: on Linux its symbol is an alias of its
entry, so `__func__` is the entry's name; its entry renamed where it is `static` or its
text names a visibility, which an alias would not share), exactly as alone,
its `__BASE_FILE__` made `"<entry>.c"` (`base_file`, read first in every unit of one
kernel), not the scratch file's path, another in every build. Each is
followed by its signature probe (`warmcli.backends.signature`), so letters that do not match
the entry's declaration fail its compile with a clear message. On
Linux the object is linked to load fast, since a hot start pays for every
`dlopen`: no RELRO (no `mprotect` after relocation) and stripped of its static
symbol table (`dlsym` reads the dynamic one; a kernel built with `-g` keeps it),
which takes a load from about 80 µs to about 25 µs; and with `-z defs`, so a symbol
nothing defines is a link error naming it, never a stored binary that cannot load.
The compiler is `WARM_CC`, else `cc`, run in a scratch directory (a relative include
folder, a header read first by a relative name found in the working folder, `-include h`,
and the relative entries of `CPATH` are given as the working folder's, as the key reads
them). This module owns that scratch directory per call and, per process, the identity of
each cc it was asked for (as `probe` remembers cc's line, with this CPU where cc is a wrapper
script tuning for it, `_tuned`; across processes, whole, while nothing it was found by moved:
`host.identity`): it never loads what it builds and
keeps no cache of it, but reads its ELF header: a compile that exits 0 with no loadable
shared object (a kernel option such as `-c` or `-fsyntax-only` stopped cc
before it linked) is that group's compile failure, never a binary stored and then refused
at load; so is a library that does not export a kernel's symbol (an `inline` entry,
`-fvisibility=hidden`: that kernel's, named), and an option that reads a file no key
covers (`@file`, `-Wa,@file`, `-iprefix`, `-Wp,-I,folder`, `-Xpreprocessor -I`, `-I-`, a
folder in the linker's system root, `-L=/lib`, `-Wl,--sysroot=`, compiler programs from any
`-B prefix`, `-B..` running `../as`, or the linker `-fuse-ld=` picks), another source to
compile (`/opt/x.c`, any file after `-x c`: its headers unkeyed), a file the kernel's assembly
reads (`.incbin`, `.INCBIN`; not in a C comment) or the source as another language (`-x c++`),
refused before cc runs (`warmcli.backends.host.refused`); so is a `specs` file cc reads only
through `LIBRARY_PATH` or `GCC_EXEC_PREFIX` (asked of cc: `_library_specs`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.backends.host.identity import recall, remember
from warmcli.backends.host.programs import Moved, programs_line
from warmcli.backends.toolchain import (
    NATIVE,
    WRAPPER_MARK,
    Toolchain,
    environment_named,
    probe,
    script_words,
)
from warmcli.errors import ToolchainError
from warmcli.kernel import CC_SYSTEM
from warmcli.kernel_parts import NATIVE_OPTION
from warmcli.printable import Pattern
from warmcli.scratch import scratch_folder

if TYPE_CHECKING:  # what compiles is imported on first use: a serving process never compiles
    from warmcli.backends.compiler import CompiledGroup, CompileUnit
    from warmcli.kernel import Kernel

BASE_FLAGS = ("-O2", "-fPIC", "-shared")
# Linux: a symbol the object leaves undefined is a link error naming it, not a binary
# that is stored and then cannot load (libc and libm, linked below, resolve theirs).
DEFS_FLAGS: tuple[str, ...] = ("-Wl,-z,defs",) if sys.platform.startswith("linux") else ()
# Linux: no RELRO (GNU ld, gold and lld all take it), stripped unless the kernel asks for -g.
FAST_LOAD_FLAGS: tuple[str, ...] = ("-Wl,-z,norelro",) if sys.platform.startswith("linux") else ()
STRIP_FLAGS: tuple[str, ...] = ("-s",) if sys.platform.startswith("linux") else ()
# ELF: a kernel alone keeps its entry's name and exports its symbol as an alias of it.
ALIASES = sys.platform.startswith("linux")


def load_flags(options: Sequence[str]) -> list[str]:
    """The flags that make the object load fast, given the kernel's own options."""
    debug = any(o.startswith("-g") and o != "-g0" for o in options)
    return [*FAST_LOAD_FLAGS, *([] if debug else STRIP_FLAGS)]


def host_cc() -> str:
    """The C compiler to use: `WARM_CC`, else `cc` on PATH."""
    return config.cc() or "cc"


def translation_unit(units: Sequence[CompileUnit]) -> str:
    """The source of one group: each kernel isolated, in queue order; a kernel that needs a
    unit of its own (`warmcli.backends.sharing`) is the only one, nothing of it renamed."""
    from warmcli.backends import signature  # on first use: a serving process never compiles
    from warmcli.backends.compiler import isolated_section
    from warmcli.backends.sharing import alone_in

    shared = not alone_in(units)
    if not shared and ALIASES and not static_entry(units[0].kernel) and not _visibility(units[0]):
        (unit,) = units  # its entry keeps its name (`__func__`), exported as its symbol
        entry, symbol = unit.kernel.entry, unit.symbol
        source = unit.kernel.source + signature.probe(unit)
        section = isolated_section(unit, source, entry_macro=False, rename_helpers=False)
        alias = f'extern __typeof__({entry}) {symbol} __attribute__((alias("{entry}")));\n'
        return section + alias
    sections = [
        isolated_section(unit, unit.kernel.source + signature.probe(unit), rename_helpers=shared)
        for unit in units
    ]
    return "\n".join(sections)


def base_file(kernel: Kernel) -> str:
    """For a kernel alone in its unit, lines making `__BASE_FILE__` `"<entry>.c"` as `__FILE__`
    is, not the scratch file's path (each build another), its redefinition's warning silenced
    (`-Werror`): for every one, as a paste spells it unwritten (`C(__BASE, _FILE__)`), and so
    may a wrapper script's options (`WARM_CC`: `-DWHO=__BASE_FILE__`). cc reads them first
    (`-include`, before a header the kernel's options pre-include, which may read it): so gcc
    reads no precompiled header (`.gch`) for the kernel's first `#include` (its text, not the
    `.gch`, is what a build reads). The unit's file is not named `<entry>.c`: gcc would show
    its lines (warm's, above the kernel's `#line`) as the kernel's in a compile error."""
    said = f'#undef __BASE_FILE__\n#define __BASE_FILE__ "{kernel.entry}.c"\n'
    quiet = '#pragma GCC diagnostic push\n#pragma GCC diagnostic ignored "-Wbuiltin-macro-'
    return f'{quiet}redefined"\n{said}#pragma GCC diagnostic pop\n'


def _system_folders(cc: str) -> tuple[str, ...]:
    """`cc`'s own include folders (`system_folders`, imported where a key first asks)."""
    from warmcli.backends.system_folders import system_folders

    return system_folders(cc)


def static_entry(kernel: Kernel) -> bool:
    """Whether the kernel's entry looks `static` (cc exports no such function: an alias would
    export it, so it is renamed as in a shared unit and, as there, not found)."""

    from warmcli.backends.compiler import UNSCANNED

    code = UNSCANNED.sub(" ", kernel.source)
    # (attributes between: `static __attribute__((noinline)) void k(`)
    return bool(re.search(rf"\bstatic\b[^;{{}}]*?\b{kernel.entry}\s*\(", code))


def _visibility(unit: CompileUnit) -> bool:
    """Whether the kernel may set a symbol's visibility (`-fvisibility=hidden`, an attribute,
    a pragma): an alias would not share its entry's, so its entry is renamed instead."""
    k = unit.kernel
    texts = (k.source, *k.options, *(f"{name} {value}" for name, value in k.defines))
    return any("visibility" in text for text in texts)


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


def _library_specs(
    cc: str, units: Sequence[CompileUnit], scratch: str, timeout: float | None
) -> None:
    """Refuse the compile where `LIBRARY_PATH` or `GCC_EXEC_PREFIX` makes cc read a `specs`
    file it would not read without them (gcc looks for one along its library folders, theirs
    among them, and takes its options into every compile): no key covers it, so an edit there
    would be served the old build. Asked of cc as the compile runs it (in `scratch`), with and
    without them (`-print-file-name=specs`: the bare name where it reads none)."""
    from warmcli.backends.compiler import CompileFailure, run_compiler

    ask = [cc, "-print-file-name=specs"]
    found = run_compiler(ask, units, timeout, scratch)[0].strip()
    if found == "specs" or not os.path.isabs(found):
        return
    unset = ["env", "-u", "LIBRARY_PATH", "-u", "GCC_EXEC_PREFIX", *ask]
    if run_compiler(unset, units, timeout, scratch)[0].strip() == found:
        return  # cc's own, found whatever they say: its identity's
    raise CompileFailure(
        f"cc reads the specs file {os.path.normpath(found)} in a LIBRARY_PATH or GCC_EXEC_PREFIX "
        "folder, whose options no kernel key covers (an edit there would be served the old "
        "build): move it out of their folders, and give the options it adds as the kernel's own",
        tuple(units),
    )


def found_anew(cc: str, moved: Moved, search: str) -> Toolchain:
    """`_toolchain`'s identity found by asking every folder (none remembered whole): cc's
    version line, then those of the programs it runs (`host.programs`) and the variables."""
    found = probe("cc", cc)
    added = "".join(f"; {name}={environment_named(v)}" for name, v in moved)
    version = found.version + programs_line(found, moved, search) + added  # its `as` and `ld`
    return Toolchain(name=found.name, path=found.path, version=version)


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
        options = list(units[0].kernel.options) if units else []
        if units and units[0].kernel.reads_headers:  # it runs in a scratch folder
            from warmcli.headers import absolute_include_options

            options = absolute_include_options(options)
        flags = [*BASE_FLAGS, *DEFS_FLAGS, *load_flags(options)]
        return [self.toolchain.path, *flags, *options, "-o", output, source, "-lm"]

    def _no_library(self, units: Sequence[CompileUnit], what: str) -> Exception:
        """A compile that exited 0 with no loadable library: the kernels' failure where their
        options may stop cc before it links (`-c`, `-E`, `-fsyntax-only`), else the compiler's."""
        from warmcli.backends.compiler import CompileFailure

        options = " ".join(units[0].kernel.options) if units else ""
        if options:
            return CompileFailure(
                f"{self.toolchain.path} {what} with the kernel's options ({options}): an option "
                "that stops it before it links a shared library (-c, -E, -S, -fsyntax-only) "
                "is no kernel's",
                tuple(units),
            )
        return ToolchainError(f"cc: {self.toolchain.path} {what}: WARM_CC must name a C compiler")

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup:
        from warmcli.backends import signature
        from warmcli.backends.compiler import CompiledGroup, CompileFailure, run_compiler
        from warmcli.backends.host.refused import (  # (what compiles: on first use)
            other_language,
            other_source,
            reads_assembler_file,
            refusal,
            unkeyed_option,
        )
        from warmcli.backends.sharing import alone_in

        refused = next((o for u in units if (o := unkeyed_option(u.kernel.options))), None)
        if refused is not None:
            raise CompileFailure(refusal(refused), tuple(units))
        other = next((o for u in units if (o := other_source(u.kernel.options))), None)
        if other is not None:
            raise CompileFailure(
                f"option {other!r} is a source cc would compile with the kernel, whose "
                "#includes no kernel key follows (an edited header would be served the old "
                "build): put its code in the kernel's source, or link its object",
                tuple(units),
            )
        reads = next((u for u in units if reads_assembler_file(u.kernel.source)), None)
        if reads is not None:
            raise CompileFailure(
                f"kernel {reads.kernel.label}: its assembly reads a file (.incbin, .include) no "
                "kernel key covers (an edit there would be served the old build): put the data "
                "in the source, or pass it through a buffer",
                (reads,),
            )
        language = next((x for u in units if (x := other_language(u.kernel.options))), None)
        if language is not None:
            raise CompileFailure(
                f"option -x {language} reads the kernel as another language than C: a host "
                "kernel is C (warm checks its parameter letters in C)",
                tuple(units),
            )
        with scratch_folder("warm-cc-") as scratch:  # (a forked child's exit never removes it)
            if config.library_path() or "GCC_EXEC_PREFIX" in config.compiler_programs():
                _library_specs(self.toolchain.path, units, scratch, timeout)
            source = os.path.join(scratch, "batch.c")
            output = os.path.join(scratch, "batch.so")
            with open(source, "w", encoding="utf-8") as fh:  # as the key reads it, any locale
                fh.write(translation_unit(units))
            command = self.command(units, source, output)
            if alone_in(units):  # (`base_file`, read before any header the options name)
                with open(first := os.path.join(scratch, "base.h"), "w", encoding="utf-8") as fh:
                    fh.write(base_file(units[0].kernel))
                command[1:1] = ["-include", first]
            try:
                log, seconds = run_compiler(command, units, timeout, scratch)
            except CompileFailure as failure:
                raise signature.explain(failure) from None
            try:
                with open(output, "rb") as fh:
                    binary = fh.read()
            except FileNotFoundError:  # `true`, a wrapper that drops its `-o`, `-fsyntax-only`
                raise self._no_library(units, "exited 0 but wrote no shared library") from None
        from warmcli.backends.host.binary import exported_symbols, foreign_binary

        unloadable = foreign_binary(binary)  # `-c`, `-E`, `-S`: an object, or text
        if unloadable:
            wrote = unloadable.replace("bundle's build", "its output")
            raise self._no_library(units, f"wrote no loadable shared library ({wrote})")
        exported = exported_symbols(binary)
        hidden = [u for u in units if exported is not None and u.symbol not in exported]
        if hidden:  # built, but no process could launch it: its compile fails, named
            kernel = hidden[0].kernel
            raise CompileFailure(
                f"kernel {kernel.label}: its entry {kernel.entry!r} is not exported by the "
                "binary cc built (an `inline` entry without `extern`, or one hidden: "
                "`-fvisibility=hidden`, a visibility attribute or pragma), so no process could "
                "launch it: make it a plain external function",
                tuple(units),
            )
        return CompiledGroup(
            binary=binary,
            symbols={u.key: u.symbol for u in units},
            log=log,
            seconds=seconds,
            command=tuple(command),
        )
