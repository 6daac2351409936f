"""What a C kernel declares at file scope, and whether a shared unit keeps it apart.

`c_names_kept_apart` is `warmcli.backends.sharing`'s test of a C source's file scope: every
declaration there one that a shared unit renames apart from its neighbours' (a function, a
typedef, a tag, an `extern`, a `static` variable of one declarator), and no macro whose text
could declare something used there (`RISKY`: of the kernel's defines and options, of its
source, or one naming one of those), where two kernels' tentative definitions of one name
would be one object. Pure functions over text: no state, no compiler run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from warmcli.backends.compiler import ATTRIBUTE, UNSCANNED
from warmcli.printable import Pattern

# What a C source holds at file scope that a shared unit keeps apart: a function's definition
# or prototype (no function pointer), a typedef, a tag's definition, an `extern` or
# `_Static_assert`, and a `static` variable of one declarator; each function and variable
# one that is renamed (at column 0: an indented one would reach the kernels after it).
# Anything else (`int n;`, `static int a, b;`, an attribute on a variable, a macro whose
# text could declare one used there) could be one object for two kernels (C merges
# tentative definitions of one name): alone.
_BRACE = Pattern(r"[{}]")
_STATEMENT_END = Pattern(r";|(?<=\))\s*\{\}")  # a statement's `;`, a function's body
_NOT_A_NAME = r"(?!(?:__attribute__|__declspec|_Alignas|alignas|typeof|__typeof__|asm|__asm__)\b)"
_KEPT_APART = Pattern(  # a function: a type, its name, its parameters (no function pointer)
    rf"|(?!.*\(\s*\*)(?:[\w\s*]|{ATTRIBUTE})*?\b\w+[\s*]+{_NOT_A_NAME}(?P<function>\w+)"
    r"\s*\([^{}=]*\)"
    r"|typedef\b.*|(?:struct|union|enum)\s+\w+\s*\{\}|extern\s[^=]*|_Static_assert\b.*",
    re.DOTALL,
)
# A function's name, parameters (a function pointer's too) and body.
_DEFINITION = Pattern(r"(\w+)\s*\([^{};()]*(?:\([^{};()]*\)[^{};()]*)*\)\s*\{\}")
_ONE_STATIC = Pattern(r"static\s+[\w\s*]*?\b(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=[^,]*)?")


# A macro's text that could make or extend a declaration where it is used at file scope.
RISKY = Pattern(r"[;,{}=()\[\]]")
MACRO_TEXT = Pattern(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\(?)([^\n]*)", re.MULTILINE)
WORD = Pattern(r"[A-Za-z_]\w*")


def c_names_kept_apart(text: str, renamed: Sequence[str], risky: frozenset[str]) -> bool:
    """Whether every file-scope declaration of the C `text` (its lines spliced) is one a
    shared unit keeps apart from its neighbours' (see `_KEPT_APART`), and no macro whose
    text could declare something (function-like, or holding `;`, `,`, `=`, a bracket:
    `risky` of the kernel's defines and options, any of the source's, and one whose text
    names one of those) is used at file scope, in a struct's or an initializer's braces too
    (its text may close them: only a function's body is passed over)."""
    flat = UNSCANNED.sub(" ", text)
    depth, kept, start, inside = 0, [], 0, []  # each brace block's inside dropped, `{}` kept
    opened, body = 0, False
    for brace in _BRACE.finditer(flat):
        if brace.group() == "{":
            if depth == 0:
                kept.append(flat[start : brace.end()])
                opened, before = brace.end(), brace.start() - 1
                while before >= 0 and flat[before].isspace():
                    before -= 1
                body = before >= 0 and flat[before] == ")"  # a function's (else a struct's)
            depth += 1
        else:
            depth -= 1
            if depth < 0:
                return False
            if depth == 0:
                start = brace.start()
                inside += () if body else (flat[opened:start],)
    if depth:  # a brace its text leaves open: a macro closes it (`#define END };`)
        return False
    kept.append(flat[start:])
    scope = "".join(kept)
    if not _reached(text, risky).isdisjoint(WORD.findall(scope)):
        return False
    if inside and not _reached(text, risky, _CLOSES).isdisjoint(WORD.findall(" ".join(inside))):
        return False  # a macro whose text closes the braces it is used in (`0 }; int n;`)
    apart: set[str | None] = {None, *renamed}  # (a set: many names stay linear)
    defined = {None, *_DEFINITION.findall(scope)}  # not a prototype of libm's `sqrt`
    for piece in _STATEMENT_END.split(scope):
        each = " ".join(piece.split())
        kept_apart = _KEPT_APART.fullmatch(each)
        function = kept_apart.group("function") if kept_apart else None
        if kept_apart and function in apart and function in defined:
            continue
        if kept_apart:  # a function warm does not rename (not at column 0), or one it would
            return False  # rename that the source does not define (nothing would define it)
        one = _ONE_STATIC.fullmatch(each)
        if one is None or one.group(1) not in apart:
            return False
    return True


_CLOSES = Pattern(r"[{};]")  # a macro's text that may end the braces it is used in


def _reached(text: str, risky: frozenset[str], closes: Pattern | None = None) -> set[str]:
    """`risky` and the macros of `text` that could declare something: function-like, with
    text `RISKY` matches (`closes`, where given, instead), or naming one of those (`#define
    X DECL`), to any depth."""
    users: dict[str, list[str]] = {}
    found = set(risky)
    for macro in MACRO_TEXT.finditer(text):
        name, body = macro.group(1), macro.group(3)
        if closes.search(body) if closes else macro.group(2) or RISKY.search(body):
            found.add(name)
        for word in set(WORD.findall(body)):
            users.setdefault(word, []).append(name)
    pending = list(found)
    while pending:
        for user in users.get(pending.pop(), ()):
            if user not in found:
                found.add(user)
                pending.append(user)
    return found
