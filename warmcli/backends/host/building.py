"""What the host compiler runs to build a group: its translation unit, its command, the build.

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
cc runs in a scratch directory, so a relative include folder, a header read first by a relative name
(`-include h`) and the relative entries of `CPATH` are given as the folder's the unit was queued in,
where its key read them (`CompileUnit.queued`). A compile that exits 0 with no loadable shared
object (a kernel option such as `-c` or `-fsyntax-only` stopped cc before it linked) is that group's
compile failure, never a binary stored and then refused at load (and one with no library at
all where this process ignores SIGCHLD, which makes every exit status read 0); so is a library
that does not export a kernel's symbol (an `inline` entry, `-fvisibility=hidden`: that kernel's,
named), and what `warmcli.backends.host.refused` refuses before cc runs; so is a `specs` file
cc reads only through `LIBRARY_PATH` or `GCC_EXEC_PREFIX` (asked of cc: `_library_specs`); so
is a relative name in the kernel's options or source that climbs out of the scratch folder
(`-include ../cfg.h`, `#include "../cfg.h"`) or finds a file there (`-L..`, `-include base.h`:
`warmcli.backends.scratch_reads`, nvcc's check too).
`HostCompiler.command` and `compile_group` hand their work here: a process that only serves
never imports this module. It owns each call's scratch directory, never loads what it builds and
keeps no cache of it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from warmcli import config
from warmcli.backends.compiler import CompiledGroup, CompileFailure, CompileUnit, run_compiler
from warmcli.backends.toolchain import Toolchain
from warmcli.errors import ToolchainError
from warmcli.scratch import scratch_folder

if TYPE_CHECKING:
    from warmcli.kernel import Kernel


class Builder(Protocol):
    """What a build reads of its `HostCompiler`: its cc (`toolchain`, found on first use)."""

    @property
    def toolchain(self) -> Toolchain: ...


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


def _library_specs(
    cc: str, units: Sequence[CompileUnit], scratch: str, timeout: float | None
) -> None:
    """Refuse the compile where `LIBRARY_PATH` or `GCC_EXEC_PREFIX` makes cc read a `specs`
    file it would not read without them (gcc looks for one along its library folders, theirs
    among them, and takes its options into every compile): no key covers it, so an edit there
    would be served the old build. Asked of cc as the compile runs it (in `scratch`), with and
    without them (`-print-file-name=specs`: the bare name where it reads none)."""

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


def command(compiler: Builder, units: Sequence[CompileUnit], source: str, output: str) -> list[str]:
    """`HostCompiler.command`: cc, its flags, the kernel's options, `-o output source -lm`."""
    options = list(units[0].kernel.options) if units else []
    if units and units[0].kernel.reads_headers:  # it runs in a scratch folder
        from warmcli.headers import absolute_include_options

        options = absolute_include_options(options, units[0].folder)
    flags = [*BASE_FLAGS, *DEFS_FLAGS, *load_flags(options)]
    return [compiler.toolchain.path, *flags, *options, "-o", output, source, "-lm"]


def no_library(compiler: Builder, units: Sequence[CompileUnit], what: str) -> Exception:
    """A compile that exited 0 with no loadable library: the kernels' failure where their
    options may stop cc before it links (`-c`, `-E`, `-fsyntax-only`), else the compiler's."""

    options = " ".join(units[0].kernel.options) if units else ""
    if options:
        return CompileFailure(
            f"{compiler.toolchain.path} {what} with the kernel's options ({options}): an option "
            "that stops it before it links a shared library (-c, -E, -S, -fsyntax-only) "
            "is no kernel's",
            tuple(units),
        )
    return ToolchainError(f"cc: {compiler.toolchain.path} {what}: WARM_CC must name a C compiler")


def compile_group(
    compiler: Builder, units: Sequence[CompileUnit], timeout: float | None = None
) -> CompiledGroup:
    """`HostCompiler.compile_group`: the group refused, or built in a scratch folder, its
    binary checked (a loadable shared object exporting every kernel's symbol)."""
    from warmcli.backends import processes, signature
    from warmcli.backends.host.refused import (  # (what compiles: on first use)
        other_language,
        other_source,
        reads_assembler_file,
        refusal,
        unkeyed_option,
    )
    from warmcli.backends.scratch_reads import refuse_scratch_reads  # (what compiles: first use)
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
            _library_specs(compiler.toolchain.path, units, scratch, timeout)
        source = os.path.join(scratch, "batch.c")
        output = os.path.join(scratch, "batch.so")
        with open(source, "w", encoding="utf-8") as fh:  # as the key reads it, any locale
            fh.write(translation_unit(units))
        argv = command(compiler, units, source, output)
        if alone_in(units):  # (`base_file`, read before any header the options name)
            with open(first := os.path.join(scratch, "base.h"), "w", encoding="utf-8") as fh:
                fh.write(base_file(units[0].kernel))
            argv[1:1] = ["-include", first]
        environ = units[0].environment if units else None  # (`-include ../cfg.h`, `-L..`)
        refuse_scratch_reads(
            argv[1:], units, scratch, config.library_path(environ), compiler.toolchain.identity
        )
        try:
            log, seconds = run_compiler(argv, units, timeout, scratch)
        except CompileFailure as failure:
            raise signature.explain(failure) from None
        try:
            with open(output, "rb") as fh:
                binary = fh.read()
        except FileNotFoundError:  # `true`, a wrapper that drops its `-o`, `-fsyntax-only`
            if processes.exit_status_lost():  # cc's failure read as exit 0: the kernels'
                failed = log or f"{argv[0]} wrote no shared library"
                raise CompileFailure(failed, tuple(units)) from None
            raise no_library(compiler, units, "exited 0 but wrote no shared library") from None
    from warmcli.backends.host.binary import exported_symbols, foreign_binary

    unloadable = foreign_binary(binary)  # `-c`, `-E`, `-S`: an object, or text
    if unloadable:
        wrote = unloadable.replace("bundle's build", "its output")
        raise no_library(compiler, units, f"wrote no loadable shared library ({wrote})")
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
    return CompiledGroup.of(units, binary, log, seconds, command=tuple(argv))
