"""The environment bundle: one SQLite file of compiled kernels and tune picks.

`schema` (each format's tables), `file` (opening, validating and locking the file),
`rows` (bounded reads and the checks that make a row a record; `kernel_row` parses a
kernel's, `tune_row` reads, parses and writes a tune's), `core` (`BundleCore`: the reads a
production process serves from), `store` (`Bundle`, a `BundleCore` that writes: what
warm's commands open), `admin` (maintenance and aggregates `Bundle` inherits), `signed`
(the signature rows), `candidates` (a tune's candidates packed, their kernel keys
interned in format 3), `migrate` (formats 1 and 2 to 3, on a first open for write),
`signing` (Ed25519 signatures over rows), `consistency` (whether its SQL indexes agree
with its rows, for every reader that lists it) and `remote` (bundles by URL, opened by
`http_open`, downloaded by `received`; a keyed reader's first copy taken from the
keyless one by `remote_seed`). A bundle knows records and errors, never the
runtime: it fills storage and is never a runtime layer (the runtime sees it only as a
`warmcli.runtime.store.Store`). Everything in a bundle is untrusted input. `Bundle` and
`BundleError` are imported from here on first use: a serving process imports `core` alone.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing.TYPE_CHECKING`, without importing typing at import
if TYPE_CHECKING:
    from warmcli.bundle.store import Bundle
    from warmcli.errors import BundleError

__all__ = ["Bundle", "BundleError"]


def __getattr__(name: str) -> object:
    """`Bundle` (`warmcli.bundle.store`) and `BundleError`, imported when first read."""
    if name == "Bundle":
        from warmcli.bundle.store import Bundle

        return Bundle
    if name == "BundleError":
        from warmcli.errors import BundleError

        return BundleError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
