"""The environment bundle: one SQLite file of compiled kernels and tune picks.

`file` (the schema; opening, validating and locking the file), `rows` (bounded reads
and the checks that make a row a record; `kernel_row` parses a kernel's), `store`
(the `Bundle` class: reads and writes of rows and blobs), `admin` (maintenance and
aggregates `Bundle` inherits), `signed` (the signature rows), `candidates` (a tune's
candidates packed, as format 2 stores them), `migrate` (format 1 to 2, on a first open
for write), `signing` (Ed25519 signatures over rows) and `remote`
(bundles by URL). A bundle knows records and errors, never the runtime: it fills
storage and is never a runtime layer (the runtime sees it only as a
`warmcli.runtime.store.Store`). Everything in a bundle is untrusted input.
"""

from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError

__all__ = ["Bundle", "BundleError"]
