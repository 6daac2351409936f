"""A C or CUDA source as its preprocessor reads its directives: lines spliced, comments gone.

Before it reads a directive, the preprocessor ends a line at a lone carriage return as at a
newline (`int y;\\r#include "b.h"`), joins a line ending in a backslash to the next
(`#inc\\<newline>lude`; `??/`, a backslash where trigraphs are read, `-std=c11`: read both
ways), reads a form feed, vertical tab or NUL as a blank (`#include\\f"b.h"`)
and makes each comment one space (`#/**/include`, a block comment across lines inside a
directive): `spliced` does the same to a source's bytes, its string and character literals
kept, so the scans of `warmcli.headers` and `warmcli.kernel` find an include however it is
spelled. `may_hide` says cheaply whether a source holds anything that could hide one (a
backslash, a comment, a digraph or trigraph `#`, a carriage return, a form feed or vertical
tab); where it does not, the plain text is what the preprocessor reads. `read_lines` is
`spliced` less the groups no compile reads, whatever its macros (`#if 0`, an `#if 1`'s `#else`).
`reads_assembler_file` finds an assembler directive that reads a file (`.incbin`, `.include`)
in a source or header so read, its adjacent string literals joined and their escapes read as the
compiler does (`\\x22` a quote), or its name a macro's argument (stringized or pasted).
Its patterns are compiled on first use (`warmcli.printable`'s `Pattern`): a process that
splices a source compiles no assembler pattern. State: none but each pattern's compiled form.
It never reads a file.
"""

from __future__ import annotations

import re

from warmcli.printable import Pattern

# A backslash ending a line (GCC allows blanks between the two), and what stands between
# a comment and the code around it: a number (a pp-number: a digit, or `.` and a digit,
# then letters, digits, dots, exponent signs and `'` digit separators, `1'000` in C23 and
# C++14: a `'` inside a number only, not after a word: `return'/*'` holds a literal), a
# literal, kept as written (one a line ends unclosed runs to its end, as GCC lexes it,
# never scanned again from a later quote: that was quadratic on `"\"\"...`), or a comment
# (one space).
_SPLICE = Pattern(rb"\\[ \t\f\v]*\r?\n")
_LITERAL_OR_COMMENT = Pattern(
    rb"(?<![\w.])\.?[0-9](?:[eEpP][+-]|[\w.]|'\w)*"
    rb'|"(?:\\.|[^"\\\n])*"?'
    rb"|'(?:\\.|[^'\\\n])*'?"
    rb"|/\*.*?(?:\*/|\Z)|//[^\n]*|[\f\v\0]",  # (a form feed, a vertical tab, a NUL: a blank)
    re.DOTALL,
)
_LONE_CR = Pattern(rb"\r(?!\n)")  # a line's end, as GCC reads it
# A conditional directive (`#if`, `#ifdef`, `#elif`, `#else`, `#endif`...) and its condition.
_CONDITIONAL = Pattern(rb"[ \t]*(?:#|%:|\?\?=)[ \t]*(if|ifn?def|elif|elifn?def|else|endif)\b(.*)")
# A raw string (GNU C's, C++'s: `R"x(...)x"`, its prefix `u8`, `u`, `U` or `L`), kept as
# written up to its `)x"` (one never closed runs to the end, as GCC reads it: never scanned
# again from a later `R"`), then the rest as `_LITERAL_OR_COMMENT` reads it.
_RAW_LITERAL_OR_COMMENT = Pattern(
    rb'(?<!\w)(?:u8|[uUL])?R"([^ ()\\\t\v\f\n]{0,16})\((?:.*?\)\1"|.*\Z)|'
    + _LITERAL_OR_COMMENT.pattern,
    re.DOTALL,
)


# An assembler directive reading a file (`__asm__(".incbin \\"/opt/table.bin\\"")`), in any
# case (the assembler reads directives so) and with blanks written as escapes (`\\t`, `\\x20`).
_ASSEMBLER_READS = Pattern(
    rb'\.inc(?:bin|lude)(?:\s|\\[tnrvf]|\\x[0-9a-f]+|\\[0-7]{1,3})*\\?"', re.IGNORECASE
)
# (A text naming no `asm`: whole, its dot escaped, or none.)
_DOT_INC = Pattern(rb"\.inc", re.IGNORECASE)
_MAY_READ = Pattern(rb"\.inc|\\x0*2e|\\056", re.IGNORECASE)
# Outside string literals: `.incbin` a macro stringizes (`S(.incbin) " \\"t.bin\\""`) or
# pastes (`CAT(.inc, bin)`), never a member (`x.inc`, `(p).include`, `{.include = 1}`).
_STRINGIZED = Pattern(rb"(?<![\w)\].])\.inc(?:bin|lude)?\b(?!\s*=)", re.IGNORECASE)
# A literal's escapes as the compiler turns them into what the assembler reads: a hexadecimal
# or octal one (`\\x22` a quote, `\\056` a dot, `\\x62` a letter), or any other (its character).
_ESCAPE = Pattern(rb"\\(?:x([0-9a-f]+)|([0-7]{1,3})|(.))", re.IGNORECASE | re.DOTALL)
# A printable character so escaped (`\\x2e`, `\\056`; not `\\0`): none, nothing to decode.
_NUMBERED = Pattern(rb"\\(?:x0*[2-7][0-9a-f]|[0-7]{2})", re.IGNORECASE)
_SIMPLE = dict(zip(b"abefnrtv", b"\a\b\x1b\f\n\r\t\v", strict=True))
_READS = Pattern(rb'\.inc(?:bin|lude)\s*"', re.IGNORECASE)  # (in literals decoded)
# A string literal, and adjacent ones, which the compiler joins into one (`"a" "b"`: `"ab"`).
_STRING = rb'"(?:\\.|[^"\\\n])*"'
_STRING_ONE, _STRINGS = Pattern(_STRING), Pattern(_STRING + rb"(?:\s*" + _STRING + rb")+")


def may_hide(data: bytes) -> bool:
    """Whether `data` holds what could hide an include from a plain scan: a line splice (a
    backslash), a comment, the digraph `%:` (`#`), a trigraph's `??` (`??=` a `#`, `??/` a
    backslash), a carriage return (a lone one ends a line), a form feed, a vertical tab or a NUL."""
    return any(mark in data for mark in (b"\\", b"/*", b"%:", b"??", b"\r", b"\f", b"\v", b"\0"))


def _keep_literal(match: re.Match[bytes]) -> bytes:
    text = match[0]
    return b" " if text[:1] in (b"/", b"\f", b"\v", b"\0") else text


def spliced(data: bytes) -> bytes:
    """`data` with each lone carriage return a newline, its line splices joined and each
    comment, form feed and vertical tab made one space, its literals kept as written; where
    it may hold a raw string (`R"`), followed by a line of its own and the same read with raw
    strings (`_RAW_LITERAL_OR_COMMENT`): as C reads it and as GNU C and C++ do, either of
    which may see a directive the other reads as inside a comment."""
    return b"\n".join(_readings(data))


def _readings(data: bytes) -> list[bytes]:
    """`data` read as C reads it, and where it may hold a raw string as GNU C and C++ do;
    where it holds `??/`, each of those again with it a backslash (trigraphs read: `-std=c11`,
    `-trigraphs`; a line splice, `#inc??/<newline>lude`, or an escape in a literal)."""
    joined = _SPLICE.sub(b"", _LONE_CR.sub(b"\n", data))
    read = [_LITERAL_OR_COMMENT.sub(_keep_literal, joined)]
    read += [_RAW_LITERAL_OR_COMMENT.sub(_keep_literal, joined)] * (b'R"' in joined)
    return read + (_readings(data.replace(b"??/", b"\\")) if b"??/" in data else [])


def read_lines(data: bytes) -> bytes:
    """`data` as `spliced`, less each group no compile reads, whatever its macros: one an
    `#if 0` (`#elif 0`) opens, one after a group `#if 1` surely reads (its `#else`),
    and all inside those (`#if 0` ... `#endif` disabling kept code). A group whose condition
    names anything else may be read, and is kept."""
    return b"\n".join(_taken(reading) for reading in _readings(data))


def _taken(text: bytes) -> bytes:
    kept, groups = [], []  # each open group: (skipped now, an earlier branch surely read)
    for line in text.split(b"\n"):
        if (found := _CONDITIONAL.match(line)) is None:
            kept += [line] * (not any(skip for skip, _ in groups))
            continue
        word, condition = found[1], found[2].strip()
        plain = word in (b"if", b"elif")  # (`#ifdef X`, `#elifdef X`: neither dead nor sure)
        dead = plain and condition in (b"0", b"(0)")  # (a name, `false`, may be a macro)
        sure = plain and condition in (b"1", b"(1)")
        if word.startswith(b"if"):
            within = any(skip for skip, _ in groups)
            groups.append((True, True) if within else (dead, sure))
        elif word == b"endif":
            groups = groups[:-1]
        elif groups:  # `#else` (surely read where none was before), an `#elif`
            before = groups[-1][1]
            groups[-1] = (before or dead, before or sure or word == b"else")
    return b"\n".join(kept)


def spliced_text(source: str) -> str | None:
    """`source` as its preprocessor reads its directives (`spliced`), or None where nothing
    in it could hide one (`may_hide`): the plain text is then what it reads."""
    data = source.encode(errors="surrogatepass")
    return spliced(data).decode(errors="surrogatepass") if may_hide(data) else None


def reads_assembler_file(data: bytes) -> bool:
    """Whether `data`, a C source or header, holds an assembler directive reading a file
    (`.incbin "..."`, `.include`) outside its comments (one that only mentions it reads nothing),
    its adjacent string literals joined first, as the compiler joins them before the assembler
    reads them (`".inc" "bin \\"t.bin\\""`, or a header's `".incbin \\"" FILE "\\""`), their
    escapes as the bytes they stand for (`\\x2eincbin \\x22t.bin\\x22`), and `.incbin` outside
    them (`STR(.incbin)`, `CAT(.inc, bin)`), read with trigraphs too. Quick where `data` names
    neither `asm` nor `.inc` (nor an escaped dot: nothing it holds reaches the assembler so)."""
    if b"asm" not in data and _MAY_READ.search(data) is None:
        return False
    return _reads(data)  # (`??/` a backslash too, where trigraphs are read: `spliced`)


def _reads(data: bytes) -> bool:
    joined = _STRINGS.sub(_joined, spliced(data))
    if _ASSEMBLER_READS.search(joined):
        return True
    dotted = _DOT_INC.search(joined) is not None  # (none: nothing stringized)
    if dotted and _STRINGIZED.search(_STRING_ONE.sub(b'""', joined)):
        return True
    return _NUMBERED.search(joined) is not None and _READS.search(_decoded(joined)) is not None


def _decoded(text: bytes) -> bytes:
    """`text` with the escapes of its string literals as the bytes they stand for."""
    return _STRING_ONE.sub(lambda m: b'"' + _ESCAPE.sub(_byte, m[0][1:-1]) + b'"', text)


def _byte(match: re.Match[bytes]) -> bytes:
    hexadecimal, octal, other = match.groups()
    if other is not None:
        return bytes([_SIMPLE.get(other[0], other[0])])
    return bytes([int(hexadecimal or octal, 16 if hexadecimal else 8) & 0xFF])


def _joined(match: re.Match[bytes]) -> bytes:
    """Adjacent string literals as one: `"a" "b"` as `"ab"`."""
    return b'"' + b"".join(one[1:-1] for one in _STRING_ONE.findall(match[0])) + b'"'
