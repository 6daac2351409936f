"""Which build of a host kernel key a merge keeps where two inputs name other binaries:
`unserved` says where the build held so far does not export its symbol (a row pointed at
another kernel's blob: sound, its sha256 right, never served, production's `dlsym` misses)
and the later input's does, so the merge takes that one (`warmcli.ops.merge_union`).
Asked only of such a conflict; each input's blob's exported names are read once, from its
ELF headers, never loaded (`Names`, the caller's, one merge's, its last `NAMES_KEPT`).
`sha_of` is a key's blob in an input. It owns no other state, never writes and never prints.
"""

from __future__ import annotations

from collections.abc import Sequence

from warmcli.backends.host.binary import exported_symbols
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
from warmcli.records import KernelRecord

# A merge's exported names of the last (input, blob)s it read (None: none could be read):
# at most `NAMES_KEPT`, so no input's count of blobs sets its memory.
Names = dict[tuple[int, str], frozenset[str] | None]
NAMES_KEPT = 64


def _exports(bundle: Bundle, sha256: str, symbol: str, names: Names) -> bool | None:
    """Whether blob `sha256` of `bundle`, a host shared object, exports `symbol` (what
    production's `dlsym` finds); None where that cannot be told (the blob missing, corrupt,
    too large, no ELF read here: other checks name it). A blob read once (`names`: a batch's,
    shared by the rows stored beside each other, while it is among the last read)."""
    if (id(bundle), sha256) not in names:
        if len(names) >= NAMES_KEPT:
            names.clear()
        try:
            names[id(bundle), sha256] = exported_symbols(bundle.blob(sha256))
        except BundleError:
            names[id(bundle), sha256] = None
    held = names[id(bundle), sha256]
    return None if held is None else symbol in held


def unserved(
    before: Sequence[Bundle], record: KernelRecord, kept: str, of: Bundle, names: Names
) -> tuple[int, str] | None:
    """Where a host kernel key's build held so far (`kept`, of the first input of `before`
    naming it) does not export its symbol, never served, and `record` (of input `of`), built
    to another binary, does: that input's index and what a merge says of taking `record`'s;
    else None."""
    if record.backend != "host" or _exports(of, record.sha256, record.symbol, names) is not True:
        return None
    at = next((i for i, b in enumerate(before) if sha_of(b, record.key) == kept), None)
    if at is None or _exports(first := before[at], kept, record.symbol, names) is not False:
        return None
    return at, (
        f"kernel {record.key[:16]}: the binary {kept[:16]} of {first.path} does not export "
        f"{record.symbol}: took {record.sha256[:16]} of {of.path}"
    )


def sha_of(bundle: Bundle, key: str) -> str | None:
    """The sha256 of the blob `bundle`'s row of kernel `key` names; None where it holds
    no such row or it is malformed."""
    try:
        record = bundle.kernel(key)
    except BundleError:
        return None
    return None if record is None else record.sha256
