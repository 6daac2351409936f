"""What a kernel's options or source name relatively that its compiler reads in its scratch folder.

cc and nvcc run in a scratch folder of warm's inside the temporary folder (`host.building`,
`cuda.nvcc`: the group's source, `batch.c` or `tu.cu`, written there).
Include folders, and a header read first that the working folder holds, are given it by their
absolute paths (`include_options.absolute_include_options`); any other relative name is read by
the compiler (and cc's linker) from the scratch folder, where no key looks (`warmcli.linked`
keys files named by their absolute paths, `warmcli.headers` a header read first from the working
folder, else along the include folders, and the source's own quoted names along those folders
only, where the compiler searches the source's folder, the scratch one, first): `-include
../cfg.h`, `#include "../cfg.h"` (or `#include CFG`, its value `"../cfg.h"` given by an option,
a define, the source or a header its key reached, as the key's walk told it:
`computed_includes.source_told`; `#include_next`) and `-L..` reach the temporary folder above it
(anyone's), `../helper.o` or `-fplugin=../p.so` a file there, `-include base.h` or `#include
"base.h"` warm's own file in it (cc's; nvcc's `tu.cu`).
`scratch_read` names the first such name: a quoted include or a header read first that climbs
out of the scratch folder (`..`), whether or not the temporary folder holds it yet (one put there
later is read first, under the same key; a source's line no compile reads, a comment's or an
`#if 0` group's, is not one), else any other relative name that finds a file there
(a name that finds none is searched on, or fails, as the key reads it), and a library folder
climbing out of it there or not (`-L..`: one put there later is linked first, cc's `-lc` too),
and a linker script named relatively (`-T x.ld`: ld's next place is the `-L` folders, unkeyed);
`refuse_scratch_reads` fails the compile with it in one line, rather than build from a file
whose edit would be served the old build (a header's name that finds warm's own file, `base.h`:
told to rename it, or to name it through a folder of its `-I` folder, `sub/base.h`). It is the
one place cc's and nvcc's builds refuse these (NVRTC reads no folder for the source). It owns
no state, writes nothing and asks only whether files are there (and which: warm's own, named),
walking a kernel's headers again only where its source includes a macro; what it reads with is
imported on first use (`cuda.nvcc` imports it, which a serving process may), the header walk
only for a source that may name a header (the word `include` or `import` in a line a compile
reads, or what could hide one: `directives.may_hide`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from warmcli.backends.compiler import CompileFailure, CompileUnit
from warmcli.scratch import climbs

if TYPE_CHECKING:
    from warmcli.kernel import Kernel


def _quoted(kernel: Kernel, options: Sequence[str], identity: str) -> list[str]:
    """The quoted names `kernel`'s source includes or asks `__has_include` for, written or
    given a macro it includes (`#include CFG`, `-DCFG="../cfg.h"`: `named_headers`; by a header
    its key reaches too, `#define CFG "../cfg.h"` in an `-I` folder's: its key's walk made
    again, `source_told`, each header read once a stamp), in the lines a compile may read
    (`read_lines`: not a comment's, nor an `#if 0` group's). `identity`: its toolchain's."""
    from warmcli.directives import may_hide, read_lines

    text = read_lines(kernel.source.encode(errors="surrogatepass"))  # (what a compile reads)
    if not may_hide(text) and not any(w in text for w in (b"include", b"import", b"dependency")):
        return []  # (no directive names a header: the header walk is not even imported)
    from warmcli.computed_includes import macro_includes, macro_values, named_headers, source_told
    from warmcli.headers import DATED, NEXT, source_includes
    from warmcli.kernel import included_headers

    read = source_includes(text.decode(errors="surrogatepass"))
    names = [n.removeprefix(NEXT).removeprefix(DATED) for n, q in read if q]
    if macros := macro_includes(text):
        values = macro_values(options, kernel.defines, [text])
        names += [n for m, _ in macros for n, q in named_headers(m, values)[0] if q]
        names += source_told(lambda: included_headers(kernel, identity))
    return [name for name in names if not name.startswith("\0")]


# What names ld's script (`-T x.ld`, `--script=x.ld`; `-dT`, its default one) and what `-T`
# starts that is an address instead (`-Ttext=0x400000`, `-Ttext-segment=...`).
_SCRIPT_FLAGS = ("-T", "-dT", "--script", "--default-script")
_LD_ADDRESS = re.compile(r"(?:text|data|bss|ldata|text-segment|rodata-segment)(?:=|$)")


def _relative(name: str) -> bool:
    """Whether `name` is a relative path (not an option, `-O2`, nor an absolute path)."""
    return name[:1] not in ("-", "/", "")


def scratch_read(
    argv: Sequence[str],
    kernels: Sequence[Kernel],
    scratch: str,
    library_path: str | None,
    identity: str = "",
) -> tuple[str, str] | None:
    """What first names by a relative path a file the compiler reads from `scratch`, said as it
    is named: a quoted name the source of one of `kernels` (those compiled there) includes or
    asks `__has_include` for (`#include "../cfg.h"`, the search starting in the source's
    folder), or in `argv` (the options as the compiler runs them there) a header read first
    (`-include ../cfg.h`), either climbing out of `scratch` (whether or not the file is there
    yet) or found there; an input or a value after `=` found there (`../helper.o`,
    `-fplugin=../p.so`); a library folder of `-L` or `library_path` (`LIBRARY_PATH`) climbing
    out of `scratch` (`-L..`, `-L../lib`, there or not), or holding a library the link names;
    a linker script named relatively (`-T x.ld`: ld looks for it there, then along the `-L`
    folders, where no key looks; by its absolute path, `linked` keys it); else None. These two
    where the compiler links (`library_path` not None: cc; nvcc's cubin links nothing).
    `identity`: the kernels' toolchain's, as their keys read it (`_quoted`). With it, the name
    of warm's own file there a header's name finds (`base.h`, `batch.c`, nvcc's `tu.cu`: a new
    scratch folder holds only what warm wrote), else ""."""
    from warmcli.include_options import pre_included  # (what compiles: on first use)
    from warmcli.linked import file_texts, flag_values, found_libraries, linker_words

    quoted = [n for k in kernels for n in _quoted(k, argv, identity)]
    headers = [(f'the source\'s #include "{n}"', n) for n in quoted]
    headers += [(f"option {n!r}", n) for n in pre_included(argv)]
    if climbing := next((what for what, n in headers if _relative(n) and climbs(n)), None):
        return climbing, ""  # (no stat asked)
    inputs = [(f"option {n!r}", n) for n in file_texts(argv)]
    for what, name, header in [*((w, n, True) for w, n in headers), *((*i, False) for i in inputs)]:
        if _relative(name) and os.path.isfile(os.path.join(scratch, name)):
            return what, name if header and not climbs(name) else ""
    if library_path is None:
        return None
    words = linker_words(tuple(argv))
    flagged = [(f"option {'-L' + f!r}", f) for f in flag_values(words, "-L")]
    entries = [(f"LIBRARY_PATH's entry {f!r}", f) for f in library_path.split(os.pathsep) if f]
    for what, folder in [(s, f) for s, f in [*flagged, *entries] if not os.path.isabs(f)]:
        if climbs(folder):  # (searched first for cc's own libraries too, `-lc`: no stat asked)
            return what, ""
        if next(found_libraries(words, [os.path.join(scratch, folder)], static=False), None):
            return what, ""
    scripts = ((f, n.removeprefix("=")) for f in _SCRIPT_FLAGS for n in flag_values(words, f))
    for flag, name in scripts:  # (there or not: ld looks along the -L folders next, unkeyed)
        if _relative(name) and not (flag == "-T" and _LD_ADDRESS.match(name)):
            return f"option {flag + ' ' + name!r} (a linker script, looked for along -L too)", ""
    return None


def refuse_scratch_reads(
    options: Sequence[str],
    units: Sequence[CompileUnit],
    scratch: str,
    library_path: str | None = None,
    identity: str = "",
) -> None:
    """Fail the compile of `units` where `scratch_read` finds what `options` (the kernels', as
    their compiler is given them in `scratch`) or their sources name there (`library_path`:
    `LIBRARY_PATH`, where the compiler links; None for nvcc's cubin; `identity`: their
    toolchain's). A header's name that finds warm's own file there is told what to do instead:
    another name, or one through a folder of its `-I` folder (`sub/base.h`)."""
    found = scratch_read(options, [u.kernel for u in units], scratch, library_path, identity)
    if found is None:
        return
    what, own = found
    if own:
        held, base = ", ".join(sorted(os.listdir(scratch))), own.rpartition("/")[2]
        raise CompileFailure(
            f"{what} reads warm's own {own!r}, a file warm writes in the compiler's scratch "
            f"folder (which holds {held}), where the search for a quoted name starts, before "
            "any -I folder, and which no kernel key covers: rename the header, or name it by "
            "a path within its -I folder that warm's scratch folder does not hold "
            f"('sub/{base}', the -I folder above sub)",
            tuple(units),
        )
    raise CompileFailure(
        f"{what} names by a relative path a file the compiler reads from its scratch "
        "folder, or above it (the temporary folder's, anyone's, or warm's own), which no "
        "kernel key covers (an edit there, or a file put there, would be served the old "
        "build): name it by its absolute path, from the working folder, or within an -I "
        "folder",
        tuple(units),
    )
