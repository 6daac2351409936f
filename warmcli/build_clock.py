"""Whether a kernel's build reads the clock, so that no bundle may serve it (`clocked`).

A kernel whose source, options or defines spell `__DATE__`, `__TIME__` or `__TIMESTAMP__` (its
source file's time, which warm writes at the build) has the time of its build compiled in: a
build stored by `warm run` would hand a hit the time of that run where a cold start computes
its own, and no key can cover the time. Such a kernel is unkeyed (`warmcli.unkeyed`): its
headers digest holds this process's marker, so it is built in each process, never stored, and
a miss says why. (A header that spells one is not read for it here.) State: none. It reads no
file, compiles nothing and prints nothing.
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


_CLOCK = Pattern(r"\b__(?:DATE|TIME|TIMESTAMP)__\b")
REASON = "its build reads the clock"


def _word(text: str) -> str:
    """The clock macro `text` spells first, "" where none (two substring tests first: ~all)."""
    if "DATE__" not in text and "TIME" not in text:
        return ""
    found = _CLOCK.search(text)
    return found[0] if found is not None else ""


def reads_clock(source: str, options: Sequence[str], defines: Sequence[tuple[str, str]]) -> str:
    """The clock macro a kernel of these parts spells (its source's, an option's or a define's
    value: `-DSTAMP=__TIME__`), "" where it spells none. No memo: cheaper than one's lookup."""
    word = _word(source)
    for option in options if not word else ():
        if word := _word(option):
            break
    for _, value in defines if not word else ():
        if word := _word(value):
            break
    return word


def clocked(headers: str, kernel: Parts) -> str:
    """`headers` (`kernel`'s headers digest, "" for none) as it is where the kernel spells a
    clock macro (`reads_clock`): a digest holding this process's marker, noted with its reason;
    `headers` itself where it spells none."""
    word = reads_clock(kernel.source, kernel.options, kernel.defines)
    if not word:
        return headers
    from warmcli.unkeyed import first_of, marker, note, reason_of  # (only for such a kernel)

    why = f"{REASON} ({word}): a stored build would serve the time it was built at"
    digest = hashlib.sha256(f"{headers}\0clock\0{marker(why)}".encode()).hexdigest()
    note(digest, first_of(reason_of(headers), why))
    return digest
