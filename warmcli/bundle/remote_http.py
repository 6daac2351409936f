"""The `https://` store of `warmcli.bundle.remote` (plain `http://` only to this machine):
a download is one GET, conditional on the ETag remembered (`If-None-Match`; not one that no
header may hold: `_sendable`) or, from a store that gave none, on its `Last-Modified`
(`If-Modified-Since`; one within `RACY` seconds of its answer is not trusted: `_trusted`),
bounded in size and time (`warmcli.bundle.received`), checked
against the length and the sha256 its answer states (`_stated`); a push is one PUT of the
whole file, conditional on what the store's HEAD says it holds (`If-Match` its ETag,
`If-None-Match: *` where there is none; of a bundle merged from it, on the version merged,
`warmcli.bundle.merged_from`, or the one a fast-forward read, `warmcli.bundle.fast_forward`),
none where it holds this very file (`push_copy.held`).
Credentials a URL names (`https://user:pass@host/`, `https://token@host/`) are sent as HTTP
Basic auth to its own origin only (`http_open.urlopen`), and never shown:
every message names the URL as `location.shown` does. Each store owns only the last HEAD's
answer, the last download's trusted date and whether the store took its upload (`sent`);
it never prints.
"""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path
from typing import Any, BinaryIO

from warmcli.bundle.http_open import (
    PLAIN,
    TIMEOUT,
    Deadline,
    failed,
    plain_elsewhere,
    said,
    urlopen,
    without_credentials,
)
from warmcli.bundle.location import shown
from warmcli.bundle.merged_from import Since, unchanged
from warmcli.bundle.push_copy import held
from warmcli.bundle.received import Bounds, bounds, checked, receive
from warmcli.errors import RemoteError

# Seconds a `Last-Modified` must precede its answer's `Date` to be asked by: its second's
# resolution, and the skew between the clock that dated the file and the one of the answer.
RACY = 3.0
MAX_DATE = 64  # characters of a `Last-Modified` remembered (an HTTP date has 29)


class Http:
    """An https:// (or this machine's http://) store. Credentials in the URL
    (`https://user:pass@host/`, `https://token@host/`, percent-decoded) are sent as HTTP
    Basic auth, as pip and curl do, only to the URL's own origin (never after a redirect
    elsewhere: `http_open.urlopen`); the URL asked is the one without them."""

    def __init__(self, url: str) -> None:
        self.name = shown(url)  # as every message says it: no password, no query
        if plain_elsewhere(url):
            raise RemoteError(
                f"{self.name}: plain http:// is refused (anyone on the way could change the "
                f"bundle): use https://; {PLAIN}"
            )
        self.url, self.auth = without_credentials(url)
        self.head: Any = None  # the headers of the store's answer to the last HEAD
        self.sent = False  # the store answered the upload: it holds it
        self.modified: str | None = None  # the last download's Last-Modified, if trusted

    def _request(self, **given: Any) -> Any:
        """A request of the URL; its credentials, if any, in a header never redirected."""
        import urllib.request

        request = urllib.request.Request(self.url, **given)
        if self.auth is not None:
            request.add_unredirected_header("Authorization", self.auth)
        return request

    def download(
        self, etag: str | None, folder: Path, limits: Bounds, modified: str | None = None
    ) -> tuple[Path, str, str] | None:
        """The store's bundle in a temporary file in `folder` (its path, ETag or else sha256,
        and sha256), or None where it is unchanged: asked by the `Last-Modified` remembered
        (`modified`, `If-Modified-Since`: the ETag is then the sha256, which the store never
        gave) or else by `etag` (`If-None-Match`). A store that answers without an ETag
        leaves its `Last-Modified` in `self.modified` (`_trusted`), else None there."""
        import http.client  # here: a process that names no URL never imports them
        import urllib.error

        etag, modified = _sendable(etag), _sendable(modified)  # (else downloaded afresh)
        self.modified = None
        asked = {"If-Modified-Since": modified} if modified else {"If-None-Match": etag}
        request = self._request(headers=asked if modified or etag else {})
        late = RemoteError(
            f"{self.name}: download stopped: not done in {limits.seconds:g} s "
            "(WARM_REMOTE_DEADLINE)"
        )
        with Deadline(limits.seconds) as deadline:  # headers dripped a byte a wait included
            try:
                with urlopen(
                    request, min(TIMEOUT, limits.seconds), deadline, self.name
                ) as response:
                    size = response.headers.get("Content-Length")
                    limits.too_long(self.name, size)
                    if not response.headers.get("ETag"):  # (dated as its headers came)
                        self.modified = _trusted(response.headers, time.time())
                    tmp, digest, length = receive(self.name, response, folder, limits)
                    new_etag = response.headers.get("ETag") or digest
                    stated = _stated(response.headers)
            except RemoteError:  # a redirect refused (an OSError too)
                raise
            except urllib.error.HTTPError as exc:
                if exc.code == 304 and (etag or modified):  # to a GET of all: an error
                    return None
                raise RemoteError(failed(self.name, exc.code, said(exc.reason))) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                if deadline.passed:
                    raise late from None
                reason = said(getattr(exc, "reason", exc))
                raise RemoteError(f"{self.name}: store unreachable ({reason})") from None
        if deadline.passed:  # what was read before the connection was shut
            tmp.unlink(missing_ok=True)
            raise late
        return checked(self.name, tmp, digest, length, size, stated, new_etag)

    def upload(self, fh: BinaryIO, digest: str, md5: bytes, since: Since | None = None) -> bool:
        """One PUT of the whole file `fh` (its sha256 `digest` and raw `md5` stated),
        conditional on what the store holds if it says, or, `since` given, on the version
        it was merged from (`merged_from.unchanged`, then `If-Match` its ETag: else
        `since.moved`); none where the store's HEAD says it holds this file already (then
        False: nothing sent)."""
        import http.client
        import urllib.error

        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Length": str(os.fstat(fh.fileno()).st_size),
            "Content-MD5": base64.b64encode(md5).decode(),
            "X-Warm-Sha256": digest,
        }
        seconds = bounds().seconds  # a bad WARM_REMOTE_DEADLINE is an error, as for a fetch
        late = RemoteError(
            f"{self.name}: not pushed: the store did not answer in {seconds:g} s "
            "(WARM_REMOTE_DEADLINE)"
        )
        etag = self._etag(seconds, late)
        head = self.head
        if head is not None and held(
            _stated(head),
            etag,
            head.get("Content-Length"),
            digest,
            md5,
            int(headers["Content-Length"]),
        ):
            return False
        if since is not None:  # the version merged (or read), not the one the HEAD saw
            unchanged(since, self.name, etag, None if head is None else _stated(head), True)
            etag = since.origin.etag or etag
        if etag:
            headers["If-Match"] = etag
        elif etag == "":
            headers["If-None-Match"] = "*"
        request = self._request(data=fh, headers=headers, method="PUT")
        with Deadline(seconds) as deadline:  # the whole exchange: the body's upload too
            try:
                answer = urlopen(request, min(TIMEOUT, seconds), deadline, self.name)
                self.sent = True  # (an error answer raises)
                answer.close()
            except urllib.error.HTTPError as exc:
                if exc.code == 412 and since is not None:
                    raise since.moved from None
                if exc.code == 412:
                    raise RemoteError(
                        f"{self.name}: not pushed: the object changed since this push began "
                        "(another push won); push again to replace it"
                    ) from None
                raise RemoteError(f"{self.name}: HTTP {exc.code} {said(exc.reason)}") from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                if deadline.passed:
                    raise _unsent(self.name, seconds, deadline.sent) from None
                if isinstance(exc, RemoteError):  # a redirect refused: said as it is
                    raise
                reason = said(getattr(exc, "reason", exc))
                raise RemoteError(f"{self.name}: store unreachable ({reason})") from None
        if deadline.passed:  # an answer cut short at the deadline reads as whole
            raise _unsent(self.name, seconds, deadline.sent)
        return True

    def _etag(self, seconds: float, late: RemoteError) -> str | None:
        """The ETag of what the store holds at the URL; "" if nothing; None if it does not
        say (no ETag, or no HEAD allowed, as with a URL presigned for PUT only). Answered
        within `seconds`, else `late` is raised. The answer's headers are kept in `head`."""
        import http.client
        import urllib.error

        request = self._request(method="HEAD")
        self.head = None
        with Deadline(seconds) as deadline:
            try:
                wait = min(TIMEOUT, seconds)  # each wait, the TLS handshake's too, as a fetch's
                with urlopen(request, wait, deadline, self.name) as response:
                    etag: str | None = response.headers.get("ETag")
                    self.head = response.headers
            except urllib.error.HTTPError as exc:
                if deadline.passed:
                    raise late from None
                return "" if exc.code == 404 else None
            except (urllib.error.URLError, http.client.HTTPException, OSError):
                if deadline.passed:
                    raise late from None
                return None  # the PUT says whether the store is reachable
        if deadline.passed:  # headers cut short at the deadline read as whole
            raise late
        return etag


def _trusted(headers: Any, now: float) -> str | None:
    """The `Last-Modified` of a download without an ETag, as it was sent, where a later
    `If-Modified-Since` with it tells a change: None where it is none (or no HTTP date),
    or is within `RACY` seconds of the answer's `Date` (else of `now`, when the answer
    came) or after it. It has one second's resolution: a bundle replaced within that
    second of the download (as Git's "racily clean" index entries) keeps it, and would be
    taken as unchanged; the next fetch downloads it again, by then long after."""
    text, dated = headers.get("Last-Modified"), headers.get("Date")
    stamp = _seconds(text)
    when = _seconds(dated) if dated else now  # the store's clock, as its files' times are
    if stamp is None or when is None or not _sendable(text):
        return None
    return text if when - stamp >= RACY else None


def _seconds(text: str | None) -> float | None:
    """An HTTP date's time (UTC where it names no zone), or None where it is none."""
    from datetime import UTC
    from email.utils import parsedate_to_datetime

    if not text or len(text) > MAX_DATE:
        return None
    try:
        stamp = parsedate_to_datetime(text)
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


def _unsent(name: str, seconds: float, sent: bool) -> RemoteError:
    """A PUT the deadline ended: before its body was sent whole (the store holds what it
    held: a PUT publishes a body only whole), or while its answer was awaited (the store
    may hold it: a push again says so, sending nothing)."""
    if not sent:
        return RemoteError(
            f"{name}: not pushed: the upload was not sent whole in {seconds:g} s "
            "(WARM_REMOTE_DEADLINE)"
        )
    return RemoteError(
        f"{name}: not known to be pushed: sent, but the store did not answer in {seconds:g} s "
        "(WARM_REMOTE_DEADLINE): push again (it sends nothing where the store holds it)"
    )


def _stated(headers: Any) -> str | None:
    """The sha256 a store's answer states of its object: S3's metadata that an `s3://` push
    wrote (`x-amz-meta-sha256`, as a presigned or public GET of it gives), or the header an
    https push sent, where the store gives it back."""
    value = headers.get("x-amz-meta-sha256") or headers.get("X-Warm-Sha256")
    return str(value).strip().lower() if value else None


def _sendable(etag: str | None) -> str | None:
    """`etag` where `http.client` may send it back (printable latin-1: a store's own is), else
    None: one remembered beside the copy with a line break or another character (a
    corrupted `meta.json`) raised `ValueError` out of `putheader`."""
    if not etag or not etag.isprintable():
        return None
    try:
        etag.encode("latin-1")
    except UnicodeEncodeError:
        return None
    return etag
