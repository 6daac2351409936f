"""Whether a kernel's build reads the clock, so that no bundle may serve it (`clocked`).

A kernel whose source, options or defines spell `__DATE__`, `__TIME__` or `__TIMESTAMP__` (its
source file's time, which warm writes at the build) has the time of its build compiled in: a
build stored by `warm run` would hand a hit the time of that run where a cold start computes
its own, and no key can cover the time. Such a kernel is unkeyed (`warmcli.unkeyed`): its
headers digest holds this process's marker, so it is built in each process, never stored, and
a miss says why; a header it reaches that spells one, alike (`warmcli.headers`): `clock_reason`
is the one test of a text, a header's bytes or a kernel's source, option or define value, read
with its lines spliced as the preprocessor splices them first (`__TI\\` at a line's end, then
`ME__`, is `__TIME__`; `??/` as a backslash too, where trigraphs are read) (the key's fast
path for a host kernel of no options mirrors its pre-test inline: a source holding `??/` is
keyed whole, `kernel._may_include`, and a define's value holds no line break).
State: none but its patterns' compiled forms (on first use). It reads no
file, compiles no kernel, never prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from warmcli.printable import Pattern

if TYPE_CHECKING:  # a structural type, for annotations only: no Protocol made at import
    from typing import Protocol

    class Parts(Protocol):
        """What is read of a kernel (`warmcli.kernel.Kernel`'s fields: it imports this)."""

        source: str
        options: tuple[str, ...]
        defines: tuple[tuple[str, str], ...]


# The macros the compiler expands to the build's date or time (`__TIMESTAMP__`: its file's).
_CLOCK = Pattern(rb"\b__(?:DATE|TIME|TIMESTAMP)__\b")
# A line splice: a backslash ending a line (blanks between: GCC allows them; a lone CR ends one),
# or the trigraph `??/` so (a backslash where trigraphs are read: `-std=c11`, `-trigraphs`).
_SPLICE = Pattern(rb"(?:\\|\?\?/)[ \t\f\v]*(?:\r\n?|\n)")


def clock_reason(data: bytes | str) -> str:
    """`its build reads the clock (__TIME__)`, naming the first such macro `data` (a header's
    bytes, or a kernel's source, option or define value) spells (in a comment too), or "" where
    it spells none: its lines spliced first, where a backslash (or `??/`) ends one (`__TI\\`,
    `ME__`)."""
    spelled = isinstance(data, bytes)  # (`warmcli.kernel.kernel_key` mirrors this pre-test)
    date, time, splice = (b"DATE__", b"TIME", b"\\") if spelled else ("DATE__", "TIME", "\\")
    trigraph = b"??/" if spelled else "??/"
    if date not in data and time not in data and splice not in data and trigraph not in data:
        return ""  # (four: nearly all)
    text = data if spelled else data.encode(errors="surrogatepass")
    if (splice in data or trigraph in data) and _SPLICE.search(text) is not None:
        text = _SPLICE.sub(b"", text)
    found = _CLOCK.search(text)
    return f"its build reads the clock ({found[0].decode()})" if found is not None else ""


def reads_clock(source: str, options: Sequence[str], defines: Sequence[tuple[str, str]]) -> str:
    """Why a kernel of these parts is unkeyed, naming the clock macro its source, an option or
    a define's value spells (`-DSTAMP=__TIME__`), "" where it spells none (`clock_reason`, each
    text tested as it is). No memo: cheaper than one's lookup."""
    why = clock_reason(source)
    for option in options if not why else ():
        if why := clock_reason(option):
            break
    for _, value in defines if not why else ():
        if why := clock_reason(value):
            break
    return why


def clocked(headers: str, kernel: Parts) -> str:
    """`headers` (`kernel`'s headers digest, "" for none) as it is where the kernel spells a
    clock macro (`reads_clock`): a digest holding this process's marker, noted with its reason;
    `headers` itself where it spells none."""
    said = reads_clock(kernel.source, kernel.options, kernel.defines)
    if not said:
        return headers
    from warmcli.unkeyed import first_of, marker, note, reason_of  # (only for such a kernel)

    why = f"{said}: a stored build would serve the time it was built at"
    digest = hashlib.sha256(f"{headers}\0clock\0{marker(why)}".encode()).hexdigest()
    note(digest, first_of(reason_of(headers), why))
    return digest
