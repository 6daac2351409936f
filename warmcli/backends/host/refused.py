"""What a host kernel's options or source make cc read or run that no kernel key covers: refused.

An option reading more options or a file (`@file`, `-Wa,@file`, `-specs=`, `-iprefix`), an include
folder or header handed past the key (`-Wp,-I,folder`, `-Xpreprocessor -I`), `-I-`, a folder in the
linker's system root (`-L=/lib`, `-Wl,--sysroot=`), compiler programs from a `-B` prefix or the
linker `-fuse-ld=` picks (`unkeyed_option`, by `warmcli.backends.unkeyed_options`, which nvcc's
`-Xcompiler` is read by too; `refusal` saying what to write instead); another source cc would
compile (`other_source`), the source as another language (`other_language`), an assembler directive
reading a file (`reads_assembler_file`). `warmcli.backends.host.building` asks these before cc
runs, imported there on first use: a served process compiles nothing. Pure functions of the text
given; it owns no state, reads no file and never raises.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from warmcli.backends.unkeyed_options import in_system_root, unkeyed_file


def refusal(option: str) -> str:
    """Why `option` (`unkeyed_option`'s) is refused, and what to write instead."""
    said = f"option {option!r} reads a file no kernel key covers"
    if option.startswith(("-fuse-ld=", "--ld-path")):
        return (
            f"{said}, the linker it makes cc run (the first of its name found): leave it out "
            "(the ld cc runs by default is named in the key)"
        )
    if option.startswith("-B") and option[2:].isalpha():  # `-Bsymbolic`: the linker's, meant
        return (
            f"{said}, a compiler program (to cc it is -B, a prefix of the programs it runs): "
            f"leave it out, or hand it to the linker as -Wl,{option}"
        )
    return (
        f"{said} (options, an include prefix or folder, a system root's, compiler programs; an "
        "edit there would be served the old build): give them in options (-D..., -I folder, "
        "-include header, -L folder)"
    )


def unkeyed_option(options: Sequence[str]) -> str | None:
    """The first of `options` that reads a file no key covers (`unkeyed_file`), an option
    handed on (`-Xpreprocessor -idirafter`) read as its `-Wp,` (`-Wl,`, `-Wa,`) spelling (a
    flag handed on hands nothing: `-Xlinker -Xlinker -specs=f` is cc's `-specs=f`), a folder
    after a lone `-L` (`-L =/lib`, `-Xlinker -L -Xlinker =/lib`) with it; else None."""
    from warmcli.handed_on import handed_on  # on first use: a serving process never compiles

    said = ""  # the linker's word before
    for option, handed in handed_on(options):  # `-Xlinker a` is `-Wl,a`
        spelled = handed + option
        if unkeyed_file(spelled):
            return option
        pieces = spelled[4:].split(",") if spelled.startswith("-Wl,") else [spelled]
        if not spelled.startswith(("-Wp,", "-Wa,")) and in_system_root([said, *pieces]):
            return option
        said = pieces[-1]
    return None


# What cc compiles (rather than links) when an option names it: C, C++, preprocessed, assembly.
_SOURCES = (".c", ".i", ".cc", ".cp", ".cxx", ".cpp", ".c++", ".C", ".ii", ".s", ".S", ".sx")
# Options whose value is the next option (a header, a folder, a macro...): no input file.
_VALUED = (
    "-include", "-imacros", "-I", "-isystem", "-iquote", "-idirafter", "-D", "-U", "-x",
    "-MF", "-MT", "-MQ", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-L", "-l", "-u",
    "-T", "-z", "-e", "-aux-info", "--include-directory", "--include-directory-after",
    "--param", "-A", "-imultilib", "-iwithprefixbefore", "-dumpbase", "-dumpdir",
)  # fmt: skip


def reads_assembler_file(source: str) -> bool:
    """Whether `source` holds an assembler directive reading a file (`.incbin "..."`) outside
    its C comments (one that only mentions it reads nothing): `warmcli.directives`'s."""
    from warmcli.directives import reads_assembler_file as reads  # (what compiles: first use)

    return reads(source.encode(errors="surrogatepass"))


def other_source(options: Sequence[str]) -> str | None:
    """The option naming a source file cc would compile beside the kernel's (`/opt/x.c`, or any
    file after `-x c`: read as C whatever its name), or None: the key holds its content
    (`warmcli.linked`) but never follows its `#include`s."""
    language = "none"
    for before, option in zip(("", *options), options, strict=False):
        if before == "-x" or (option.startswith("-x") and option != "-x"):
            language = option if before == "-x" else option[2:]
        named = before not in _VALUED and not option.startswith("-")
        if named and (language != "none" or os.path.splitext(option)[1] in _SOURCES):
            return option
    return None


def other_language(options: Sequence[str]) -> str | None:
    """The language other than C that `options` make cc read the source as (`-x c++`,
    `-xc++`), or None."""
    for before, option in zip(("", *options), options, strict=False):
        language = option if before == "-x" else option[2:] if option.startswith("-x") else None
        if language is not None and option != "-x" and language not in ("c", "none"):
            return language
    return None
