"""The headers an `#include` of a macro names, where a kernel's own options, defines and text tell.

`#include CFG` (a computed include; `#include_next CFG`, `__has_include(CFG)` alike) reads the
header CFG's value names: with `-DCFG="val.h"` that is `val.h`, which a key must cover as if the
source said `#include "val.h"`. `macro_includes` finds such lines in a file's text (the names
they give, for `warmcli.headers` to queue); `macro_values` gathers every value a macro is
given where warm can read it: the kernel's `-D` options (joined, next, `--define-macro`; cc's
`-Wp,` and `-Xpreprocessor` ones too), its defines, and each `#define` line of its source and
of the headers its key reached;
`named_headers` says what a computed include names: each plain `"x"` or `<x>` value (each is
followed: one a branch does not take costs a miss at most), or why it cannot be told (a value
made by another macro, `STR(val.h)`, or none found: then the kernel is unkeyed,
`warmcli.unkeyed`); `computed_headers` does it for the computed includes a headers digest met,
its marker in that digest's lines where one cannot be told. A function-like macro's `#define`
(or `-D'CFG(x)=x'`) gives its name a value that is no header name: `#include CFG("b.h")` reads
what its argument makes. Pure functions over text, but `computed_headers`, which reads each
file reached once (`file_head`: at most `MAX_SCANNED` bytes), its values kept in the digest's
`Scanned` (a chain of headers each computing the next was read again at each link: quadratic);
past `MAX_DEFINES` `#define` lines in them (memory a hostile header would take) it is unkeyed.
`source_told` says what a digest's walk told the source's own computed includes (its one state: a
thread's last walk's names), for `warmcli.backends.scratch_reads` (cc searches the source's
scratch folder first, where the key does not look).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from warmcli.directives import may_hide, spliced
from warmcli.handed_on import tool_words
from warmcli.stamped import opened
from warmcli.unkeyed import marker, reason_in

MAX_SCANNED = 4 << 20  # as `warmcli.headers` scans a file
MAX_DEFINES = 1 << 19  # `#define` lines read for a kernel's values: past them, it is unkeyed
# An `#include` (`_next`, `#import`) or `__has_include` of a name, not a "..." or <...> one.
_MACRO_INCLUDE = re.compile(
    rb"(?:^[ \t]*(?:#|%:|\?\?=)[ \t]*(?:include(_next)?|import)[ \t]+"
    rb"|__has_include(_next)?[ \t]*\([ \t]*)([A-Za-z_]\w*)",
    re.MULTILINE,
)
# A macro's `#define` and its value; a function-like one's name is followed by `(` (kept).
_DEFINE = re.compile(
    rb"^[ \t]*(?:#|%:|\?\?=)[ \t]*define[ \t]+([A-Za-z_]\w*)(?!\w)(\(?)[ \t]*([^\n]*)$",
    re.MULTILINE,
)
_HEADER_NAME = re.compile(r'[ \t]*(?:"([^"\n]+)"|<([^<>\n]+)>)[ \t]*')  # a value that is one
_DEFINE_FLAGS = ("-D", "--define-macro")
_WALKS = threading.local()  # `own`: what the last headers digest made in a thread told (`Scanned`)


def macro_includes(data: bytes) -> list[tuple[str, bool]]:
    """Each macro `data` includes (or asks `__has_include` for) by name, with whether it is an
    `#include_next` (`__has_include_next`), in order: those written, then those only its
    directives as read show (`directives`; a `/*` in a C raw string hides no line from gcc)."""
    head = data[:MAX_SCANNED]
    found = _MACRO_INCLUDE.findall(head)
    if may_hide(head):
        plain = set(found)
        found += [f for f in dict.fromkeys(_MACRO_INCLUDE.findall(spliced(head))) if f not in plain]
    return [(name.decode(), bool(n or m)) for n, m, name in found]


def macro_values(
    options: Sequence[str],
    defines: Iterable[tuple[str, str]],
    texts: Iterable[bytes],
    values: dict[str, set[str]] | None = None,
) -> dict[str, set[str]]:
    """Every value each macro is given (added to `values`): by the `-D` options in `options`
    (`-DN` is `1`), by `defines`, and by the `#define` lines of `texts` (a file's first bytes:
    as written, and as its directives are read); a function-like macro's value is its `(` and
    what follows (no header name)."""
    values, options = {} if values is None else values, _as_preprocessor_reads(options)
    for before, option in zip(("", *options), options, strict=False):
        if before in _DEFINE_FLAGS:
            text = option
        elif option.startswith("--define-macro="):
            text = option.split("=", 1)[1]
        elif option.startswith("-D") and option not in _DEFINE_FLAGS:
            text = option[2:]
        else:
            continue
        name, is_set, value = text.partition("=")
        name, paren, params = name.partition("(")  # `-D'CFG(x)=x'`: function-like
        value = paren + params + "=" + value if paren else value if is_set else "1"
        values.setdefault(name.strip(), set()).add(value)
    for name, value in defines:
        values.setdefault(name, set()).add(value)
    for data in texts:
        head = data[:MAX_SCANNED]
        hides = may_hide(head)
        for name, paren, value in _DEFINE.findall(head):  # as written, each line's comments gone
            if not (hides and value.rstrip().endswith(b"\\")):  # (spliced: read whole below)
                said = (paren + (spliced(value) if hides else value)).decode(errors="replace")
                values.setdefault(name.decode(), set()).add(said.strip())
        for name, paren, value in _DEFINE.findall(spliced(head)) if hides else ():  # as read
            said = (paren + value).decode(errors="replace").strip()
            values.setdefault(name.decode(), set()).add(said)
    return values


def _as_preprocessor_reads(options: Sequence[str]) -> list[str]:
    """`options` as cc hands them to its preprocessor (`tool_words`): `-Wp,-DCFG="b.h"`'s
    pieces (split at its commas, as cc does), `-Xpreprocessor`'s next option, each an option
    of its own."""
    return [option for option, _ in tool_words(options, "-Xpreprocessor")]


def named_headers(name: str, values: dict[str, set[str]]) -> tuple[list[tuple[str, bool]], str]:
    """The headers `#include name` may read, as (name, quoted) for each value `values` give the
    macro, and "", or [] and why they cannot be told."""
    given = values.get(name)
    if not given:
        return [], f"an #include of a macro no option, define or #define gives ({name})"
    found = []
    for value in sorted(given):
        header = _HEADER_NAME.fullmatch(value)
        if header is None:
            return [], f"an #include of a macro that is no plain header name ({name})"
        found.append((header[1] or header[2], header[1] is not None))
    return found, ""


def computed_headers(
    wanted: Iterable[tuple[str, bool, str | None, bool]],
    done: set[object],
    kernel: tuple[Sequence[object], Iterable[tuple[str, str]], str, Iterable[str]],
    written: list[str],
    primary: list[tuple[str, bool, str | None]],
    next_mark: str,
    scanned: Scanned,
) -> deque[tuple[str, bool, str | None]]:
    """The includes the computed ones `wanted` name (macro, whether `_next`, the including
    file's folder, whether one not told counts), by the values `kernel`'s options, defines,
    source and the files read so far give them (`macro_values`), none twice (`done`), as
    (name, quoted, folder), `next_mark` before an `_next` one's name; the source's own also
    among `primary` (gcc's `.gch` may stand for them); `warmcli.unkeyed`'s marker in `written`
    for the first counted one that cannot be told (`named_headers`) once none is found (a
    header a computed include reached may define a macro another names); the kernel and each of
    `kernel`'s files read once, into `scanned` (the files in the order reached)."""
    options, defines, source, paths = kernel
    values = scanned.values
    if scanned.files < 0:
        texts = [source.encode(errors="surrogatepass")]
        macro_values([o for o in options if type(o) is str], defines, texts, values)
        scanned.files = 0
    for path in list(paths)[scanned.files :]:  # (a dict's keys: those added since, last)
        if scanned.defines > MAX_DEFINES:
            break
        head = file_head(path)
        scanned.defines += head.count(b"define")  # (at least its `#define` lines: cheap)
        macro_values((), (), [head] if scanned.defines <= MAX_DEFINES else [], values)
        scanned.files += 1
    if scanned.defines > MAX_DEFINES:  # a hostile header's values would take memory unbounded
        if not reason_in(written):
            written.append(marker(f"an #include of a macro past {MAX_DEFINES:,} #define lines"))
        return deque()
    found: deque[tuple[str, bool, str | None]] = deque()
    for at, (macro, is_next, here, counts) in enumerate(wanted):
        if scanned.told.get(at, -1) == len(values.get(macro, ())):
            continue  # (told already, its values as then: a chain's links each tell once)
        scanned.told[at] = len(values.get(macro, ()))
        headers, reason = named_headers(macro, values)
        scanned.why[at] = reason if counts else ""  # (a header read later may tell it)
        for header, quoted in headers:
            if quoted and here is None:  # the source's own: `source_told`
                scanned.own[header] = None
            entry = (next_mark * is_next + header, quoted, here)
            if entry not in done:
                done.add(entry)
                found.append(entry)
                primary += [(header, quoted, here)] if here is None else []
    why = next(filter(None, scanned.why.values()), "")  # once no more is found: at the end
    if why and not found and not reason_in(written):
        written.append(marker(why))
    return found


class Scanned:
    """What one headers digest's `computed_headers` read: each macro's values, how many of the
    files reached (-1: not even the kernel's own options, defines and source yet), and how
    many values each computed include had when its headers were told (told again on more)."""

    def __init__(self) -> None:
        self.values: dict[str, set[str]] = {}
        self.files = -1
        self.told: dict[int, int] = {}  # each computed include's number of values when told
        self.why: dict[int, str] = {}  # and why it could not be told then ("" where it could)
        self.defines = 0  # `#define`s in the files read (at most: the word's count)
        self.own: dict[str, None] = {}  # the quoted names the source's own were told, in order
        _WALKS.own = self.own  # (this thread's last walk: `source_told`)


def source_told(walk: Callable[[], object]) -> list[str]:
    """The quoted names the source's own computed includes (`#include CFG` in a kernel's text,
    not a header's) were told in the headers digest `walk()` makes in this thread, by every value
    its macro is given there: the kernel's options, defines and source, and each header reached
    (`#define CFG "../cfg.h"` in an `-I` folder's); [] where it made none (no folder named)."""
    _WALKS.own = {}
    walk()
    return list(_WALKS.own)


def file_head(path: str, size: int = MAX_SCANNED) -> bytes:
    """The first `size` bytes of the header at `path`, b"" where it cannot be read (or is no
    regular file: a FIFO come in its place is never waited on, `warmcli.stamped.opened`)."""
    if (found := opened(path)) is None:
        return b""
    try:
        with found[0] as fh:
            return fh.read(size)
    except OSError:
        return b""
