"""What a kernel's options or source name relatively that its compiler reads in its scratch folder.

cc and nvcc run in a scratch folder of warm's inside the temporary folder (`host.building`,
`cuda.nvcc`: the group's source, `batch.c` or `tu.cu`, written there).
Include folders, and a header read first that the working folder holds, are given it by their
absolute paths (`include_options.absolute_include_options`); any other relative name is read by
the compiler (and cc's linker) from the scratch folder, where no key looks (`warmcli.linked`
keys files named by their absolute paths, `warmcli.headers` a header read first from the working
folder, else along the include folders, and the source's own quoted names along those folders
only, where the compiler searches the source's folder, the scratch one, first): `-include
../cfg.h`, `#include "../cfg.h"` (or `#include CFG`, `-DCFG="../cfg.h"`) and `-L..` reach the
temporary folder above it, `../helper.o` or `-fplugin=../p.so` a file there, `-include base.h`
warm's own file in it (cc's).
`scratch_read` names the first such name that finds a file there, and `refuse_scratch_reads`
fails the compile with it, rather than build from a file whose edit would be served the old
build (a name that finds none there is searched on, or fails, as the key reads it). It owns no
state, writes nothing and asks only whether files are there; what it reads with is imported on
first use (`cuda.nvcc` imports it, which a serving process may).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from warmcli.backends.compiler import CompileFailure, CompileUnit

if TYPE_CHECKING:
    from warmcli.kernel import Kernel


def _quoted(kernel: Kernel, options: Sequence[str]) -> list[str]:
    """The quoted names `kernel`'s source includes or asks `__has_include` for, written or
    given a macro it includes (`#include CFG`, `-DCFG="../cfg.h"`: `named_headers`)."""
    from warmcli.computed_includes import macro_includes, macro_values, named_headers
    from warmcli.headers import NEXT, _source_includes

    names = [n.removeprefix(NEXT) for n, q in _source_includes(kernel.source) if q]
    text = kernel.source.encode(errors="surrogatepass")
    if macros := macro_includes(text):
        values = macro_values(options, kernel.defines, [text])
        names += [n for m, _ in macros for n, q in named_headers(m, values)[0] if q]
    return [name for name in names if not name.startswith("\0")]


def scratch_read(
    argv: Sequence[str], kernels: Sequence[Kernel], scratch: str, library_path: str
) -> str | None:
    """What first names by a relative path a file found from `scratch`, said as it is named: a
    quoted name the source of one of `kernels` (those cc compiles there) includes or asks
    `__has_include` for (`#include "../cfg.h"`, cc's search starting in the source's folder),
    or in `argv` (cc's options as it runs them there) a header read first (`-include
    ../cfg.h`), an input or a value after `=` (`../helper.o`, `-fplugin=../p.so`), a library
    folder of `-L` or `library_path` (`LIBRARY_PATH`) holding a library the link names (`-L..`);
    else None."""
    from warmcli.include_options import pre_included  # (what compiles: on first use)
    from warmcli.linked import _candidates, _libraries, _linker_words, _separate

    quoted = [name for kernel in kernels for name in _quoted(kernel, argv)]
    said = [(f'the source\'s #include "{n}"', n) for n in quoted]
    said += [(f"option {n!r}", n) for n in (*pre_included(argv), *_candidates(argv))]
    for what, name in said:  # (an option, `-O2`, or an absolute path: no stat asked)
        if name[:1] not in ("-", "/", "") and os.path.isfile(os.path.join(scratch, name)):
            return what
    words = _linker_words(tuple(argv))
    flagged = [(f"option {'-L' + f!r}", f) for f in _separate(words, "-L")]
    entries = [(f"LIBRARY_PATH's entry {f!r}", f) for f in library_path.split(os.pathsep) if f]
    for what, folder in [(s, f) for s, f in [*flagged, *entries] if not os.path.isabs(f)]:
        if next(_libraries(words, [os.path.join(scratch, folder)], static=False), None):
            return what
    return None


def refuse_scratch_reads(
    options: Sequence[str], units: Sequence[CompileUnit], scratch: str, library_path: str = ""
) -> None:
    """Fail the compile of `units` where `scratch_read` finds what `options` (the kernels', as
    their compiler is given them in `scratch`) or their sources name there."""
    what = scratch_read(options, [unit.kernel for unit in units], scratch, library_path)
    if what is not None:
        raise CompileFailure(
            f"{what} names by a relative path a file the compiler reads from its scratch "
            "folder (the temporary folder's, or warm's own), which no kernel key covers (an "
            "edit there would be served the old build): name it by its absolute path, or from "
            "the working folder",
            tuple(units),
        )
