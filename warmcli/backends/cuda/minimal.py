"""Whether NVRTC's `-minimal` can be given to a translation unit without changing what is built.

`-minimal` (NVRTC 12.4 on) leaves out of every program the declarations few kernels use:
texture and surface functions, the device runtime's (cudadevrt) functions, device-side
launch, and the CUDA runtime and driver API types and macros (`cudaError_t`,
`CUDART_VERSION`, `CUresult`); it defines `__CUDACC_RTC_MINIMAL__`. That cuts an NVRTC
program's fixed cost by about a fifth (a one-kernel program, as a production miss is).
A unit that never names any of that builds the same cubin and PTX, byte for byte, with
or without it; `minimal_safe` is the conservative test of that on the unit's own text
(its source, its defines' names and values, its options), never on what it compiles to:
no `#include` or `__has_include` (a header may use what is left out), no token pasting
(`##` could make a left-out name), no `<<<`, nothing that spells a name or a directive
the raw text does not show (a backslash-newline splice, a `\\u` character name, a
trigraph, the digraph `%:`), no identifier containing `cuda`, `tex` or
`surf` in any case or starting with `CU` (a handful of compiler-defined macros such as
`__CUDA_ARCH__` excepted: `-minimal` does not touch them), nor the only other names it
leaves out (library_types.h's `libraryPropertyType` and its enumerators: found by
compiling every macro and global name of NVRTC 13.5's builtin headers with and without
it), and no option outside a short list that only tunes code generation (`-include`,
`-rdc` and the like turn it off).
warm's own text around each kernel (`warmcli.backends.signature`, the namespaces) is
the same either way. The kernel key is unchanged: what it keys is built the same. A
compile that fails with `-minimal` anyway is compiled again without it by the compiler,
with a `--compile-timeout` of its own, and that result is kept (`warmcli.backends.cuda.nvrtc`).
Pure functions over text: nothing here compiles or keeps state.
"""

from __future__ import annotations

from collections.abc import Sequence

from warmcli.backends.compiler import CompileUnit
from warmcli.backends.sharing import LINE_SPLICE
from warmcli.printable import Pattern

MINIMAL = "-minimal"
MINIMAL_SINCE = (12, 4)  # the first NVRTC that knows `-minimal`
# Text that can reach what `-minimal` leaves out without naming it, or spell a name or a
# directive that the raw text does not show: a universal character name, a trigraph, `%:`
# (the digraph of `#`); and a line splice (`sharing.LINE_SPLICE`: the compiler removes it
# before it reads a name).
_REACHES = Pattern(r"#\s*include|__has_include|##|<<<|#\s*import|\\[uU]|\?\?|%:")
_IDENTIFIER = Pattern(r"[A-Za-z_][A-Za-z0-9_]*")
_LEFT_OUT = ("cuda", "tex", "surf")  # in an identifier, in any case
# The only other names it leaves out, in any identifier (every macro and global name of
# NVRTC 13.5's builtin headers compiled with and without it: the rest hold those words).
_LEFT_OUT_NAMES = ("libraryPropertyType", "MAJOR_VERSION", "MINOR_VERSION", "PATCH_LEVEL")
# Macros the compiler itself defines, the same with `-minimal` (tested byte for byte).
_COMPILER_MACROS = frozenset({"__CUDA_ARCH__", "__CUDACC__", "__CUDACC_RTC__"})
# Options that only tune code generation or diagnostics (their text is checked too; -D and
# -U name macros, checked as text): any other turns `-minimal` off.
_TUNING = frozenset(
    {
        "-D",
        "--define-macro",
        "-U",
        "--undefine-macro",
        "-G",
        "--device-debug",
        "-lineinfo",
        "--generate-line-info",
        "-dopt",
        "--dopt",
        "-maxrregcount",
        "--maxrregcount",
        "-ftz",
        "--ftz",
        "-prec-sqrt",
        "--prec-sqrt",
        "-prec-div",
        "--prec-div",
        "-fmad",
        "--fmad",
        "-use_fast_math",
        "--use_fast_math",
        "-extra-device-vectorization",
        "--extra-device-vectorization",
        "-std",
        "--std",
        "-w",
        "--disable-warnings",
        "-restrict",
        "--restrict",
    }
)


def knows_minimal(version: tuple[int, int]) -> bool:
    """Whether an NVRTC of `version` (major, minor) knows `-minimal`."""
    return version >= MINIMAL_SINCE


def _option_name(option: str) -> str:
    if option.startswith(("-D", "-U")) and not option.startswith("--"):
        return option[:2]
    return option.split("=", 1)[0]


def _text_safe(text: str) -> bool:
    """Whether `text` neither reaches nor names anything `-minimal` leaves out: no
    identifier containing cuda, tex or surf in any case, or CU_, or starting with CU."""
    if _REACHES.search(text) or LINE_SPLICE.search(text):
        return False
    lower = text.lower()
    if any(name in text for name in _LEFT_OUT_NAMES):
        return False
    if "CU" not in text and not any(word in lower for word in _LEFT_OUT):
        return True  # no identifier holding those words can be in it
    for name in set(_IDENTIFIER.findall(text)) - _COMPILER_MACROS:
        low = name.lower()
        if name.startswith("CU") or "CU_" in name or any(word in low for word in _LEFT_OUT):
            return False
    return True


def minimal_safe(units: Sequence[CompileUnit]) -> bool:
    """Whether one translation unit of `units` builds the same with `-minimal` (see the
    module doc): every unit's source, defines and options pass the text test, and every
    option is one that only tunes code generation."""
    texts: dict[str, None] = {}
    for unit in units:
        kernel = unit.kernel
        if any(_option_name(o) not in _TUNING for o in kernel.options):
            return False
        texts[kernel.source] = None
        texts[" ".join([*kernel.options, *(f"{n} {v}" for n, v in kernel.defines)])] = None
    return _text_safe("\n".join(texts))
