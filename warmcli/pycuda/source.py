"""PyCUDA's source conventions as pure text functions: the `extern "C"` wrap, what a
module declares, each kernel's parameter letters, and the refusals of a C++ mangled name
and of texture references.

`SourceModule` wraps its source in `extern "C" { ... }` unless `no_extern_c`, exactly
as PyCUDA does, so `get_function(name)` finds the unmangled entry. warm builds each
kernel of a module as its own warm `Kernel` and may put copies of one module's source
into one translation unit; names with C linkage would then clash, so every other
name the module declares at file scope (`__global__`/`__device__` functions,
`__device__`/`__constant__` variables; in a source that includes a header, under
`no_extern_c` only those it declares `extern "C"`: each kernel's namespace keeps the
others apart) is renamed per kernel with a `#define`, except names also used as a member
(`.w`, `->x`), which would break, the members of CUDA's vector types (`x`..`w`, which a
header the source includes may use: where it includes one), macros (a `-D`, or a
`#define` of the source outside a branch: `certain_macros`), names the source `#undef`s
(it would undo the rename), and operator overloads (`operator+`), which no macro can
rename. Kernels of several modules share one cubin, loaded once: a global left unrenamed
there would be one for all of them, so a kernel whose source keeps one (any of the above,
one in a namespace, a declarator after the first, a `__`-name, one a macro declares) is
built in a cubin of its own (`warmcli.backends.c_linkage`, which the sharing rule asks);
the `warm_pc<digest>_` names differ by source, entry, options and defines. Each
`__global__` function's parameters are read from its declaration and written in
PyCUDA's `prepare` letters (`P` pointer, `i`/`I` 32-bit, `q`/`Q` 64-bit, `f`, `d`,
...); a parameter type this cannot read makes the signature unknown (`None`), and
the letters then come from the call's arguments as PyCUDA does. Pure: no state,
no compiler, nothing is executed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from warmcli.backends.c_linkage import UNDEF
from warmcli.backends.compiler import file_scope_names
from warmcli.backends.option_macros import macros_named

EXTERN_C = 'extern "C" {\n%s\n}\n'
# After the source of a kernel with a global of C linkage it does not rename: built in a
# cubin of its own, and so keyed apart from the shared cubin a warm before that built.
ALONE_NOTE = "/* warm: a global not renamed apart: built in a cubin of its own */\n"

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_PREPROCESSOR = re.compile(r"^[ \t]*#.*$", re.MULTILINE)
_ATTRIBUTE = re.compile(
    r"\b(?:__launch_bounds__|__align__|__attribute__)\s*\((?:[^()]|\([^()]*\))*\)"
)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_EXTERN_C_BLOCK = re.compile(r'^\s*extern\s+"C"\s*$')
_MEMBER_USE = r"(?:\.|->)\s*{}\b"
# Members of CUDA's vector types and `dim3`, declared before any source: a header the
# source includes may use them (`v.w`) where the source does not; a `#define` would reach it.
_BUILTIN_MEMBERS = frozenset({"x", "y", "z", "w"})
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b", re.MULTILINE)
_DIRECTIVE = re.compile(
    r"^[ \t]*#[ \t]*(ifdef|ifndef|if|elif|else|endif|define)\b[ \t]*([^\n]*)", re.MULTILINE
)
_NOT_DEFINED = re.compile(r"!\s*defined\s*\(?\s*([A-Za-z_]\w*)\s*\)?\s*")
# Words of a declaration's type, never the name it declares (a macro must not rename them).
_TYPE_WORDS = frozenset(
    {"void", "bool", "char", "short", "int", "long", "float", "double", "signed", "unsigned"}
    | {"auto", "const", "volatile", "static", "inline", "struct", "union", "enum"}
)
_QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "restrict", "register"})
# Parameter types and the PyCUDA letter each is passed as (LP64: long is 64 bits).
_SCALAR_TYPES: dict[tuple[str, ...], str] = {
    ("float",): "f",
    ("double",): "d",
    ("bool",): "?",
    ("char",): "b",
    ("signed", "char"): "b",
    ("unsigned", "char"): "B",
    ("int8_t",): "b",
    ("uint8_t",): "B",
    ("short",): "h",
    ("short", "int"): "h",
    ("unsigned", "short"): "H",
    ("unsigned", "short", "int"): "H",
    ("int16_t",): "h",
    ("uint16_t",): "H",
    ("int",): "i",
    ("signed",): "i",
    ("signed", "int"): "i",
    ("unsigned",): "I",
    ("unsigned", "int"): "I",
    ("int32_t",): "i",
    ("uint32_t",): "I",
    ("long",): "l",
    ("long", "int"): "l",
    ("unsigned", "long"): "L",
    ("long", "long"): "q",
    ("long", "long", "int"): "q",
    ("unsigned", "long", "long"): "Q",
    ("int64_t",): "q",
    ("uint64_t",): "Q",
    ("size_t",): "Q",
    ("ptrdiff_t",): "q",
    ("intptr_t",): "q",
    ("uintptr_t",): "Q",
}


def wrap_source(source: str, no_extern_c: bool = False) -> str:
    """The source nvcc sees, as PyCUDA builds it: in `extern "C" { }` unless told not to."""
    return source if no_extern_c else EXTERN_C % source


def _file_scope_statements(source: str) -> list[str]:
    """The text of each file-scope declaration (up to its `{` or `;`), comments and
    preprocessor lines removed; the inside of an `extern "C" { }` block is file scope."""
    return [statement for statement, _ in _statements(source)]


def _statements(source: str) -> list[tuple[str, bool]]:
    """`_file_scope_statements`, each with whether it has C linkage as written (inside an
    `extern "C" { }` block, or declared `extern "C"`)."""
    text = _PREPROCESSOR.sub("", _COMMENT.sub(" ", source))
    statements: list[tuple[str, bool]] = []
    stack: list[bool] = []  # per open brace: is it an extern "C" block (transparent)?
    start = 0
    for i, ch in enumerate(text):
        at_file_scope = all(stack)
        if ch == "{":
            chunk = text[start:i]
            transparent = at_file_scope and bool(_EXTERN_C_BLOCK.match(chunk))
            if at_file_scope and not transparent:
                statements.append((chunk, bool(stack)))
            stack.append(transparent)
            start = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            start = i + 1
        elif ch == ";" and at_file_scope:
            statements.append((text[start:i], bool(stack)))
            start = i + 1
    return [
        (s.strip(), c or s.strip().startswith('extern "C"')) for s, c in statements if s.strip()
    ]


def _declared_name(statement: str) -> str | None:
    """The name a `__device__`/`__constant__`/`__global__` declaration declares, if one."""
    if not re.search(r"\b(?:__global__|__device__|__constant__)\b", statement):
        return None
    statement = re.sub(r'^extern\s+"C"\s*', "", statement)
    if re.match(r"(?:template|extern|typedef|using)\b", statement):
        return None
    bare = _ATTRIBUTE.sub(" ", statement)
    head = bare.split("(", 1)[0] if "(" in bare else re.split(r"[\[=,]", bare, maxsplit=1)[0]
    names = _IDENT.findall(head)
    if "operator" in names:  # `operator+`: no name a macro can rename
        return None
    pointer = re.match(r"[^(]*\(\s*\*\s*([A-Za-z_]\w*)\s*[)\[]", bare)  # `float (*op)(float)`
    if pointer:
        return pointer.group(1)
    last = names[-1] if names else "__"
    return None if last.startswith("__") or last in _TYPE_WORDS else last


def declared_names(source: str, c_linkage_only: bool = False) -> list[str]:
    """Functions and variables the source declares at file scope for the device (only
    those of C linkage as written, if `c_linkage_only`)."""
    names = (_declared_name(s) for s, c in _statements(source) if c or not c_linkage_only)
    return list(dict.fromkeys(n for n in names if n))


def device_only_names(source: str) -> set[str]:
    """Names the source declares at file scope `__device__`/`__constant__` and never
    `__global__`: no kernel of that name can be got from its module."""
    device: set[str] = set()
    kernels: set[str] = set()
    for statement in _file_scope_statements(source):
        name = _declared_name(statement)
        if name:
            (kernels if re.search(r"\b__global__\b", statement) else device).add(name)
    return device - kernels


def _parameter_letter(parameter: str) -> str | None:
    tokens = re.findall(r"[A-Za-z_]\w*|\*|\[|&", parameter.split("=", 1)[0])
    if "*" in tokens or "[" in tokens:
        return "P"
    kept = tuple(t for t in tokens if t not in _QUALIFIERS)
    return _SCALAR_TYPES.get(kept) or _SCALAR_TYPES.get(kept[:-1])


def kernel_signatures(source: str, partial: bool = False) -> dict[str, str | None]:
    """Every `__global__` function the source declares -> its parameters in PyCUDA
    letters (`"fPPi"`), or None when a parameter's type cannot be read (with `partial`:
    that parameter's letter is `_`, a pointer's `P` still), or the source declares it
    twice with other parameters (`#ifdef USE_DOUBLE` around two declarations, or each
    branch opening its body: the preprocessor keeps one, which this cannot tell)."""
    found: dict[str, str | None] = {}
    for statement in _file_scope_statements(source):
        if not re.search(r"\b__global__\b", statement) or "(" not in statement:
            continue
        bare = _ATTRIBUTE.sub(" ", statement)
        name = _declared_name(bare)
        match = re.search(rf"\b{name}\s*\((.*)\)\s*$", bare, re.DOTALL) if name else None
        if name is None or match is None:
            continue
        signature = _signature(match.group(1).strip(), partial)
        if len(re.findall(r"\b__global__\b", bare)) > 1 or found.get(name, signature) != signature:
            signature = None  # declarations of #if branches, their directives dropped
        found[name] = signature
    text = _PREPROCESSOR.sub("", _COMMENT.sub(" ", source))
    for name in [n for n, signature in found.items() if signature is not None]:
        # each branch opening the body (`#ifdef W` `k(double *y) {` `#else` `k(float *y) {`):
        # the second is inside the first's braces once the directives are dropped
        declared = re.findall(rf"\b__global__\b[^;{{}}]*?\b{name}\s*\(([^;{{}}]*)\)\s*[{{;]", text)
        if len({_signature(d.strip(), partial) for d in declared}) > 1:
            found[name] = None
    return found


def _signature(inner: str, partial: bool = False) -> str | None:
    """The letters of a parameter list's text, or None when a type cannot be read (with
    `partial`, `_` for each such type, but for a template's, whose commas are not read)."""
    if inner in ("", "void"):
        return ""
    if "<" in inner:
        return None
    letters = [_parameter_letter(p) or ("_" if partial else None) for p in inner.split(",")]
    return None if None in letters else "".join(letters)  # type: ignore[arg-type]


def certain_macros(source: str) -> set[str]:
    """The macros `source` defines however it is compiled: unconditionally, or as the
    default of an `#ifndef NAME` (`#if !defined(NAME)`) that a `-D` may set instead. One
    defined in a branch (`#ifdef FIXED_GAIN` / `#define gain 2.0f` / `#else` / `__constant__
    float gain;`) may name a declaration in another: not one of these."""
    guards: list[str | None] = []  # per open conditional: the name it is the default of
    found: set[str] = set()
    for kind, rest in _DIRECTIVE.findall(_COMMENT.sub(" ", source)):
        name = _IDENT.match(rest)
        if kind in ("if", "ifdef", "ifndef"):
            negated = _NOT_DEFINED.fullmatch(rest.strip()) if kind == "if" else None
            guard = name.group() if kind == "ifndef" and name else None
            guards.append(negated.group(1) if negated else guard)
        elif kind in ("elif", "else") and guards:
            guards[-1] = None
        elif kind == "endif" and guards:
            guards.pop()
        elif kind == "define" and name and all(g == name.group() for g in guards):
            found.add(name.group())
    return found


def isolated_source(
    source: str,
    entry: str,
    options: tuple[str, ...] = (),
    no_extern_c: bool = False,
    macros: Iterable[str] = (),
) -> tuple[str, dict[str, str]]:
    """`source` with every file-scope name but `entry` renamed for this one kernel, and
    the renames (`{"c": "warm_pc1a2b..._c"}`): copies of one module for several kernels
    then share a translation unit without clashing names of C linkage. Under `no_extern_c`
    only the names the source gives C linkage itself, where it includes a header: one of
    C++ linkage is kept apart by the kernel's namespace, and a `#define` of it would rename
    it in the headers the source includes too (`float2`'s `.y` in `cuda_fp16.h`, for a
    `__constant__ float y`); so are `x`..`w` there. A source that includes nothing (no
    header comes after the `#define`s) has them all renamed: its kernels share a cubin with
    other modules', where a global of theirs must be no other module's (`get_global`).
    A macro (`macros`, warm's defines; a `-D` option; a `#define` of the source wherever
    it is compiled: `certain_macros`) is never renamed: `void KNAME(...)` with
    `-DKNAME=fill_128` declares `fill_128`."""
    digest = hashlib.sha256("\0".join((source, entry, *options)).encode()).hexdigest()[:12]
    renamed_by_warm = {entry, *file_scope_names(source)}  # the batch's own renames
    macros = {*macros, *filter(None, macros_named(options)), *certain_macros(source)}
    renamed_by_warm |= macros  # a macro names no declaration of its own
    renamed_by_warm |= set(UNDEF.findall(source))  # its `#undef` would undo warm's rename
    includes = _INCLUDE.search(source) is not None  # a header read after the `#define`s
    if includes:  # (alone in its cubin then: nothing of another module's beside it)
        renamed_by_warm |= _BUILTIN_MEMBERS
    renames = {
        name: f"warm_pc{digest}_{name}"
        for name in declared_names(source, c_linkage_only=no_extern_c and includes)
        if name not in renamed_by_warm
        and not re.search(_MEMBER_USE.format(re.escape(name)), source)
    }
    if not renames:
        return source, renames
    defines = "".join(f"#define {name} {new}\n" for name, new in renames.items())
    return defines + source, renames


def mangled_global(symbols: dict[str, int], name: str, key: str = "") -> str | None:
    """The cubin symbol a global `name` was compiled to: its own name (C linkage), the
    name the batch gave a file-scope static (`warm_<key>_<name>`), or either as the last
    part of a C++ name in warm's per-kernel namespace (`_ZN<n>warm_...<len><name>E`): the
    one in the namespace of the kernel of `key` where other kernels' share the cubin."""
    if name in symbols:
        return name
    own = f"{len(key[:16]) + 5}warm_{key[:16]}"  # its namespace, `warm_<key[:16]>`, mangled
    if key and any(own in symbol for symbol in symbols):  # (after `_ZN`, or a static's prefix)
        symbols = {s: size for s, size in symbols.items() if own in s}
    static = rf"warm_[0-9a-f]{{16}}_{re.escape(name)}"
    last = re.compile(rf"(\d+)({re.escape(name)}|{static})E$")
    found = []
    for symbol in symbols:
        m = last.search(symbol) if symbol.startswith("_Z") else None
        if re.fullmatch(static, symbol) or (m and m.group(1).endswith(str(len(m.group(2))))):
            found.append(symbol)
    return found[0] if len(found) == 1 else None


def mangled_refusal(name: str) -> str:
    """Why `get_function` refuses a C++ mangled name (`_Z5plainPf`), naming the kernel's."""
    m = re.match(r"_Z(\d+)", name)
    end = m.end() + int(m.group(1)) if m else 0
    template = name[end : end + 1] == "I"  # `square<float>`: its wrapper has a name of its own
    own = name[m.end() : end] if m and not template else ""
    return (
        f"SourceModule.get_function({name!r}): a C++ mangled name, which warm does not serve: "
        "it gets a kernel by the name written in the source, which must have C linkage: "
        'declare it extern "C" __global__ (a template\'s instance: an extern "C" kernel that '
        "calls it) and " + (f"get_function({own!r})" if own else "get that kernel by its name")
    )


def no_references(call: str, name: str) -> str:
    return (
        f"SourceModule.{call}({name!r}): texture and surface references were removed in "
        "CUDA 12, so no cubin holds one: pass a texture or surface object "
        "(cudaTextureObject_t) as a kernel argument instead"
    )
