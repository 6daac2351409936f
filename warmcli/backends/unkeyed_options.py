"""Which of a C compiler's options make it read a file, or run a program, no kernel key covers.

An option reading more options (`@file`, `-Wa,@file`), an include prefix (`-iprefix`), a system
root's headers (`--sysroot`), a specs file, compiler programs from a `-B` prefix or the linker
`-fuse-ld=` picks, an include folder or header handed past the key (`-Wp,-I,folder`), `-I-`
(`unkeyed_file`), a library folder in the linker's system root (`in_system_root`). Asked of a
host kernel's options (`warmcli.backends.host.refused`) and of what nvcc hands the host compiler
that preprocesses device code (`-Xcompiler`: `warmcli.backends.cuda.host_options`), both
refusing such an option before a compiler runs. Pure functions of the text given: no state, no
file read, never raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from warmcli.kernel_parts import PASSED_INCLUDE_PREFIXES

# Options that make cc read a file no kernel key covers (more options, an include prefix, a
# system root's headers, a specs file, the folder `-fplugin=name` loads a plugin from; a folder
# of compiler programs, `-B`, in `unkeyed_file`):
# refused, as nvcc's `--options-file` is. `@file` (cc's or, through `-Wl,`, the linker's).
_UNKEYED_FILES = (
    "-iprefix", "-iwithprefix", "--include-prefix", "--include-with-prefix",
    "--sysroot", "-isysroot", "-specs", "--specs", "-iplugindir",
)  # fmt: skip


def unkeyed_file(option: str) -> bool:
    """Whether `option` makes cc (or its linker or assembler: `-Wa,@file`) read a file no kernel
    key covers, or run compiler programs found in a folder it names (`-B folder/`, `--prefix`,
    `-wrapper`) or a linker it picks (`-fuse-ld=gold`), or hands the preprocessor an include
    folder or header past the key (`-Wp,-I,folder`), or makes quoted names skip the including
    file's folder (`-I-`)."""
    from warmcli.handed_on import handed_pieces  # on first use: a serving process never compiles

    pieces = handed_pieces(option)
    # Every `-B`: cc makes a folder's name a prefix (`-B..`: `../as`, from its scratch folder
    # the temporary folder), and reads `-Bstatic` so too (a `-B` prefix: the linker's is `-Wl,`).
    # `-fuse-ld=gold` (clang's `--ld-path=`): the `ld.gold` found first, which no identity names.
    programs = (
        option.startswith(("-B", "--prefix", "-fuse-ld=", "--ld-path")) or option == "-wrapper"
    )
    passed = option.startswith("-Wp,")  # an include folder or header past the key
    headers = passed and any(p.startswith(PASSED_INCLUDE_PREFIXES) for p in pieces)
    return (
        programs
        or headers
        or option == "-I-"
        or any(p.startswith("@") for p in pieces)
        or option.startswith(_UNKEYED_FILES)
        or in_system_root(pieces)
    )


# What the linker reads in its system root, unkeyed: a folder `=/lib` or `$SYSROOT/lib`
# (`-L=/opt/lib`: the sysroot ld was built with), or one named by `--sysroot`.
_ROOTED = ("=", "$SYSROOT")


def in_system_root(pieces: Sequence[str]) -> bool:
    """Whether `pieces` (an option, or those `-Wl,` passes on) name a library folder in the
    linker's system root (`-L=/lib`, `-L`, `=/lib`) or set that root (`--sysroot=`)."""
    before = ""
    for piece in pieces:
        valued = before in ("-L", "--library-path") and piece.startswith(_ROOTED)
        folder = piece[2:] if piece.startswith("-L") else piece.partition("=")[2]
        named = piece.startswith(("-L", "--library-path=")) and folder.startswith(_ROOTED)
        if valued or named or piece.startswith("--sysroot"):
            return True
        before = piece
    return False
