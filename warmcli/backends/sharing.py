"""Whether a kernel may share a translation unit with other kernels, or needs one of its own.

In a shared unit warm isolates what it knows a kernel declares: its defines and the macros
its source defines are undone after it, its entry and file-scope names (its tags,
enumerators and typedef names too) are renamed (C) or closed in a namespace of its own
(CUDA). Anything else in a kernel's text could reach the kernels after it, or be reached by
those before it: an `#include` or `#import` (a header's macros, declarations and include
guards), a pragma (`#pragma`, `_Pragma`, `__pragma`: optimize, fast-math, diagnostics,
packing; not `#pragma unroll`, `nounroll`, `GCC unroll N` or `GCC ivdep` on a line of their
own, in a source with no line splice: they act on the loop right after them), any directive
but the conditionals, `#define`, `#undef`, `#error` and `#warning` (`#line`, `#ident`, a
line marker, ...), an `#undef` of a macro the kernel does not define, a macro, define,
entry or helper named like one the compiler may predefine (`__x`, `_X`, `linux`, `unix`,
...: undoing it would take the compiler's away), a CUDA helper named like a function CUDA
declares globally (`exp`, `atomicAdd`, `min`...: closed in a namespace it would hide the
global one from every call, where alone it overloads it), a CUDA name qualified by the
global scope (`::twice(v)`, `using ::ops::f;`: in warm's namespace the source's own
`twice` is no longer global), a CUDA name of C linkage but the entry (an `extern "C" { }`
around a helper, as CuPy's sources and PyCUDA's wrap have: two kernels' `act` would be one
function defined twice, a group failing until bisected to single kernels; a variable, in a
namespace too, that no `#define` of the source renames: `c_linkage.unrenamed_c_names`),
`__COUNTER__` (it counts across the unit), `__BASE_FILE__` (the unit's file: a kernel alone
reads its own, `<entry>.c`), each in a C kernel's options too (`-DWHO=__BASE_FILE__`, a
wrapper script's), an `asm` in C, (C) the word `constructor`,
`destructor`, `ifunc` or `section`, in its options too (`__attribute__((constructor))`, a
function's pointer put in `.init_array` from a function's body: code the loader runs when the
binary loads, so a hit would run it when any neighbour loads, before the kernels launched
ahead of it, where a cold start runs it at the kernel's own load), a C function's name as a string
(`__func__`, `__FUNCTION__`, or a function-like macro that stringizes, `#x`: `XSTR(vec_t)`
would spell warm's name of it), a C file-scope declaration it does not rename apart (a variable not
`static`, of several declarators or with an attribute, or a macro whose text could declare
one, or names one that could, used at file scope or in a struct's or initializer's braces
there (`c_names_kept_apart`): C merges two kernels' tentative definitions of one name
into one object; a prototype of a function it does not define, `double sqrt(double);`:
renamed, nothing would define it), a type name warm does not read (a function's typedef, a
name beyond ASCII), a name warm renames that one of its macros or defines spells (`#define
T real` before `typedef float T;`: `real` would not be renamed) or an attribute or a
conditional holds (an enumerator `packed` would rename `__attribute__((packed))`; `#ifdef
real` would be true), and text that spells a directive or a name the raw text does not
show: a trigraph `??`, the digraph `%:`, a directive written through a line splice or a
comment, a paste (`##`) where a piece of `_Pragma`, `__func__` or (C) `section` shows, or whose
tokens (its source's, defines', options') could spell such a word in any number of pieces
(`CAT3(_, Prag, ma)`: `_pastes_a_word`); and (CUDA)
options that read a header before the source (`-include cfg.h`: it may define any name)
or set a macro (`-DSCALE=2`, in nvcc's environment flags too, or its host compiler's where
that is a wrapper script: `-ccbin`, `NVCC_CCBIN`) that the kernel's section
defines and then undoes (a define, a macro of its source, its entry): the option's macro
would be gone after it (a C section puts back what it undoes, `#pragma pop_macro`); and (C)
options that read a header before the source (its file-scope `static int counter;` would be
one object for the unit's kernels) or set a macro the source names at file scope (`-DDECL=
static int counter;`, as a risky define is), its own or those its C compiler adds where that
is a wrapper script (`WARM_CC`: its text and the variables it names, `script_words`). GCC's
`__builtin_FUNCTION()` is a C function's name as `__func__` is (since stop 50: before, a
helper's read `warm_<key>_h`).
`shares_unit` is that test, conservative, on the kernel's own text (its source, its options,
defines' names and values, its entry); a kernel that fails it is compiled in a unit of its
own, exactly as alone (`warmcli.backends.batch.plan_groups`), so no neighbour changes its
binary. Pure functions over text: the only state is bounded memos per source text; no
compiler runs here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from warmcli import config
from warmcli.backends.c_linkage import declares_for_device, unrenamed_c_names
from warmcli.backends.compiler import (
    COMMENT,
    LINE_SPLICE,
    CompileUnit,
    declared,
    type_names,
)
from warmcli.backends.file_scope import MACRO_TEXT as _MACRO_TEXT
from warmcli.backends.file_scope import RISKY as _RISKY
from warmcli.backends.file_scope import WORD as _WORD
from warmcli.backends.file_scope import c_names_kept_apart
from warmcli.backends.option_macros import option_macros, preprocessor_options
from warmcli.backends.toolchain import script_words
from warmcli.include_options import pre_included
from warmcli.kernel import Kernel
from warmcli.printable import Pattern
from warmcli.wrapper_script import host_compilers

# Directives that leave nothing behind for the next kernel, given its macros are undone.
_ALLOWED = frozenset(
    {"", "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else"}
    | {"endif", "error", "warning"}
)
_CONDITIONAL = frozenset({"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef"})
# Macros a compiler may define without a reserved name (GNU modes of GCC and clang).
_PREDEFINED = frozenset({"linux", "unix", "i386", "i686", "sun", "sparc", "mips", "vax"})
_TRIGRAPH_OR_DIGRAPH = Pattern(r"\?\?[=/'()!<>\-]|%:")
_GAP = r"(?:[ \t\f\v]|/\*[\s\S]*?\*/)*"  # blanks and comments, which a directive may hold
# A directive: `#` first on a line or right after a comment's end, then its name.
_DIRECTIVE = Pattern(rf"(?:^|\*/){_GAP}#{_GAP}(\w*)([^\n]*)", re.MULTILINE)
_MACRO_NAME = Pattern(rf"{_GAP}([A-Za-z_]\w*)")
_UNIT_WIDE = Pattern(r"[Pp]ragma|__COUNTER__|__BASE_FILE__")
# With token pasting, a piece of `_Pragma`, `__pragma`, `__func__` or `__FUNCTION__` (a
# paste may make one).
_PRAGMA_PIECE = Pattern(r"gma|_P|__p|unc|UNC")
_ASM = Pattern(r"\b(?:__)?asm(?:__)?\b")
# Code the dynamic loader runs as a binary loads (or unloads): a C constructor or destructor
# function, an ifunc resolver (what it calls, `srand(1)`, reaches the whole process), a
# pointer put in a section it runs (`section(".init_array")`, from a function's body too).
_OPTION_WIDE = Pattern(r"__COUNTER__|__BASE_FILE__")  # (an option's `pragma`: a warning's name)
_LOAD_TIME = Pattern(r"\b(?:__)?(?:constructor|destructor|ifunc|section)(?:__)?\b")
_SECTION_PIECE = Pattern(r"sec|cti")  # a paste's piece of it: any cut leaves one whole
# A C function's own name as a string: warm's name of an entry or helper where renamed.
_FUNCTION_NAME = Pattern(r"\b(?:__(?:func|FUNCTION|PRETTY_FUNCTION)__|__builtin_FUNCTION)\b")
_STRINGIZE = Pattern(r"(?<!#)#(?!#)")  # in a function-like macro: `#x`, not `a##b`
# A pragma that acts only on the loop right after it (CUDA's and GCC's unrolling), on a
# line of its own: no comment, no splice (a source with any splice keeps every pragma).
_LOOP_PRAGMA = Pattern(
    r"^[ \t]*#[ \t]*pragma[ \t]+(?:unroll(?:[ \t]+\w+|[ \t]*\([\w \t+*/-]*\))?|nounroll"
    r"|GCC[ \t]+(?:unroll[ \t]+\d+|ivdep))[ \t]*$",
    re.MULTILINE,
)


# Functions CUDA declares at global scope (C's math library, the atomics, min and max): a
# kernel's helper of such a name overloads the global one when alone; closed in a
# namespace (or renamed) it would hide it from every call (an `exp(int)` helper taking
# `exp` of a float), so it goes alone. (C has no overloads: a helper is every call's.)
_MATH = (
    "acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp "
    "ldexp log log10 log1p log2 logb modf scalbn scalbln ilogb cbrt fabs hypot pow sqrt rsqrt "
    "erf erfc erfinv erfcinv lgamma tgamma ceil floor nearbyint rint lrint llrint round "
    "lround llround trunc fmod remainder remquo copysign nan nextafter fdim fmax fmin fma "
    "exp10 sincos sincospi sinpi cospi normcdf normcdfinv rcbrt j0 j1 jn y0 y1 yn "
    "abs labs llabs min max umin umax llmin llmax ullmin ullmax isnan isinf isfinite signbit"
)
_ATOMICS = "Add Sub Exch Min Max Inc Dec CAS And Or Xor"
_CUDA_GLOBALS = frozenset(
    [n for m in _MATH.split(" ") for n in (m, m + "f", m + "l")]
    + [f"atomic{op}{s}" for op in _ATOMICS.split(" ") for s in ("", "_block", "_system")]
)


# `::` and what stands before it: a name (a qualifier, but for a keyword), `>` (a template's
# qualifier when right before it), anything else (the global scope).
_QUALIFIER = Pattern(r"(?:(?P<word>\b[A-Za-z_]\w*)|(?P<close>>)|[^\w\s>]|^)(?P<gap>\s*)::")
_BEFORE_AN_EXPRESSION = Pattern(
    r"return|case|else|do|new|delete|throw|sizeof|alignof|decltype|typeid|using|friend"
    r"|co_return|co_yield|co_await|and|or|not|typename|template"
)


def _global_scope(text: str) -> bool:
    """Whether C++ `text` qualifies a name by the global scope (`::f`, `return ::f(x)`,
    `a > ::b`), which warm's namespace around a shared kernel would change."""
    for m in _QUALIFIER.finditer(text):
        word = m.group("word")
        if word is not None:
            if _BEFORE_AN_EXPRESSION.fullmatch(word):
                return True
        elif m.group("close") is None or m.group("gap"):
            return True
    return False


def _reserved(name: str) -> bool:
    """Whether `name` may be a macro the compiler defines (reserved, or a GNU mode's)."""
    return name.startswith("__") or bool(re.match(r"_[A-Z]", name)) or name in _PREDEFINED


_EXTERN_C = Pattern(r'\bextern\s*"C"\s*(\{)?([^({\[=;]*)')


@functools.lru_cache(maxsize=256)
def _c_linkage_helpers(source: str, entry: str) -> bool:
    """Whether CUDA `source` gives C linkage to a file-scope name but `entry` (which the
    unit renames) that it does not rename itself (PyCUDA's `#define`s): a block around one
    (any such name, conservatively), or a declaration of one. Its other kernels do not
    count: a module's copy for each of its kernels renames that one, so no two copies of
    the module define one `__global__` of C linkage (variants of one entry still clash, as
    they did, bisected)."""
    if unrenamed_c_names(source, entry):  # a variable too, in a namespace too: one symbol
        return True
    helpers, macros = declared(source)
    others = {
        name
        for name in set(helpers) - set(macros) - {entry}
        if not re.search(rf"__global__[^;{{}}]*\b{name}\s*\(", source)
    }
    for linkage in _EXTERN_C.finditer(COMMENT.sub(" ", source)):
        names = _WORD.findall(linkage.group(2))
        if (others and linkage.group(1)) or (names and names[-1] in others):
            return True
    return False


def shares_unit(kernel: Kernel) -> bool:
    """Whether `kernel` can be compiled in a unit with other kernels and build exactly what
    it builds alone (see the module doc); False sends it to a unit of its own."""
    if any(_reserved(name) for name, _ in kernel.defines) or _reserved(kernel.entry):
        return False
    source = kernel.source
    values = " ".join(value for _, value in kernel.defines)
    given = " ".join(kernel.options)  # a define's value, an option's macro, may declare one
    if (
        kernel.language == "cuda"
        and '"C"' in source + values + given  # (`-DDECL=extern "C" __device__ int n;`)
        and (_c_linkage_helpers(source, kernel.entry) or declares_for_device(values + given))
    ):
        return False
    if not _text_shares(values, kernel.language) or (
        "##" in kernel.source and _PRAGMA_PIECE.search(values)
    ):
        return False
    if not _options_kept_apart(kernel):
        return False
    if "##" in source and _pastes_a_word(kernel):
        return False
    own = frozenset(name for name, _ in kernel.defines)
    risky = frozenset(name for name, value in kernel.defines if _RISKY.search(value))
    if kernel.language == "c":  # a macro its options set may declare, where used at file scope
        given = _c_options(kernel)  # or put code the loader runs in a function's body
        if _LOAD_TIME.search(" ".join(given)):  # (`-DS=__attribute__((section(...)))`)
            return False
        if _OPTION_WIDE.search(" ".join(given)):  # (`-DWHO=__BASE_FILE__`: the unit's file)
            return False
        set_by_options = option_macros(preprocessor_options(given))
        if set_by_options is None:
            return False
        risky |= set_by_options
    return _source_shares(kernel.source, kernel.language, own, risky)


def _options_kept_apart(kernel: Kernel) -> bool:
    """Whether no macro a CUDA `kernel`'s options set is one that its section of a shared
    unit defines and then undoes (a define, a macro of its source, its entry): undone, the
    option's macro would be gone from every kernel after it (`-DSCALE=2` and
    `defines={"SCALE": 5}`: `#ifdef SCALE` false in its neighbours, true alone). A header
    read before the source (`-include cfg.h`) may define any name, so such a kernel is
    compiled alone, in C too (a `static int counter;` there would be one object for every
    kernel of the unit). Its options include those nvcc takes from the environment
    (`NVCC_APPEND_FLAGS=-DSCALE=2`) and its host compiler's where that is a wrapper script
    (`-ccbin`, `NVCC_CCBIN`: `script_words`). A C kernel's section puts back what it undoes
    (`#pragma pop_macro`, which NVRTC does not know): it shares."""
    if kernel.language != "cuda":
        return not pre_included(preprocessor_options(_c_options(kernel)))
    given = list(kernel.options)
    environment = config.nvcc_flags()
    for flags in environment.values():  # (`NVCC_CCBIN`'s a path: no option)
        given += flags.split()
    for path in [*host_compilers(kernel.options), environment.get("NVCC_CCBIN", "")]:
        given += script_words(path) if path else []  # a wrapper's `-DSCALE=3`: as WARM_CC's
    if not given:
        return True
    options = preprocessor_options(given)
    if pre_included(options):
        return False
    set_by_options = option_macros(options)
    if set_by_options is None:
        return False
    if not set_by_options:
        return True
    macros = declared(kernel.source)[1]
    names = {kernel.entry, *(name for name, _ in kernel.defines), *macros}
    return names.isdisjoint(set_by_options)


# Words a paste must not spell (each refused where written whole): a pragma, `__COUNTER__`,
# `__BASE_FILE__`, and (C) a function's name as a string, an `asm`, code the loader runs.
_PASTED = ("_Pragma", "__pragma", "__COUNTER__", "__BASE_FILE__")
_PASTED_IN_C = ("__func__", "__FUNCTION__", "__PRETTY_FUNCTION__", "__builtin_FUNCTION")
_PASTED_IN_C += ("asm", "__asm", "__asm__")
_PASTED_IN_C += ("constructor", "destructor", "ifunc", "section")
_TOKEN = Pattern(r"\w+")


def _pastes_a_word(kernel: Kernel) -> bool:
    """Whether a paste could spell a word of `_PASTED` from tokens of the kernel's source,
    defines and options (a paste joins whole tokens, however many: `CAT3(_, Prag, ma)`; a
    macro's argument is expanded first where passed on, `A` to a define's value)."""
    c = kernel.language == "c"
    texts = [kernel.source, *(f"{n} {v}" for n, v in kernel.defines), *kernel.options]
    pieces = set(_TOKEN.findall(" ".join(texts + (_c_options(kernel) if c else []))))
    for word in _PASTED + (_PASTED_IN_C if c else ()):
        reach = [True] + [False] * len(word)  # whether its first i characters are spelt
        for i in range(len(word)):
            if reach[i]:
                for j in range(i + 1, len(word) + 1):
                    reach[j] = reach[j] or word[i:j] in pieces
        if reach[-1]:
            return True
    return False


def _c_options(kernel: Kernel) -> list[str]:
    """A C kernel's options, then those its C compiler may add where it is a wrapper script
    (`WARM_CC=wrap.sh`, `exec cc -include state.h $CFLAGS "$@"`: `script_words`)."""
    return [*kernel.options, *script_words(config.cc() or "cc")]


def _text_shares(text: str, language: str) -> bool:
    """Whether `text`, as written and with its lines spliced, holds no trigraph or
    digraph, no pragma, no `__COUNTER__`, (C) no `asm`, no `__func__` and no code the loader
    runs (`constructor`, `destructor`, `ifunc`, `section`), and (CUDA) no name qualified by
    the global scope."""
    for each in (text, LINE_SPLICE.sub("", text)):
        if _TRIGRAPH_OR_DIGRAPH.search(each) or _UNIT_WIDE.search(each):
            return False
        if language == "c" and (
            _ASM.search(each) or _FUNCTION_NAME.search(each) or _LOAD_TIME.search(each)
        ):
            return False
        if language == "cuda" and "::" in each and _global_scope(each):
            return False
    return True


@functools.lru_cache(maxsize=256)
def _source_shares(
    source: str, language: str, own: frozenset[str], risky: frozenset[str] = frozenset()
) -> bool:
    """`shares_unit` on a source (variants of one source ask once per define-name set;
    `risky`: the defines whose value could make a declaration, `c_names_kept_apart`)."""
    if not LINE_SPLICE.search(source):
        source = _LOOP_PRAGMA.sub("", source)  # a loop's own: reaches no other kernel
    if not _text_shares(source, language):
        return False
    text = LINE_SPLICE.sub("", source).replace("\r\n", "\n").replace("\r", "\n")
    if "##" in text and (
        _PRAGMA_PIECE.search(text) or (language == "c" and _SECTION_PIECE.search(text))
    ):
        return False
    helpers, macros = declared(source)  # what the shared unit renames and undoes
    if any(_reserved(name) for name in helpers):
        return False
    if language == "cuda" and not _CUDA_GLOBALS.isdisjoint(helpers):
        return False
    if language == "c" and not c_names_kept_apart(text, helpers, risky):
        return False
    if language == "c" and any(
        m.group(2) and _STRINGIZE.search(m.group(3)) for m in _MACRO_TEXT.finditer(text)
    ):
        return False  # `XSTR(vec_t)` would spell warm's name of it
    types = type_names(source) if language == "c" else ()
    if types is None or any(_reserved(name) for name in types):
        return False  # a name warm does not read (a function's type, `éint`): not renamed
    if not (own | set(macros) | _attribute_words(text)).isdisjoint([*helpers, *types]):
        return False  # a name it renames that a macro spells otherwise, or an attribute's
    defined, renamed = set(macros), {*helpers, *types}
    for directive in _DIRECTIVE.finditer(text):
        name, rest = directive.group(1), directive.group(2)
        if name not in _ALLOWED:
            return False
        if name in _CONDITIONAL and not renamed.isdisjoint(_WORD.findall(rest)):
            return False  # `#ifdef real`: warm's renaming macro would make it defined
        if name in ("define", "undef"):
            macro = _MACRO_NAME.match(rest)
            if macro is None or _reserved(macro.group(1)):
                return False
            if name == "define" and macro.group(1) not in defined:
                return False  # spelt so that warm would not undo it
            if name == "undef" and macro.group(1) not in defined | own:
                return False
    return True


_ATTRIBUTE_OPENING = Pattern(r"\b__attribute(?:__)?\s*\(|\[\[")
_BRACKET = Pattern(r"[()\[\]]")


def _attribute_words(text: str) -> set[str]:
    """The words inside `text`'s attributes (`__attribute__((packed))`, `[[gnu::hot]]`, in a
    macro too): a renaming macro of one of those names would rename the attribute, which
    the compiler then ignores (a struct no longer packed)."""
    words: set[str] = set()
    for opening in _ATTRIBUTE_OPENING.finditer(text):
        depth, start = 0, opening.start() if opening.group() == "[[" else opening.end() - 1
        for bracket in _BRACKET.finditer(text, start):
            depth += 1 if bracket.group() in "([" else -1
            if depth == 0:
                words.update(_WORD.findall(text, start, bracket.start()))
                break
    return words


def alone_in(units: Sequence[CompileUnit]) -> bool:
    """Whether `units` is one kernel that needs a unit of its own; ValueError for a group
    of several that holds one (`plan_groups` never makes one)."""
    alone = [u for u in units if not shares_unit(u.kernel)]
    if alone and len(units) > 1:
        raise ValueError(f"kernel {alone[0].kernel.label} must be compiled in a unit of its own")
    return bool(alone)
