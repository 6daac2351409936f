"""The environment bundle: one SQLite file of compiled kernels and tune picks.

`file` (opening, validating and locking the file), `store` (the `Bundle` class: reads
and writes of rows and blobs), `signing` (Ed25519 signatures over rows) and `remote`
(bundles by URL). A bundle knows records and errors, never the runtime: it fills
storage and is never a runtime layer. Everything in a bundle is untrusted input.
"""

from warmcli.bundle.store import Bundle, BundleError

__all__ = ["Bundle", "BundleError"]
