"""Whether a kernel's build reads the clock, so that no bundle may serve it (`clocked`).

A kernel whose source, options or defines spell `__DATE__`, `__TIME__` or `__TIMESTAMP__` (its
source file's time, which warm writes at the build) has the time of its build compiled in: a
build stored by `warm run` would hand a hit the time of that run where a cold start computes
its own, and no key can cover the time. Such a kernel is unkeyed (`warmcli.unkeyed`): its
headers digest holds this process's marker, so it is built in each process, never stored, and
a miss says why; a header it reaches that spells one, alike (`warmcli.headers`). State: none.
It reads no file, compiles nothing and prints nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a structural type, for annotations only: no Protocol made at import
    from typing import Protocol

    class Parts(Protocol):
        """What is read of a kernel (`warmcli.kernel.Kernel`'s fields: it imports this)."""

        source: str
        options: tuple[str, ...]
        defines: tuple[tuple[str, str], ...]


def _reason(text: str) -> str:
    """`clock_reason` of `text`, "" where it spells none (two substring tests first: ~all)."""
    if "DATE__" not in text and "TIME" not in text:
        return ""
    from warmcli.directives import clock_reason  # (its patterns compiled at import: not served)

    return clock_reason(text.encode(errors="surrogatepass"))


def reads_clock(source: str, options: Sequence[str], defines: Sequence[tuple[str, str]]) -> str:
    """Why a kernel of these parts is unkeyed, naming the clock macro its source, an option or
    a define's value spells (`-DSTAMP=__TIME__`), "" where it spells none. No memo: cheaper than
    one's lookup."""
    why = _reason(source)
    for option in options if not why else ():
        if why := _reason(option):
            break
    for _, value in defines if not why else ():
        if why := _reason(value):
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
