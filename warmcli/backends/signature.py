"""The parameter letters checked against the kernel's own declaration, by the compiler.

Each kernel's section of a translation unit gets a *signature probe* after its source:
code that only compiles when the entry exists and its declared parameters are what
the letters say (their count, pointer or scalar, and each scalar's exact type). For
CUDA (C++) the probe is `static_assert`s over `decltype(entry)` with small templates
(`CUDA_HELPERS`, once per translation unit), so nothing is parsed; every name they and
the probe spell starts with `warm_`, so no macro of the kernel's (`-DN=1024`, a header's
`#define T float`), still defined where the probe follows it, reaches them. For C, the probe
takes the entry's address and, when the entry's definition is found in the source, repeats
its parameter list in a function that calls it (in dead code) with those parameters (no null
pointer for an entry declared `nonnull`, no conversion) and whose `_Static_assert`s test
each parameter with `_Generic` and `__builtin_classify_type` (marked `__extension__`: a
kernel whose options hold it to C99 or C89 with pedantic errors builds as cc builds it
alone); else it calls the entry with the letters' count of zeros (the compiler checks the
count). An entry defined old-style (K&R), variadic or with empty parentheses, given letters, gets
a probe that fails, named: no call would check its arguments' count or types; so does an
entry defined `static`, which the binary would not export. The probe's
lines are marked `#line 1 "warm-signature"`, so a failure is
recognised in the compiler's log and turned into one clear message that shows the letters
and the declared parameters (`explain`) where it finds a letter or the count wrong; else
the source's own error is left as the compiler gave it, and a source that runs on into the
probe (a brace left open) is said so. This module holds no state and runs no compiler.
"""

from __future__ import annotations

import re

from warmcli.backends.compiler import COMMENT, CompileFailure, CompileUnit, file_scope_names
from warmcli.errors import SIGNATURE_PROBE, headline
from warmcli.kernel import PARAM_DESCRIPTIONS, Kernel
from warmcli.printable import Pattern

MARK = SIGNATURE_PROBE
_ASSERT = Pattern(MARK + r":([\w-]+):([0-9a-f]{16})")
# The C++ front end's words for `decltype(entry)` of a template or an overload set.
_NOT_ONE_FUNCTION = Pattern(r"instance of (?:function template|overloaded function)")

# The types a scalar letter may be declared as, as `_Generic` associations (type: accept);
# the CUDA probe reads the same table.
_C_TYPES: dict[str, str] = {
    "b": "signed char: 1, char: (char)-1 < 0",
    "B": "unsigned char: 1, char: (char)-1 > 0",
    "h": "short: 1",
    "H": "unsigned short: 1",
    "i": "int: 1",
    "I": "unsigned int: 1",
    "l": "long: sizeof(long) == 8, long long: 1",
    "q": "long: sizeof(long) == 8, long long: 1",
    "L": "unsigned long: sizeof(long) == 8, unsigned long long: 1",
    "Q": "unsigned long: sizeof(long) == 8, unsigned long long: 1",
    "?": "_Bool: 1",
    "f": "float: 1",
    "d": "double: 1",
}


def _cuda_condition(letter: str, t: str) -> str:
    """The C++ condition that type `t` is one a parameter of `letter` may be declared as."""
    if letter == "P":
        return f"warm_sig::warm_is_ptr<{t}>::warm_value"
    if letter == "e":
        return f"warm_sig::warm_is_half<{t}>::warm_value"
    accepted = []
    for association in _C_TYPES[letter].split(", "):
        name, condition = association.split(": ")
        name = "bool" if name == "_Bool" else name
        accepted.append(f"(warm_sig::warm_same<{t}, {name}>::warm_value && ({condition}))")
    return " || ".join(accepted)


CUDA_HELPERS = """\
#line 1 "warm-signature"
namespace warm_sig {
template <class warm_T, class warm_U> struct warm_same { static const bool warm_value = false; };
template <class warm_T> struct warm_same<warm_T, warm_T> { static const bool warm_value = true; };
template <class warm_T> struct warm_is_ptr { static const bool warm_value = false; };
template <class warm_T> struct warm_is_ptr<warm_T *> { static const bool warm_value = true; };
template <int warm_N, class... warm_A> struct warm_at { typedef void warm_type; };
template <class warm_H, class... warm_R> struct warm_at<0, warm_H, warm_R...> {
    typedef warm_H warm_type;
};
template <int warm_N, class warm_H, class... warm_R> struct warm_at<warm_N, warm_H, warm_R...> {
    typedef typename warm_at<warm_N - 1, warm_R...>::warm_type warm_type;
};
template <class warm_F> struct warm_params;
template <class warm_Z, class... warm_A> struct warm_params<warm_Z(warm_A...)> {
    static const int warm_count = sizeof...(warm_A);
    template <int warm_N> using warm_arg = typename warm_at<warm_N, warm_A...>::warm_type;
};
#if defined(__CUDA_FP16_TYPES_EXIST__)
template <class warm_T> struct warm_is_half {
    static const bool warm_value = warm_same<warm_T, __half>::warm_value;
};
#else
template <class warm_T> struct warm_is_half { static const bool warm_value = false; };
#endif
}
"""


def _matching(text: str, open_at: int) -> int:
    """The index of the parenthesis closing the one at `open_at`, or -1."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split(params: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(params[start:i])
            start = i + 1
    parts.append(params[start:])
    parts = [" ".join(p.split()) for p in parts]
    return [] if parts in ([""], ["void"]) else parts


def _declarators(text: str, entry: str) -> list[tuple[int, int]]:
    """Where `entry` is declared in `text` (comments blanked): each declarator's opening
    and closing parenthesis (the list ends at one never closed)."""
    found = []
    for m in re.finditer(rf"\b{re.escape(entry)}\s*\(", text):
        before = text[: m.start()].rstrip()
        if not before or not (before[-1].isalnum() or before[-1] in "_*)"):
            continue  # a call or an expression, not a declarator
        if re.search(r"\b(return|else|do)$", before):
            continue
        close = _matching(text, m.end() - 1)
        if close < 0:
            break
        found.append((m.end() - 1, close))
    return found


def declared_parameters(source: str, entry: str) -> list[str] | None:
    """The parameters of `entry`'s definition in `source`, as written; None if not found."""
    text = COMMENT.sub(" ", source)
    for opening, close in _declarators(text, entry):
        if text[close + 1 :].lstrip().startswith("{"):
            return _split(text[opening + 1 : close])
    return None


# An old-style (K&R) definition's tail: its identifier list, then declarations, then `{`.
_IDENTIFIERS = Pattern(r"\s*[A-Za-z_]\w*\s*(?:,\s*[A-Za-z_]\w*\s*)*")
_OLD_DECLARATIONS = Pattern(r"\s*(?:[^;{}()]+;\s*)+\{")


def unprototyped(source: str, entry: str) -> str | None:
    """How `entry`'s definition in `source` leaves its parameters' types undeclared to a
    caller: "old-style" (K&R: `put(o, n) double *o; float n; {`, each argument promoted, a
    float passed as a double), "empty" (`put() {`: any count taken), "variadic" (`put(double
    *o, ...) {`: what follows its named parameters is passed unchecked, a float as a float
    where the callee reads a double), else None."""
    text = COMMENT.sub(" ", source)
    for opening, close in _declarators(text, entry):
        inside, after = text[opening + 1 : close], text[close + 1 :]
        if not inside.strip() and after.lstrip().startswith("{"):
            return "empty"
        if after.lstrip().startswith("{") and _split(inside)[-1:] == ["..."]:
            return "variadic"
        if _IDENTIFIERS.fullmatch(inside) and _OLD_DECLARATIONS.match(after):
            return "old-style"
    return None


def defined_static(source: str, entry: str) -> bool:
    """Whether `entry`'s definition in `source` is declared `static` (internal linkage: the
    binary exports no function of that name), as written in its own declaration."""
    text = COMMENT.sub(" ", source)
    for opening, close in _declarators(text, entry):
        if text[close + 1 :].lstrip().startswith("{"):
            head = re.split(r"[;}]|^[ \t]*#.*$", text[:opening], flags=re.MULTILINE)[-1]
            return re.search(r"\bstatic\b", head) is not None
    return False


def _tag(unit: CompileUnit) -> str:
    return unit.key[:16]


def probe(unit: CompileUnit) -> str:
    """The signature probe to append to one kernel's section (for C, its entry macro still
    set; the CUDA probe names the entry by its symbol, so it may follow the section)."""
    kernel = unit.kernel
    if kernel.language == "cuda":
        return _cuda_probe(kernel, _tag(unit), unit.symbol)
    return _c_probe(kernel, _tag(unit), unit.symbol)


def _cuda_probe(kernel: Kernel, tag: str, symbol: str) -> str:
    sig = f"warm_sig::warm_params<decltype({symbol})>"
    lines = [
        f'#line 1 "{MARK}"',
        f'static_assert({sig}::warm_count == {len(kernel.params)}, "{MARK}:count:{tag}");',
    ]
    for i, letter in enumerate(kernel.params):
        condition = _cuda_condition(letter, f"{sig}::warm_arg<{i}>")
        lines.append(f'static_assert({condition}, "{MARK}:{i + 1}:{tag}");')
    return "\n" + "\n".join(lines) + "\n"


def _c_probe(kernel: Kernel, tag: str, symbol: str) -> str:
    head = [
        f'#line 1 "{MARK}"',
        f"static void __attribute__((unused)) warm_sig_{symbol}_count(void) {{",
        f"    (void)sizeof(&{kernel.entry});",  # an entry the source lacks: undeclared
    ]
    unchecked = unprototyped(kernel.source, kernel.entry) if kernel.params else None
    if defined_static(kernel.source, kernel.entry):
        unchecked = "static"  # nothing exported to call: refused, named
    if unchecked is not None:  # no call would check its count or types: refused, named
        what = "count" if unchecked == "empty" else unchecked
        failed = f'    __extension__ _Static_assert(0, "{MARK}:{what}:{tag}");'
        return "\n" + "\n".join([*head, failed, "}"]) + "\n"
    zeros = ", ".join("0" for _ in kernel.params)
    alone = [*head, f"    if (0) {kernel.entry}({zeros});", "}"]  # the count, by the compiler
    declared = declared_parameters(kernel.source, kernel.entry)
    if declared is None or len(declared) != len(kernel.params):
        return "\n" + "\n".join(alone) + "\n"
    body, names = [], []
    for i, (letter, text) in enumerate(zip(kernel.params, declared, strict=True)):
        name = _parameter_name(text)
        if name is None:
            return "\n" + "\n".join(alone) + "\n"
        if letter == "P":
            test = f"__builtin_classify_type({name}) == 5"  # pointer_type_class
        else:
            test = f"__extension__ _Generic(({name}), {_C_TYPES[letter]}, default: 0)"
        # (`__extension__`: no pedantic error where the options hold the kernel to C99 or
        # C89, and every assertion before any statement, as C89 declares)
        body.append(f'    __extension__ _Static_assert({test}, "{MARK}:{i + 1}:{tag}");')
        names.append(name)
    # The count checked by a call with the entry's own parameters: no null pointer (an
    # entry declared `nonnull` warns of one), no conversion (`-Wc++-compat` warns of one).
    lines = [*head, "}"]
    params = ", ".join(declared) or "void"
    lines.append(f"static void __attribute__((unused)) warm_sig_{symbol}_types({params}) {{")
    lines += [*body, f"    if (0) {kernel.entry}({', '.join(names)});"]
    lines += ["    " + " ".join(f"(void){n};" for n in names), "}"]
    return "\n" + "\n".join(lines) + "\n"


def _parameter_name(text: str) -> str | None:
    """The name a declared parameter gives (the last identifier outside brackets)."""
    pointer_to_function = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)", text)
    if pointer_to_function:
        return pointer_to_function.group(1)
    bare = re.sub(r"\[[^\]]*\]", "", text)
    names = re.findall(r"[A-Za-z_]\w*", bare)
    keywords = {"const", "volatile", "restrict", "__restrict__", "__restrict", "unsigned"}
    if not names or names[-1] in keywords or len(names) < 2:
        return None
    return names[-1]


def explain(failure: CompileFailure) -> CompileFailure:
    """A failure of one kernel's signature probe as one clear message (others unchanged)."""
    if len(failure.units) != 1 or MARK not in failure.log:
        return failure
    (unit,) = failure.units
    kernel = unit.kernel
    tag = _tag(unit)
    declared = declared_parameters(kernel.source, kernel.entry)
    failed = {m.group(1) for m in _ASSERT.finditer(failure.log) if m.group(2) == tag}
    entry = re.compile(rf"\b(?:{unit.symbol}|{kernel.entry})\b")  # alone, C keeps its name
    missing = any(
        entry.search(line) and any(w in line for w in ("undeclared", "undefined", "aliased"))
        for line in failure.log.splitlines()
    )
    if kernel.language == "cuda" and _NOT_ONE_FUNCTION.search(failure.log):
        message = (
            f"kernel {kernel.label}: its entry {kernel.entry!r} is a function template or "
            'overloaded, so no one function has its name: declare one extern "C" __global__ '
            "function per instance (calling a __device__ template) and name that as the entry"
        )
    elif "static" in failed:
        message = (
            f"kernel {kernel.label}: its entry {kernel.entry!r} is defined static, so its "
            "binary exports no function of that name to launch: drop the `static`"
        )
    elif "variadic" in failed:
        message = (
            f"kernel {kernel.label}: its entry {kernel.entry!r} is variadic (`...`), so a call "
            "passes what follows its named parameters unchecked (a float where it reads a "
            f"double): declare every parameter the letters {kernel.params!r} pass"
        )
    elif "old-style" in failed:
        message = (
            f"kernel {kernel.label}: its entry {kernel.entry!r} is defined old-style (K&R, its "
            "parameters' types declared after the parentheses), so a call passes its arguments "
            "promoted (a float as a double) and unchecked: declare the parameters inside the "
            f"parentheses, as letters {kernel.params!r} say"
        )
    elif missing:
        defined = file_scope_names(kernel.source)
        if kernel.entry in defined:  # declared, but its declaration does not compile
            message = (
                f"kernel {kernel.label}: its function {kernel.entry!r} does not compile "
                "(the compiler's first error, in the log below)"
            )
        else:
            message = (
                f"kernel {kernel.label}: its source defines no function named {kernel.entry!r} "
                f"(the entry name); functions it defines: {', '.join(defined) or 'none'}"
            )
    else:
        shown = (
            f"{kernel.entry}({', '.join(declared)})" if declared is not None else "its declaration"
        )
        lines = [
            f"kernel {kernel.label}: parameter letters {kernel.params!r} do not match {shown}:"
        ]
        if (declared is not None and len(declared) != len(kernel.params)) or "count" in failed:
            count = "?" if declared is None else len(declared)
            lines.append(f"  {len(kernel.params)} letter(s) for {count} declared parameter(s)")
        for position in sorted(int(p) for p in failed if p.isdigit()):
            letter = kernel.params[position - 1]
            what = declared[position - 1] if declared and position <= len(declared) else "?"
            lines.append(
                f"  argument {position}: letter {letter!r} ({PARAM_DESCRIPTIONS[letter]}), "
                f"declared {what!r}"
            )
        if len(lines) == 1 and MARK not in headline(failure.log):
            return failure  # no letter nor count found wrong: the source's own error, as it is
        if len(lines) == 1:  # nor in the source: it runs on into the probe
            lines = [
                f"kernel {kernel.label}: its source does not compile to its end (a brace, comment "
                "or string left open?): the compiler's errors fall after it, where warm checks "
                "its parameter letters"
            ]
        message = "\n".join(lines)
    return CompileFailure(f"{message}\n\ncompiler log:\n{failure.log}", failure.units, False)
