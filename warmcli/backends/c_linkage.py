"""The device names a CUDA source gives C linkage and leaves as they are: what two kernels
in one shared unit would have as one symbol.

Warm closes each CUDA kernel of a shared unit in a namespace of its own, which keeps apart
every name of C++ linkage; a name of C linkage (in an `extern "C" { }` block, as PyCUDA's
wrap puts the whole source, or declared `extern "C"`, with a comment or a line splice
between `extern` and `"C"` too) is one symbol whatever namespace it
is in: two kernels' `__constant__ float gain;` (no initializer, so no redefinition error)
are one object in the cubin, the constants one kernel set read by the other. A source
that renames such a name itself with a `#define` to a `warm_` name (warm's PyCUDA layer,
unique per kernel: `#define gain warm_pc<digest>_gain`, with no `#undef gain` and no other
`#define gain` to a text that names something, `alt_gain`, as a branch may) keeps it
apart; a macro whose text holds a device keyword may declare one wherever it is used
(`#define DECL(n) __constant__ float n;`, or one naming such a macro; one of `__global__`
alone declares kernels, `#define KERNEL extern "C" __global__`: not one): its name counts
as one where a declaration of C linkage names it (`#define HD __host__ __device__` used
outside any `extern "C"`: not); a macro whose text
gives C linkage (`#define LINK extern "C"`) gives it to each declaration naming it, and one
that opens an `extern "C" {` block to every declaration. `unrenamed_c_names`
reads the `__device__`/`__constant__`/`__managed__`/`__shared__` variables and the
`__device__` functions declared outside any function body, in any namespace, each
declarator of a declaration; `extern __shared__` arrays are left out (every one is the
launch's dynamic shared memory, no object of its own). Pure text functions; no state.
"""

from __future__ import annotations

import re

from warmcli.backends.compiler import ATTRIBUTE, LINE_SPLICE, UNSCANNED
from warmcli.printable import Pattern

_DEVICE = Pattern(r"\b(?:__device__|__constant__|__managed__|__shared__|__global__)\b")
# what a macro's (or a define's) text must hold to declare a variable or a helper: one of
# only `__global__` (`#define KERNEL extern "C" __global__`) declares kernels, each renamed
_DECLARING = Pattern(r"\b(?:__device__|__constant__|__managed__|__shared__)\b")
_EXTERN_C_WRITTEN = Pattern(r'\bextern\s*"C"')
_EXTERN_C = Pattern(r"\s*\bextern_C\b\s*")  # (`extern "C"` once its literal is read)
_NAMESPACE = Pattern(r"\s*(?:inline\s+)?namespace\b[\w\s:]*")
_SKIPPED = Pattern(r"\s*(?:typedef|using|template|static_assert|friend)\b")
_TYPE_ONLY = Pattern(r"\s*(?:struct|union|enum|class)\b")
_WARM_RENAME = Pattern(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+warm_\w+[ \t]*$", re.M)
UNDEF = Pattern(r"^[ \t]*#[ \t]*undef[ \t]+([A-Za-z_]\w*)", re.M)  # (pycuda.source too)
_MACRO = Pattern(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)([^\n]*)", re.M)
_WARM = Pattern(r"[ \t]+warm_\w+[ \t]*")  # the text of a `#define` that renames
_NAMING = Pattern(r"(?<![\w.])[A-Za-z_]\w*")  # a name in a macro's text (not `2.0f`'s f)
_IDENT = Pattern(r"[A-Za-z_]\w*")
_CLOSE = {"(": ")", "[": "]", "<": ">"}


# (`extern /* ... */ "C"` is `extern "C"`: comments go before it is read, literals stay)
_COMMENT_OR_STRING = Pattern(r'//[^\n]*|/\*[\s\S]*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')


def _comment_out(found: re.Match[str]) -> str:
    return found[0] if found[0][0] in "\"'" else " "


def _declarations(source: str) -> list[tuple[str, bool]]:
    """Each declaration outside any function or type body (in an `extern "C"` block or a
    namespace too), brace blocks inside it dropped, with whether it has C linkage."""
    uncommented = _COMMENT_OR_STRING.sub(_comment_out, LINE_SPLICE.sub("", source))
    text = UNSCANNED.sub(" ", _EXTERN_C_WRITTEN.sub(" extern_C ", uncommented))
    found: list[tuple[str, bool]] = []
    stack: list[str] = []  # per open brace: "C" (extern "C"), "N" (namespace), "O" (other)
    buffer, depth_o = "", 0
    for ch in text:
        if depth_o:  # inside a body or an initializer: skipped
            depth_o += {"{": 1, "}": -1}.get(ch, 0)
            if depth_o == 0:
                buffer += "{}"
                if "(" in buffer and "=" not in buffer and not _TYPE_ONLY.match(buffer):
                    found.append((buffer, "C" in stack))  # a function's definition
                    buffer = ""
            continue
        if ch == "{":
            if _EXTERN_C.fullmatch(buffer):
                stack.append("C")
            elif _NAMESPACE.fullmatch(buffer):
                stack.append("N")
            else:
                depth_o = 1
                continue
            buffer = ""
        elif ch == "}":
            if stack:  # (a block's last macro use, `DECL(gain)` with no `;`, is one too)
                found.append((buffer, "C" in stack))
                stack.pop()
            buffer = ""
        elif ch == ";":
            found.append((buffer, "C" in stack))
            buffer = ""
        else:
            buffer += ch
    found.append((buffer, "C" in stack))  # (the file's last, with no `;`)
    return [
        (d.strip(), c or bool(_EXTERN_C.match(d)))
        for d, c in found
        if d.strip() and not _SKIPPED.match(_EXTERN_C.sub(" ", d, count=1))
    ]


def _top_level_parts(text: str) -> list[str]:
    """`text` split at its commas outside brackets (each declarator of a declaration)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _declared(declaration: str) -> list[str]:
    """The names a device declaration declares (none for a host one, or a type's alone)."""
    if not _DEVICE.search(declaration) or re.search(r"\boperator\b", declaration):
        return []
    bare = re.sub(ATTRIBUTE + r"|\b__align__\s*\([^()]*\)", " ", declaration)
    bare = _EXTERN_C.sub(" ", bare, count=1)
    if re.match(r"\s*extern\b", bare) and re.search(r"\b__shared__\b", bare):
        return []  # the launch's dynamic shared memory: one for every such array
    bare = re.sub(r"\b(?:struct|union|enum|class)\s+\w*\s*\{\}", " ", bare)  # `struct {} s`
    names = []
    for part in _top_level_parts(bare.replace("{}", " ")):
        head = part.split("=", 1)[0]
        pointer = re.search(r"\(\s*[*&]\s*([A-Za-z_]\w*)\s*\)", head)  # `float (*op)(float)`
        head = head.split("(", 1)[0] if pointer is None else pointer.group(1)
        words = _IDENT.findall(re.sub(r"\[[^\]]*\]", " ", head))
        if words and not _DEVICE.fullmatch(words[-1]):
            names.append(words[-1])
    return names


def unrenamed_c_names(source: str, entry: str) -> set[str]:
    """The device names of C linkage `source` declares but `entry` and its other
    `__global__` functions (each copy of a PyCUDA module renames the kernel it is for) that
    it does not rename to a `warm_` name itself (see the module doc)."""
    if '"C"' not in source:
        return set()
    spliced = LINE_SPLICE.sub("", source)
    macros = _MACRO.findall(spliced)
    # defined elsewhere to a text that names something (`#ifdef ALT` `#define gain alt_gain`)
    respelt = {n for n, text in macros if _NAMING.search(text) and not _WARM.fullmatch(text)}
    renamed = set(_WARM_RENAME.findall(spliced)) - set(UNDEF.findall(spliced)) - respelt
    # a macro that may declare one where it is used (`#define DECL(n) __constant__ float n;`),
    # named by a declaration of C linkage (`#define HD __host__ __device__` elsewhere: none)
    declaring = _naming({name for name, text in macros if _DECLARING.search(text)}, macros)
    linkers, opens_block = _linking_macros(macros)
    found: set[str] = set()
    for declaration, c_linkage in _declarations(source):
        linked = c_linkage or opens_block or bool(_named(linkers, declaration))
        if linked:
            found |= _named(declaring, declaration)
        if linked and not re.search(r"\b__global__\b", declaration):
            found.update(_declared(declaration))
    return found - renamed - {entry}


def _named(names: set[str], text: str) -> set[str]:
    """Those of `names` that `text` names (as words)."""
    return {name for name in names if re.search(rf"\b{name}\b", text)}


def _naming(names: set[str], macros: list[tuple[str, str]]) -> set[str]:
    """`names`, and every macro whose text names one of them (`#define B A`), transitively."""
    names = set(names)
    while more := {n for n, text in macros if n not in names and _named(names, text)}:
        names |= more
    return names


def _linking_macros(macros: list[tuple[str, str]]) -> tuple[set[str], bool]:
    """The macros whose text gives C linkage (`#define LINK extern "C"`, or names one that
    does), and whether one opens an `extern "C" {` block (then any declaration may be in
    it: every one counts, conservatively)."""
    linkers = {
        name
        for name, text in macros
        if _EXTERN_C_WRITTEN.search(_COMMENT_OR_STRING.sub(_comment_out, text))
    }
    linkers = _naming(linkers, macros)  # `#define LINK C_ABI`, `#define C_ABI extern "C"`
    # (the `}` that closes such a block may be another macro's: every declaration counts)
    return linkers, any("{" in text for name, text in macros if name in linkers)


def declares_for_device(text: str) -> bool:
    """Whether `text` (a define's value) holds a device keyword: it may declare a name."""
    return _DECLARING.search(text) is not None
