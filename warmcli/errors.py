"""Every error warm raises, under one base: `WarmError`.

A caller (the CLI above all) catches `WarmError` alone to tell a user's mistake, a
bad bundle or a failed compile from a bug in warm. Each subclass keeps the standard
base it always had (`ValueError`, `OSError`, ...) beside `WarmError`, so code that
caught those still does. This module owns no state and imports nothing of warm.
"""

from __future__ import annotations


class WarmError(Exception):
    """The base of every error warm raises on purpose."""


class WarmWarning(UserWarning):
    """The base of every warning warm issues."""


# -- the bundle's errors (raised by `warmcli.bundle`, caught by the runtime through its Store) --


class BundleError(WarmError):
    """A bundle is missing, corrupt, foreign, or of another format version."""

    @property
    def problem(self) -> str:
        """The message without the bundle's path it starts with."""
        return str(self).split(": ", 1)[-1]


class SignatureError(BundleError):
    """A key that cannot be read, or a bundle that no trusted key signed."""


class MergeError(BundleError):
    """Bundles that cannot be merged (format versions differ), or an output in the way."""
