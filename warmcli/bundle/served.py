"""Opening the bundle a production process serves (`warmcli.production`), and its writer.

`trusted` reads the trusted keys (`WARM_TRUSTED_KEYS` unless given), importing the signing layer
only when keys are named. `open_served` opens a path, or a URL's local copy
(`warmcli.bundle.remote`: read-only, it is the store's, with one `RemoteBundleWarning` when the
last good copy stands in), to serve: read-only even in a process that writes back (`serving`;
the default bundle, `default_served`, only where no other user may write it), since a connection
that wrote through a file since replaced (a merge publishes a new one over it) would take the
new file's crash journal for its own, play it into the old file and remove it; a bundle not
there yet is made. `write_back_into` is where a write-back goes at exit: the file the path names
then, opened to write (migrating an older format, said in one line to the logger it is handed; a
tune row a signature lists is kept there as it was, never replaced by an unsigned one);
`needs_writer` says whether one is opened (never to migrate an older format, nor to make a
bundle where the path names none now, only to move last-used times), `signed` whether a bundle
holds signatures, `renamed` an error about a URL's local copy said of the URL. `check_types`
refuses `use_bundle` arguments of the wrong type (and reads `WARM_BUNDLE_WRITE` where `write` is
None). What it opens to serve is a `BundleCore` (`opened`; a `Bundle`, `warmcli.bundle.store`,
only to write). It owns no state and never prints.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.bundle.core import BundleCore
from warmcli.errors import BundleError, RemoteBundleWarning
from warmcli.home import others_may_write
from warmcli.printable import printable

if TYPE_CHECKING:  # a writer's (`opened`): a process that only serves never imports it
    from warmcli.bundle.store import Bundle


def folder_end(path: str) -> str | None:
    """How a path names a folder where a file to write or read is meant (a last `/`, `.` or
    `..`, which a `Path` drops, so a file would be made under the folder's name), else None."""
    end = "/" if path.endswith(("/", os.sep)) else os.path.basename(path)
    return end if end in (".", "..") or (end == "/" and path.strip("/" + os.sep)) else None


def check_types(path: object, write: object, trusted_keys: object) -> bool:
    """`use_bundle`'s arguments are of the types it takes, else a one-line `TypeError` naming
    the argument (one key path as a `str` would be read one character a key); returns
    whether to write back (`write`, or `WARM_BUNDLE_WRITE` where it is None)."""
    if path is not None and not (
        isinstance(path, str | os.PathLike) and isinstance(os.fspath(path), str)
    ):
        kind, why = _kind(path), ""
        if hasattr(path, "joinpath") and hasattr(path, "read_bytes"):  # a resource's Traversable
            kind = f"{type(path).__module__.split('._')[0]}.{kind}"  # zipfile._path: zipfile
            why = ": a file inside an archive, which SQLite cannot open: "
            why += "copy it out to a file and name that"
        raise TypeError(f"use_bundle: path must be a str or os.PathLike (or None), not {kind}{why}")
    if write is not None and not isinstance(write, bool):
        raise TypeError(f"use_bundle: write must be True, False or None, not {_kind(write)}")
    if isinstance(trusted_keys, str | bytes | os.PathLike) or not (
        trusted_keys is None
        or (
            isinstance(trusted_keys, Sequence)
            and all(isinstance(k, str | os.PathLike) for k in trusted_keys)
        )
    ):
        raise TypeError(
            "use_bundle: trusted_keys must be a list of key paths (or None), not "
            f"{_kind(trusted_keys)}: trusted_keys=[path] for one"
        )
    return config.bundle_write() if write is None else write


def _kind(value: object) -> str:
    return type(value).__name__


def trusted(
    given: Sequence[str | os.PathLike[str]] | None,
) -> list[bytes] | None:
    """`warmcli.bundle.signing.trusted_keys`, imported only when keys are named: a process that
    trusts no key never loads the signing layer. Its error names `trusted_keys=` for keys the
    caller gave, `WARM_TRUSTED_KEYS` for the variable's."""
    named_by = "trusted_keys="
    if given is None:
        given, named_by = config.trusted_keys(), config.TRUSTED_KEYS_ENV  # read once: handed on
        if given is None:
            return None
    from warmcli.bundle.signing import trusted_keys

    return trusted_keys(given, named_by)


def default_served(path: str, write: bool, keys: Sequence[bytes] | None) -> BundleCore:
    """The default bundle at `path` opened to serve, where no other user may write it (native
    code nobody named: this user's only); else `BundleError`."""
    why = others_may_write(path)
    if why:
        raise BundleError(f"{path}: others may write it ({why})")
    return serving(path, write, keys)


def serving(path: str, write: bool, keys: Sequence[bytes] | None) -> BundleCore:
    """The bundle at `path` opened to serve: read-only even when writing back (its writer is
    opened at exit, on the file the path names then: a connection that wrote through a file
    since replaced would take the new file's journal for its own), made where writing back
    into a bundle not there yet. A relative path is taken from the working folder now: a
    process that changes it later (a daemon) still writes back there. One to write back into
    named as a folder (ending in `/`, `/.` or `/..`, which a path drops) is refused, as one
    to read is (a file's `/` is POSIX's ENOTDIR). One the disk will not make leaves no lock."""
    if (end := folder_end(path)) is not None:
        raise BundleError(f"{path}: ends in '{end}', so names a folder: name the bundle file")
    path = absolute(path)
    create = write and not (os.path.isfile(path) and os.stat(path).st_size)
    try:
        return opened(path, create, keys)
    except BundleError as exc:  # not made (a full disk): its lock goes too, as `warm run`'s
        if create and exc.disk_refusal is not None and not os.path.lexists(path):
            from pathlib import Path  # (only then)

            from warmcli.bundle.replacing import remove_new

            remove_new(Path(path))
        raise


def open_served(
    location: str | os.PathLike[str], write: bool, keys: Sequence[bytes] | None
) -> BundleCore:
    """The bundle at a path, or a URL's local copy (read-only: it is the store's). The remote
    layer is imported only for a location that may be a URL (every URL holds `://`)."""
    if not (isinstance(location, str) and "://" in location):
        return serving(os.fspath(location), write, keys)
    from warmcli.bundle.location import is_url, shown, unread_scheme
    from warmcli.bundle.remote import local_bundle

    if not is_url(location) and unread_scheme(location) and not os.path.lexists(location):
        raise BundleError(f"{shown(location)}: no such bundle{unread_scheme(location)}")
    if is_url(location) and write:
        raise BundleError(f"{shown(location)}: a bundle named by URL is served read-only")
    path, warning = local_bundle(location, keys)  # one they refuse: the last good copy
    if warning:
        warnings.warn(warning, RemoteBundleWarning, stacklevel=4)
    try:
        return opened(absolute(path), write, keys)
    except BundleError as exc:  # said of the URL, never of its local copy
        raise renamed(exc, absolute(path), shown(location)) from None


def opened(path: str, write: bool, keys: Sequence[bytes] | None) -> BundleCore:
    """The bundle at `path`, opened to read as a `BundleCore`, or to write as a `Bundle`
    (`warmcli.bundle.store`, imported then: a process that only serves never does)."""
    if not write:
        return BundleCore.open(path, trusted_keys=keys)
    from warmcli.bundle.store import Bundle

    return Bundle.open(path, write=True, trusted_keys=keys)


def renamed(exc: BundleError, path: str | os.PathLike[str], name: str) -> BundleError:
    """`exc`, said of the bundle at `path`, said of `name` instead (a URL, not its local
    copy in WARM_HOME, which no script can map back); `exc` itself where it names another."""
    text, said = str(exc), f"{os.fspath(path)}: "
    return type(exc)(name + ": " + text.removeprefix(said)) if text.startswith(said) else exc


def needs_writer(served: BundleCore, news: bool) -> bool:
    """Whether a write-back opens a writer: for what it built or measured (`news`), else
    only to move the served kernels' last-used times, which never migrates a bundle of an
    older format (a signed one's signature would stop vouching for it) nor makes one where
    the path names none now."""
    from warmcli.bundle.file import FORMAT_VERSION

    if news or served.writable:
        return True
    # last-used times only: never into a bundle of an older format, nor one made anew where
    # the served one was removed meanwhile (retired: no empty bundle put in its place)
    return os.path.isfile(served.fspath) and served.format_version() == FORMAT_VERSION


def write_back_into(served: BundleCore, say: Callable[..., None] | None = None) -> Bundle:
    """Where a write-back goes: the bundle served, when it was made writable (new), else
    the file its path names now, opened to write: one of an older format is migrated then,
    and `say` (a logger's `warning`) is told so in one line (a warm that reads only that
    format cannot read it now). Either keeps the tune rows a signature lists as they were
    (`Bundle.keeps_signed`): what a write-back adds is unsigned, and it unsigns nothing."""
    from warmcli.bundle.store import Bundle

    if served.writable:  # (made by this process: `opened` to write)
        assert isinstance(served, Bundle)
        served.keeps_signed = True
        return served
    from warmcli.bundle.file import FORMAT_VERSION, check_header

    try:
        before = check_header(served.fspath)[0]
    except (OSError, BundleError):  # gone, or no bundle now: the open below says why
        before = FORMAT_VERSION
    writer = Bundle.open(served.fspath, write=True)
    writer.keeps_signed = True  # a signed tune row stays as it was (the README's promise)
    if say is not None and before != FORMAT_VERSION == writer.format_version():
        say(
            "warm: writing back into %s migrated it from format %d to %d: a warm that reads "
            "only format %d cannot read it now (upgrade every warm that serves it)",
            printable(served.fspath),
            before,
            FORMAT_VERSION,
            before,
        )
    return writer


def signed(bundle: BundleCore | None) -> bool:
    """Whether `bundle` holds signatures (False where it cannot be read any more: a file
    that is no bundle was put in its place)."""
    try:
        return bundle is not None and bool(bundle.signatures())
    except BundleError:
        return False


def absolute(path: str | os.PathLike[str]) -> str:
    """`path` taken from the working folder where relative, as `os.path.abspath` does but not
    normalized: `link/..` is the folder above the one the link leads to, as the system (and
    SQLite) open it, not the one holding the link (a bundle named so was not found, or another
    one there read); its `.` parts and doubled `/` dropped, as it is shown. A relative one where
    the working folder was removed is a `BundleError`, as a missing bundle is."""
    path = os.fspath(path)  # (a remote bundle's local copy is a Path)
    try:
        joined = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    except FileNotFoundError:  # (the working folder removed: no relative path names a file)
        raise BundleError(
            f"{path}: a relative path, and this process's working folder was removed: "
            "name the bundle by its absolute path"
        ) from None
    if "/." not in joined and "//" not in joined:
        return joined
    return "/" + "/".join(part for part in joined.split("/") if part not in ("", "."))
