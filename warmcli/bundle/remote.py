"""Bundles named by URL: `https://` (`http://` only to this machine) and `s3://bucket/key`.

`fetch(url)` gives a local copy that a process opens read-only as any bundle: it is downloaded
once per machine into `WARM_HOME/remote/<hash of the URL>/` (the URL without its credentials and
its query's signing fields, `location.kept_as`: a presigned URL signed anew is the same
copy; under trusted keys, `<hash of the URL>-<hash of the keys>/`: what a keyless reader took
never replaces what a keyed one serves, nor one key set's another's; an upgraded keyed reader's
first copy is the keyless one where its keys trust it, else, after a key rotation changed the
set, another set's, `_seeds` and `warmcli.bundle.remote_seed`), under
that folder's lock (waited for `WARM_REMOTE_DEADLINE` at most: then as a store that cannot be
reached), into a unique temporary file (`warmcli.bundle.received`: bounded in size and time,
removed on any failure, a killed fetch's by the next) that is checked (its size, the sha256 the
store states: an S3 object's metadata, also as an https:// answer's `x-amz-meta-sha256` header,
then `warm verify`'s integrity check) before one atomic rename publishes it. The ETag (or
sha256) is remembered beside it: the next fetch asks the store whether it changed (a
conditional GET, an S3 HEAD) and downloads only if so; a store that gives no ETag is asked by
the `Last-Modified` remembered with the copy's length (fields an older warm ignores), where
`remote_http` trusts it (not within seconds of its answer: racy). What that folder holds is
believed only when this user alone wrote it: a folder others may write is refused
(`RemoteError`), a copy or its ETag that is a link or another's is removed and downloaded
afresh, and a copy whose size or modification time is not what was remembered when it was
published (replaced, cut short, written to) is downloaded afresh, not asked about by its ETag.
When the store cannot be reached, sends something that is no bundle, or passes a bound, the
last good copy is used and `Fetched.warning` says why (the caller shows it once); else
`RemoteError`. Under trusted keys (`keys`), so is one they did not sign, where a last good copy
stands in (with none, it is published, and opening it refuses it as any bundle). A download
refused for what it holds (a newer warm's format) is remembered by its ETag (and date) and this
warm's version: the next fetch asks whether the store still holds it (then says so again),
never downloading it again at each process start; a note that names the URL otherwise than
`shown` does (an earlier warm's, which may hold its password) is never said: asked afresh.
`push` uploads a bundle (checked first to be one, by `warmcli.bundle.soundness`, which holds
that state of the file, writers waiting, while it is copied into an anonymous temporary file,
`warmcli.bundle.push_copy`: the upload holds up no writer and no reader; its exchanges with
the store, its HEAD and its PUT, body and answer, each end within `WARM_REMOTE_DEADLINE`)
whole, in one request, so a reader never sees a torn object and of two concurrent pushes
one wins whole; its sha256 and MD5 are read as it is copied, in one
streamed pass, and stated with it (`Content-MD5`, which S3, GCS and Azure check against the
body): to an `s3://` URL with its sha256 in the object's metadata; to an `https://` URL as an
HTTP PUT, the way a presigned object-store URL takes an upload, with the sha256 in
`X-Warm-Sha256`. That PUT is conditional when the store says what it holds (a HEAD first):
`If-Match` its ETag, or `If-None-Match: *` where there is none yet; a store that answers 412
(the object changed meanwhile: another push) leaves it as the other push made it, and `push`
says so; a bundle `warm merge` made of what that URL held is pushed only over that very
version (`warmcli.bundle.merged_from`: a push landed since is never lost), or, where the store
moved on, over the version it holds now where the bundle holds every kernel and tune of it
(`warmcli.bundle.fast_forward`: a copy pulled, run and pushed back). The `s3://` store
is `warmcli.bundle.remote_s3`'s, the `https://` one `warmcli.bundle.remote_http`'s (a URL's
`user:pass@` sent as HTTP Basic auth to its origin
only). Every message names the URL as `location.shown` does: no password, token or query.
A store whose object is already the
bundle (by the sha256 stated with it, or an MD5 ETag: see `push_copy.held`) is sent nothing. A
URL with nothing there (HTTP 404) is said as never pushed, distinct from a store that fails. The
S3 client is boto3 (`pip install warmcli[s3]`), imported only for an `s3://` URL; its endpoint
and credentials come from the usual AWS variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...;
settings no client can be made from are a `RemoteError`). A download is a bundle from
elsewhere: untrusted input, opened by `warmcli.bundle.store` like any other (why it is
refused, its own text included, is said inert, `printable`: production shows it unescaped).
Plain `http://` is refused unless the host is this machine (`localhost`, a loopback
address): anyone on the path could change the bundle or the sha256 announced beside it, as
pip refuses an untrusted plain-http index; a redirect is followed only where it names such a
URL, and never from https:// down to plain http:// (not even to this machine: one line of
`RemoteError` says so); `warmcli.bundle.http_open` opens them, a download's connections shut
at its deadline. A length announced that is no number is a download refused, as a wrong one
is. An ETag memo that cannot be written (a full disk) is not kept: the copy is served, and
the next fetch downloads it again.
This module never prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from warmcli._version import __version__
from warmcli.bundle.location import is_url, kept_as, shown, url_text
from warmcli.bundle.merged_from import recorded
from warmcli.bundle.push_copy import copied, scratch
from warmcli.bundle.received import (
    believed,
    bounds,
    copy_identity,
    read_meta,
    remove_temporaries,
)
from warmcli.bundle.remote_http import Http
from warmcli.bundle.remote_s3 import S3  # boto3 imported only when one is made
from warmcli.bundle.remote_seed import seed, untrusted
from warmcli.bundle.schema import SCHEMAS
from warmcli.bundle.soundness import not_a_bundle, one_state
from warmcli.errors import PushInterrupted, RemoteError
from warmcli.home import make_folder, no_home_why, private, warm_home, write_private
from warmcli.printable import printable, visible

# Which warm refused a download, as remembered beside the copy: its version and the formats it
# reads (a build of one version that reads a newer format downloads it anew).
_READER = f"warm {__version__} formats {','.join(map(str, sorted(SCHEMAS)))}"


@dataclass(frozen=True)
class Fetched:
    """The local copy of a remote bundle, and why it may be the last good one."""

    path: Path
    downloaded: bool
    warning: str | None = None
    reason: str | None = None  # why not what the URL holds now, as said without a copy


def cache_dir(url: str, keys: Sequence[bytes] | None = None) -> Path:
    """Where the local copy of `url` and what is remembered about it live: a folder for
    readers that check no signature, one beside it for each set of trusted `keys`; named
    by the URL without its credentials or its query's signing fields (`kept_as`)."""
    folder = hashlib.sha256(kept_as(url_text(url)).encode()).hexdigest()[:32]
    return warm_home() / "remote" / (folder if keys is None else f"{folder}-{_named(keys)}")


def _named(keys: Sequence[bytes]) -> str:  # a set of trusted keys, whatever their order
    return hashlib.sha256(b"".join(sorted(set(keys)))).hexdigest()[:16]  # (or how often named)


def _seeds(url: str, folder: Path) -> list[Path]:
    """Where a keyed reader's first copy of `url` may come from, in the order tried: the
    keyless reader's copy, then those kept for other sets of trusted keys, newest first (a
    set a key rotation changed names a folder of its own: its last good copy is there)."""
    plain = cache_dir(url)

    def age(other: Path) -> float:
        try:
            return -os.lstat(other / "bundle.warm").st_mtime
        except OSError:
            return 0.0

    others = [p for p in plain.parent.glob(f"{plain.name}-*") if p.name != folder.name]
    return [plain, *sorted(others, key=age)]


def fetch(url: str, keys: Sequence[bytes] | None = None) -> Fetched:
    """The local copy of the bundle at `url`, downloaded only if it changed. Under trusted
    `keys`, a download they did not sign is refused where a last good copy stands in."""
    from filelock import FileLock, Timeout  # on first use: a bundle named by path never locks

    limits = bounds()  # a bad WARM_REMOTE_* is an error, never a fall-back
    folder, name = cache_dir(url, keys), shown(url)  # its password and query never shown
    try:  # WARM_HOME below a file, or not writable: one line, a `RemoteError`
        make_folder(folder.parent)  # warm's home: never writable by all
        folder.mkdir(exist_ok=True, mode=0o700)
        st = os.lstat(folder)
    except OSError as exc:
        why = no_home_why()  # no home: why, not "/dev/null/warm: Not a directory"
        where = f": {why}: set WARM_HOME to a folder of your own" if why else f" in {folder}: {exc}"
        raise RemoteError(f"{name}: its local copy cannot be kept{where}") from None
    if not (stat.S_ISDIR(st.st_mode) and private(st)):  # before its lock file is opened
        raise RemoteError(
            f"{name}: its local copy cannot be kept in {folder}: others may write there (or it "
            "is a link, or another user's): remove it, or name a WARM_HOME of your own"
        )
    lock = FileLock(str(folder / "lock"))
    try:  # another fetch of this URL downloads it meanwhile: waited for within the deadline
        lock.acquire(timeout=limits.seconds)
    except Timeout:
        return _lock_held(name, folder, limits.seconds)
    except OSError as exc:
        raise RemoteError(f"{name}: its local copy cannot be kept in {folder}: {exc}") from None
    local, meta_path = folder / "bundle.warm", folder / "meta.json"
    try:
        remove_temporaries(folder)  # a killed fetch's: none is another's, under the lock
        seeded = None  # upgraded or keys rotated: a copy they trust (why not, for its size)
        for source in _seeds(url, folder) if keys is not None and not believed(local) else ():
            seeded = seed(source, folder, keys, limits.max_bytes) or seeded
            if believed(local):
                break
        have = believed(local)  # a link or another's: downloaded afresh, never served
        meta = read_meta(meta_path) if have and believed(meta_path) else {}
        if meta.get("copy") != copy_identity(local):  # changed since published: not the ETag's
            meta = {}
        # A download this warm refused, by its ETag: the store is asked whether it still
        # holds that one (then said again, not downloaded again at every process start).
        reader = _READER + (f" keys {_named(keys)}" if keys is not None else "")
        # (a note naming the URL otherwise, an earlier warm's, may hold its password: unsaid)
        ours = str(meta.get("refused_why")).startswith(f"{name}: download refused: ")
        refused = meta.get("refused") if meta.get("refused_by") == reader and ours else None
        # A store that gives no ETag is asked by the `Last-Modified` remembered, if any (of
        # a copy of the length remembered with it), or that of the download refused
        dated = meta.get("length") == meta.get("copy", "").partition(":")[0]
        modified = meta.get("refused_modified" if refused else "last_modified")
        modified = modified if refused or dated else None
        try:  # (a store that cannot be made, bad AWS settings say: the last good copy too)
            store = _store(url)
            got = store.download(refused or meta.get("etag"), folder, limits, modified)
        except RemoteError as exc:
            if not have:
                raise RemoteError(f"{exc}; {seeded}" if seeded else str(exc)) from None
            return Fetched(local, False, f"{exc}; using the last good copy {local}", str(exc))
        if got is None:  # unchanged, or still the one refused (said again)
            why = printable(meta["refused_why"]) if refused else None  # (an older warm's)
            warning = f"{why}; using the last good copy {local}" if why else None
            return Fetched(local, False, warning, why)
        tmp, etag, digest = got
        try:
            problem = not_a_bundle(tmp) or (untrusted(tmp, keys) if have else None)
            if problem:  # said of the URL: the temporary file it names is removed
                problem = printable(problem.removeprefix(f"{tmp}: "))  # the bundle's text
                reason = f"{name}: download refused: {problem}"
                if not have:
                    raise RemoteError(f"{reason}; {seeded}" if seeded else reason)
                if etag:  # what the store holds, read whole and refused: remembered
                    memo = {**meta, "refused": etag, "refused_why": reason}
                    memo["refused_by"] = reader  # an upgraded warm (other keys) may read it
                    memo.pop("refused_modified", None)  # (another refused download's)
                    if store.modified:
                        memo["refused_modified"] = store.modified
                    with contextlib.suppress(OSError):  # not kept: asked again next time
                        write_private(str(folder), str(meta_path), json.dumps(memo).encode())
                warning = f"{reason}; using the last good copy {local}"  # as every fall-back
                return Fetched(local, False, warning, reason)
            try:  # a folder in its place: said of the copy, never of the temporary file
                os.replace(tmp, local)
            except OSError as exc:
                why = f"{name}: its local copy cannot be kept ({local}: {exc.strerror})"
                raise RemoteError(why) from None
        finally:
            tmp.unlink(missing_ok=True)  # anything but a published download
        meta_doc = {"etag": etag, "sha256": digest, "copy": copy_identity(local)}
        if store.modified:  # no ETag: its date, and the length it dates (fields added)
            length = meta_doc["copy"].partition(":")[0]
            meta_doc.update(last_modified=store.modified, length=length)
        with contextlib.suppress(OSError):  # not kept (a full disk): the copy, checked and
            write_private(str(folder), str(meta_path), json.dumps(meta_doc).encode())
        return Fetched(local, True)  # whole, is served; the next fetch downloads it again
    finally:
        lock.release()


def push(
    bundle: Path, url: str, done: list[tuple[str, bool]] | None = None, force: bool = False
) -> tuple[str, bool]:
    """Upload `bundle` (checked first to be a bundle) to `url`: its sha256, and whether it was
    sent (not where the store holds it already: `push_copy.held`), appended to `done` too (if
    given: what a caller interrupted however late reads). The state checked is copied (and
    hashed) in one read transaction into an anonymous temporary file, which is uploaded (a
    writer waits for the check and the copy, not the upload). A bundle that records it was
    merged from `url` is pushed only over the version merged (`merged_from`), or over what
    the store holds now where the bundle holds all of that (`fast_forward`: else refused,
    nothing sent), unless `force`. An interrupt once the store answered the upload is
    `PushInterrupted`: the store holds it."""
    if not is_url(url):
        said = visible(shown(url))  # (an empty one as `""`, never a line opening `: `)
        raise RemoteError(f"{said}: warm push uploads to s3://bucket/key or https:// URLs")
    if urlsplit(url).path.endswith("/") or not urlsplit(url).path:  # as `aws s3 cp` takes one
        raise RemoteError(
            f"{shown(url)}: names a folder, not a bundle: name the bundle (.../b.warm)"
        )
    store = _store(url_text(url))
    try:
        with open(bundle, "rb") as fh, scratch(bundle) as copy:
            with one_state(bundle, fh) as opened:
                digest, md5 = copied(bundle, fh, copy)
                since = None if force else recorded(opened.manifest(), url, bundle)
            copy.seek(0)
            try:
                sent = store.upload(copy, digest, md5, since)
            except RemoteError as exc:  # moved on since merged: what it holds now compared
                if since is None or exc is not since.moved:
                    raise
                from warmcli.bundle.fast_forward import caught_up  # (a push's alone)

                since = caught_up(store, url, bundle, copy, since)
                copy.seek(0)
                sent = store.upload(copy, digest, md5, since)
            pushed = digest, sent
            (done if done is not None else []).append(pushed)
        return pushed
    except KeyboardInterrupt:  # once the store answered the upload, it holds the bundle
        if not store.sent:
            raise
        raise PushInterrupted() from None


def local_bundle(
    location: str | os.PathLike[str], keys: Sequence[bytes] | None = None
) -> tuple[Path, str | None]:
    """A bundle path, or a URL's local copy (fetched, under trusted `keys` if given); and
    the fetch's warning, if any."""
    if not is_url(location):
        return Path(location), None
    got = fetch(str(location), keys)
    return got.path, got.warning


# -- the stores --------------------------------------------------------------------------------


def _store(url: str) -> Http | S3:
    if urlsplit(url).scheme == "s3":
        return S3(url)
    return Http(url)


def _lock_held(name: str, folder: Path, seconds: float) -> Fetched:
    """The last good copy, when another process held the download lock all the deadline
    (stopped mid-download, or on a store slower still); without one, `RemoteError`."""
    why = f"{name}: another process held its download lock for {seconds:g} s (WARM_REMOTE_DEADLINE)"
    if not believed(local := folder / "bundle.warm"):
        raise RemoteError(why)
    return Fetched(local, False, f"{why}; using the last good copy {local}", why)
