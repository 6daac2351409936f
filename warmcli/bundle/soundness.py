"""Whether a file is a sound warm bundle, for `warmcli.bundle.remote`: a download before
it is published, a bundle before it is pushed.

Sound is `warm verify`'s integrity check (SQLite's, the manifest, every blob's sha256,
every row) and no invalid signature; a stale signature (signed before a migration) is
sound: it matters only to whoever trusts keys, and they refuse it when they open it.
`one_state` keeps the bundle in the read transaction its check ran in while the caller
reads the file's bytes (a push copies and hashes them, then uploads the copy): a writer
committing meanwhile waits for it (SQLite's read lock), so the bytes read are the state
that was checked; while such a writer waits, a new reader of the file waits too (SQLite's
pending lock), so the caller reads no more than it must in there. It
owns no state and never prints; it writes nothing but what opening a bundle writes (a
crashed write rolled back, WAL mode left), as every open does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from warmcli.errors import BundleError, RemoteError

if TYPE_CHECKING:
    from warmcli.bundle.store import Bundle


class _Unsound(Exception):
    """Why a file is no sound warm bundle."""


def not_a_bundle(path: Path) -> str | None:
    """Why the file at `path` is no sound warm bundle, or None."""
    try:
        with _sound(path):
            return None
    except _Unsound as exc:
        return str(exc)


@contextlib.contextmanager
def one_state(path: Path, fh: BinaryIO) -> Iterator[Bundle]:
    """Inside: `fh` (opened on `path` before) reads the sound bundle that is held in one
    read transaction (given: what it records is of the bytes read); `RemoteError` (`not
    pushed`) where it is none, or where `path` was replaced meanwhile (a merge published
    another file there)."""
    try:
        with _sound(path) as bundle:
            if not os.path.samestat(os.fstat(fh.fileno()), os.stat(path)):
                raise _Unsound("it was replaced while it was read: push again")
            yield bundle
    except _Unsound as exc:
        raise RemoteError(f"{path}: not pushed: {exc}") from None


@contextlib.contextmanager
def _sound(path: Path) -> Iterator[Bundle]:
    """Inside: the bundle at `path` is sound and held in one read transaction; else
    `_Unsound` before the body runs (what the body raises passes as it is)."""
    from warmcli.bundle.signature_report import signature_report
    from warmcli.bundle.store import Bundle

    held, problem = contextlib.ExitStack(), None
    try:
        bundle = held.enter_context(Bundle.open(path))
        held.enter_context(bundle.snapshot())
        with contextlib.closing(bundle.integrity()) as checks:  # ends its reads first
            problem = next((p for _, p in checks if p is not None), None)
        problem = problem or next(iter(signature_report(bundle, None).invalid), None)
    except (BundleError, OSError) as exc:
        problem = str(exc) or type(exc).__name__
    except BaseException:  # a Ctrl-C mid-check: the read ends, the file is closed
        held.close()
        raise
    if problem:
        with contextlib.suppress(BundleError, OSError):  # a malformed file's read ended
            held.close()
        raise _Unsound(problem)
    with held:
        yield bundle
