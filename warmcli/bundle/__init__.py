"""The environment bundle: one SQLite file of compiled kernels and tune picks.

`schema` (each format's tables), `file` (opening, validating and locking the file),
`rows` (bounded reads and the checks that make a row a record; `kernel_row` parses a
kernel's, `tune_row` reads, parses and writes a tune's), `store` (the `Bundle` class:
reads and writes of rows and blobs), `admin` (maintenance and aggregates `Bundle`
inherits), `signed` (the signature rows), `candidates` (a tune's candidates packed,
their kernel keys interned in format 3), `migrate` (formats 1 and 2 to 3, on a first
open for write), `signing` (Ed25519 signatures over rows), `consistency` (whether its
SQL indexes agree with its rows, for every reader that lists it) and `remote` (bundles by
URL, opened by `http_open`, downloaded by `received`; a keyed reader's first copy taken
from the keyless one by `remote_seed`). A bundle knows records and errors, never the
runtime: it fills storage and is never a runtime layer (the runtime sees it only as a
`warmcli.runtime.store.Store`). Everything in a bundle is untrusted input.
"""

from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError

__all__ = ["Bundle", "BundleError"]
