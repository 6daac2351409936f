"""What makes a kernel unkeyed: its build reads what its key cannot cover, so it is never served.

A kernel's key covers the files its build reads (`warmcli.headers`, `warmcli.linked`) within
bounds that keep warm's own time and memory in check against hostile input (at most 512 headers,
each scanned in its first 4 MB; a thin archive's first 1,024 members...), and follows an
`#include` of a macro only where it can tell the header the macro names
(`warmcli.computed_includes`). Past a bound, or where it cannot tell, an edit would keep the
key and be served the old build: instead `marker(reason)` is put among the lines the key's
digest is made of. It holds this process's own random token, so the kernel's key differs in
every process (a `warm run`'s passes, one process, serve each other): another process never
finds it in a bundle, builds it itself (a miss; refused under `WARM_STRICT=1`), and the miss
says why (`reason_of`: the digests made here that hold a marker, and their reasons): such a
build is never stored (`warmcli.runtime.kernel_cache`), nor a verify's failure. State: the
token (made once a process) and those reasons (bounded, the oldest dropped). A reason starting
`NO_FILE` names a header or a linked file that is a FIFO or a device: the compiler would wait or
read for ever, so it is never built either (`warmcli.backends.batch`). It reads and writes no file.
"""

from __future__ import annotations

import secrets

MARK = "\0unkeyed "
NO_FILE = "no regular file: "  # a reason's start where the header is a FIFO or device: never built
_MAX_REASONS = 256
_token: list[str] = []  # this process's, made on first use (a fork keeps its parent's)
_reasons: dict[str, str] = {}  # a digest made here that holds a marker -> its reason


def marker(reason: str) -> str:
    """A line that makes a digest of lines this process's own: `MARK`, `reason`, the token."""
    if not _token:
        _token.append(secrets.token_hex(16))
    return f"{MARK}{reason}\0{_token[0]}"


def reason_in(lines: list[str]) -> str:
    """The reason of the first marker among `lines` (the first `NO_FILE` one where any is: the
    batch refuses a build by it, `first_of`), "" where none is."""
    reasons = (line[len(MARK) :].split("\0", 1)[0] for line in lines if line.startswith(MARK))
    return first_of(*reasons)


def first_of(*reasons: str) -> str:
    """The first of `reasons` that starts `NO_FILE`, else the first given: a build another
    reason unkeyed (a header over 4 MB first) was compiled, its FIFO waited on until the timeout."""
    no_file = next((r for r in reasons if r.startswith(NO_FILE)), "")
    return no_file or next(filter(None, reasons), "")


def note(digest: str, reason: str) -> None:
    """Remember that `digest` holds a marker of `reason` (a digest made of another that does:
    `warmcli.linked.with_linked`'s too), for `reason_of`."""
    if reason:
        if len(_reasons) >= _MAX_REASONS:  # the oldest goes: one just noted is still there
            _reasons.pop(next(iter(_reasons), ""), None)
        _reasons[digest] = reason


def reason_of(digest: str) -> str:
    """Why `digest`, a kernel's headers digest made in this process, is unkeyed; "" if it is not."""
    return _reasons.get(digest, "")
