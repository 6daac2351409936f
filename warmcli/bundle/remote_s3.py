"""The `s3://bucket/key` store of `warmcli.bundle.remote`: boto3 (`pip install
warmcli[s3]`), imported only for such a URL, its endpoint and credentials from the usual
AWS variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...; settings no client can be
made from are a `RemoteError`). A download is checked against the sha256 `push` put in the
object's metadata; a push sends nothing where the object is this bundle already
(`push_copy.held`), and, of a bundle merged from it, only over the version merged
(`warmcli.bundle.merged_from`) or the one a fast-forward read (`warmcli.bundle.fast_forward`).
`s3://bucket/key?versionId=ID` reads that version of the object (a push to it is refused: a
PUT makes a new version); any other query, or a fragment, is refused (`_version`), never
dropped to read the newest object in place of the one named.
boto3 reads the store's answers on sockets warm cannot reach (each
read waits at most 10 s, or the deadline where it is shorter, but a store may drip its
headers a byte a wait): so a download (its HEAD, GET and body) and a push's HEAD and PUT
run in a daemon thread whose result is waited for `WARM_REMOTE_DEADLINE` at most
(`_within`: each exchange whole, a PUT's body's upload included; that body is read
through `_Sent`, which says how far it was sent when the deadline passed); past it, the
download's `Gate` is shut (its temporary file removed, nothing written after), an upload's
body refuses to be read further, and the thread is left to end with its socket (at
the store's next silence of a read's wait: one that drips faster keeps it, for days); while
`MAX_GIVEN_UP` such threads are alive in the process no exchange is begun (`RemoteError`), so
a long-running process asking a store that drips holds a bounded number of threads and sockets.
botocore reads an answer's body whole into memory (an error's, a PUT's): at most
`MAX_ANSWER` bytes of it are read (`_Capped`), whatever length the store says or sends.
Each store owns only its client, whether the store took its upload (`sent`) and the names of
the threads it starts; it never prints.
"""

from __future__ import annotations

import base64
import functools
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import parse_qsl, urlsplit

from warmcli.bundle.http_open import TIMEOUT, failed, said
from warmcli.bundle.location import shown
from warmcli.bundle.merged_from import Since, unchanged
from warmcli.bundle.push_copy import held
from warmcli.bundle.received import Bounds, Gate, bounds, checked, receive
from warmcli.errors import RemoteError

SHA_META = "sha256"  # the S3 metadata field `push` writes (x-amz-meta-sha256)
GIVEN_UP = "warm-s3 (given up)"  # a thread `_within` left to end with its socket
MAX_GIVEN_UP = 16  # such threads alive at once: past them, no exchange is begun
MAX_ANSWER = 1 << 20  # bytes of an answer's body botocore reads whole (an error's: ~300)
T = TypeVar("T")
# What botocore raises reading a field of a store's answer it cannot parse (no BotoCoreError)
_UNREADABLE = (ValueError, TypeError, LookupError, ArithmeticError, RuntimeError)


def _unreadable(url: str, exc: BaseException) -> RemoteError:
    """Why a store's answer botocore could not read failed the call (a redirect loop: botocore
    follows a bucket's redirects by recursion, until Python's limit)."""
    if isinstance(exc, RecursionError):
        return RemoteError(f"{url}: the store redirects in a loop")
    return RemoteError(f"{url}: the store's answer is unreadable ({said(exc)})")


class S3:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.bucket, self.key = parts.netloc, parts.path.lstrip("/")
        self.url = shown(url)  # as messages name it: its query withheld
        self.sent = False  # the store answered the upload: it holds it
        if not self.bucket or not self.key:
            raise RemoteError(f"{self.url}: an S3 URL is s3://bucket/key")
        self.version = _version(self.url, parts.query, parts.fragment)  # {"VersionId": ...}
        try:
            import boto3
        except ImportError:
            raise RemoteError(
                f"{self.url}: s3:// URLs need boto3: pip install 'warmcli[s3]'"
            ) from None
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        self.seconds = bounds().seconds  # a bad WARM_REMOTE_* is an error, never a fall-back
        wait = min(TIMEOUT, self.seconds)  # each read's, as an https:// store's
        config = Config(connect_timeout=wait, read_timeout=wait, retries={"max_attempts": 1})
        try:  # a profile or config file that is not there, an endpoint that is no URL
            self.client = boto3.client("s3", config=config)
        except (BotoCoreError, ValueError) as exc:
            why = f"no S3 client from the AWS settings ({said(exc)})"
            raise RemoteError(f"{self.url}: {why}") from None
        # botocore reads an answer's body whole into memory (an error's, a PUT's: all but a
        # GET's object, which `receive` reads bounded): at most MAX_ANSWER bytes of it here
        endpoint = getattr(self.client, "_endpoint", None)  # (no public hook comes before it)
        session = getattr(endpoint, "http_session", None)
        if session is not None:
            session.send = functools.partial(_capped, session.send)

    def call(self, action: Any, moved: RemoteError | None = None) -> Any:
        """`action(client)`, what fails said in one `RemoteError` (`moved`, where given, of a
        store that refused a PUT's `IfMatch`, its object another version, or said nothing is
        there: removed)."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return action(self.client)
        except NoCredentialsError as exc:  # before any request: no store was asked
            raise RemoteError(
                f"{self.url}: no AWS credentials ({said(exc)}): set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            ) from None
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code, message = said(error.get("Code")), said(error.get("Message"))
            if code in ("PreconditionFailed", "412", "404", "NoSuchKey") and moved is not None:
                raise moved from None
            if code in ("404", "NoSuchKey", "NoSuchVersion") and self.version:  # (of one key)
                raise RemoteError(
                    f"{self.url}: no such version of the object ({code}): name one the bucket "
                    "holds (aws s3api list-object-versions)"
                ) from None
            if code in ("404", "NoSuchKey"):
                raise RemoteError(failed(self.url, 404, message)) from None
            raise RemoteError(f"{self.url}: {code}: {message}") from None
        except BotoCoreError as exc:
            raise RemoteError(f"{self.url}: store unreachable ({said(exc)})") from None
        except _UNREADABLE as exc:
            # botocore reading a field of its answer (no BotoCoreError): `x-amz-missing-meta:
            # abc`, `Last-Modified: garbage`; `Last-Modified: 99999999999999999999` or `1e400`
            # (a RuntimeError: "Unable to calculate correct timezone offset")
            raise _unreadable(self.url, exc) from None

    def upload(self, copy: BinaryIO, digest: str, md5: bytes, since: Since | None = None) -> bool:
        """One PUT of `copy` with its sha256 in the metadata (and `Content-MD5`); none where
        the object is this copy already (`held`: False, nothing sent); `since` given, only
        where the object is the version merged (`merged_from.unchanged`; then `IfMatch` its
        ETag where this boto3 sends one: else `since.moved`). The HEAD, and the PUT
        (its body sent and answered), each end within `WARM_REMOTE_DEADLINE`, else
        `RemoteError` (not pushed, or not known to be: `_late_put`)."""
        if self.version:  # a PUT makes a new version: it never writes an old one
            raise RemoteError(
                f"{self.url}: not pushed: a push makes a new version of the object; name it "
                "without ?versionId= (s3://bucket/key)"
            )
        late = (
            f"{self.url}: not pushed: the store did not answer in {self.seconds:g} s "
            "(WARM_REMOTE_DEADLINE)"
        )
        found = self._within(self.seconds, late, lambda gate: self._head())
        head = found or {}
        size = os.fstat(copy.fileno()).st_size
        sha = (head.get("Metadata") or {}).get(SHA_META)
        if head and held(sha, head.get("ETag"), head.get("ContentLength"), digest, md5, size):
            return False
        stated = {"Metadata": {SHA_META: digest}, "ContentMD5": base64.b64encode(md5).decode()}
        if since is not None:  # (nothing there: "", removed since; no HEAD allowed: the PUT tells)
            model = self.client.meta.service_model.operation_model("PutObject")
            matched = since.origin.etag is not None and "IfMatch" in model.input_shape.members
            unchanged(since, self.url, "" if found is None else head.get("ETag"), sha, matched)
            stated.update({"IfMatch": since.origin.etag} if matched else {})
        body, event = _Sent(copy), "before-send.s3.PutObject"

        def put(gate: Gate) -> None:
            given = {"Bucket": self.bucket, "Key": self.key, "Body": body, **stated}
            self.call(lambda c: c.put_object(**given), None if since is None else since.moved)
            self.sent = True  # the store answered the upload: it holds it

        self.client.meta.events.register(event, body.asked)
        try:  # answered (or, before the body, to `Expect: 100-continue`) within the deadline
            self._within(self.seconds, late, put, body)
        finally:
            self.client.meta.events.unregister(event, body.asked)
        return True

    def _head(self) -> dict[str, Any] | None:
        """What the store says of the object; None where nothing is there (its 404), {}
        where no HEAD is allowed (the PUT says what is wrong)."""
        gone = RemoteError(self.url)  # (said of a 404 only: never raised out of here)
        try:
            return dict(self.call(lambda c: c.head_object(Bucket=self.bucket, Key=self.key), gone))
        except RemoteError as exc:
            return None if exc is gone else {}

    modified: str | None = None  # an object has an ETag always: no date is asked by

    def download(
        self, etag: str | None, folder: Path, limits: Bounds, modified: str | None = None
    ) -> tuple[Path, str, str] | None:
        """The object, unless its ETag is `etag` (None): its HEAD, GET and body read within
        `limits` (in all: `_within`), into a temporary file in `folder`. (`modified`, an
        https:// store's `Last-Modified`, is never remembered of an object: unused.)"""
        late = (
            f"{self.url}: download stopped: not done in {limits.seconds:g} s (WARM_REMOTE_DEADLINE)"
        )
        return self._within(
            limits.seconds, late, lambda gate: self._download(etag, folder, limits, gate)
        )

    def _within(
        self, seconds: float, late: str, work: Callable[[Gate], T], body: _Sent | None = None
    ) -> T:
        """`work(gate)` run in a daemon thread, its result (or error) waited for `seconds`
        at most (an upload's `body` sent too); past them (or interrupted) the gate is shut
        (and the body's reads refused), and `late` raised (for an upload, as far as its body
        went: `_late_put`): the thread makes and writes no file
        after, and ends with its socket (at the store's next silence of a read's wait, or
        the process's end), named `GIVEN_UP` until then; `RemoteError` at once where
        `MAX_GIVEN_UP` of those are alive."""
        left = sum(thread.name == GIVEN_UP for thread in threading.enumerate())
        if left >= MAX_GIVEN_UP:  # each holds a socket a store that drips may keep for days
            raise RemoteError(
                f"{self.url}: not asked: {left} exchanges given up at WARM_REMOTE_DEADLINE "
                "still wait on their stores' answers (a store that drips them)"
            )
        gate, outcome, moved = Gate(self.url), [], threading.Condition()

        def run() -> None:
            try:
                outcome.append((True, work(gate)))
            except BaseException as exc:  # given to the caller, never a thread's traceback
                outcome.append((False, exc))
            finally:
                with moved:
                    moved.notify_all()

        def waited(seconds: float) -> bool:  # done
            with moved:  # a wait past the platform's clock is an error: ~3 years will do
                return moved.wait_for(lambda: bool(outcome), min(seconds, 1e8))

        thread = threading.Thread(target=run, name="warm-s3", daemon=True)
        thread.start()
        finished = False
        try:  # the whole exchange: an upload's body too
            finished = waited(seconds)
        finally:
            if not finished:
                thread.name = GIVEN_UP  # (counted until it ends)
                gate.shut()
                if body is not None:
                    body.given_up = True
        if not finished:
            raise RemoteError(late if body is None else _late_put(self.url, seconds, body, late))
        ok, value = outcome[0]
        if not ok:
            raise value.with_traceback(None)
        return value  # type: ignore[no-any-return]

    def _download(
        self, etag: str | None, folder: Path, limits: Bounds, gate: Gate
    ) -> tuple[Path, str, str] | None:
        head = self.call(lambda c: c.head_object(Bucket=self.bucket, Key=self.key, **self.version))
        if etag is not None and head.get("ETag") == etag:
            return None
        limits.too_long(self.url, head.get("ContentLength"))
        from botocore.exceptions import BotoCoreError

        got = self.call(lambda c: c.get_object(Bucket=self.bucket, Key=self.key, **self.version))
        body = got["Body"]
        try:
            tmp, digest, length = receive(self.url, body, folder, limits, gate)
        except RemoteError:  # a bound passed
            raise
        except (OSError, BotoCoreError) as exc:  # cut short: botocore's own, no OSError
            raise RemoteError(f"{self.url}: store unreachable ({said(exc)})") from None
        except _UNREADABLE as exc:  # a checksum botocore checks the body by that is no base64
            raise _unreadable(self.url, exc) from None
        finally:
            body.close()
        stated = (got.get("Metadata") or {}).get(SHA_META)
        etag = got.get("ETag") or digest  # a store that names none: its sha256 stands in
        return checked(self.url, tmp, digest, length, got.get("ContentLength"), stated, etag)


def _version(url: str, query: str, fragment: str) -> dict[str, str]:
    """The object version an `s3://bucket/key?versionId=ID` URL names, as boto3's
    `VersionId` ({} for the newest); any other query or a fragment is a `RemoteError` (S3
    takes none: dropped, it would serve the newest object in place of the one named)."""
    fields = parse_qsl(query, keep_blank_values=True)
    named = len(fields) == 1 and fields[0][0] == "versionId" and fields[0][1]
    if fragment or (query and not named):
        raise RemoteError(
            f"{url}: an s3:// URL takes no query but ?versionId=ID, an object's version "
            "(s3://bucket/key?versionId=ID), nor a #fragment"
        )
    return {"VersionId": fields[0][1]} if fields else {}


def _capped(send: Callable[[Any], Any], request: Any) -> Any:
    """botocore's `send(request)`, the body of its answer (an `AWSResponse`) read at most
    `MAX_ANSWER` bytes, but for a streamed GET's object (2xx), which `receive` reads. (botocore
    reads a body it does not stream inside `send`: it is asked to stream it, then read here.)"""
    streamed, request.stream_output = request.stream_output, True
    try:
        response = send(request)
    finally:
        request.stream_output = streamed
    if not (streamed and response.status_code < 300):
        response.raw = _Capped(response.raw)
        if not streamed:
            from botocore.exceptions import ConnectionClosedError

            try:  # read now, as botocore's send does (capped), its failure said as there
                response.content  # noqa: B018
            except Exception as exc:  # urllib3's (a connection reset): botocore's own
                raise ConnectionClosedError(endpoint_url=request.url, error=exc) from None
    return response


class _Capped:
    """An answer's raw stream (urllib3's) that botocore reads whole (`stream`): at most
    `MAX_ANSWER` bytes, then its connection dropped (a store that said 4 GB of an error
    took 3 GB of memory in 3 s, and a thread given up on read on)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def stream(self, amt: int = 1 << 16, decode_content: Any = None) -> Iterator[bytes]:
        left = MAX_ANSWER
        for chunk in self._raw.stream(amt, decode_content=decode_content):
            yield chunk[:left]
            left -= len(chunk)
            if left <= 0:
                self._raw.close()  # the rest unread: the connection is not reused
                return


class _Sent:
    """A push's body as boto3 reads it, saying how far its PUT went (`state`): "" made (or
    rewound, as for a retry), "1" asked (botocore's `before-send`), "2" sending (read
    since), "3" sent (read to its end: its answer awaited). Once `given_up` a read raises:
    the upload stops there, its body never sent whole."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh, self.state, self.given_up = fh, "", False

    def __getattr__(self, name: str) -> Any:  # tell, fileno: the file's
        return getattr(self._fh, name)

    def asked(self, **_: Any) -> None:
        self.state = "1"

    def seek(self, *args: Any) -> int:
        self.state = ""  # rewound: read again (a checksum, a retry) before it is asked
        return self._fh.seek(*args)

    def read(self, size: int = -1) -> bytes:
        if self.given_up:
            raise OSError("the push was given up (WARM_REMOTE_DEADLINE)")
        data: bytes = self._fh.read(size)
        if self.state == "1" and data:
            self.state = "2"
        elif self.state == "2" and not data:
            self.state = "3"
        return data


def _late_put(url: str, seconds: float, body: _Sent, late: str) -> str:
    """A PUT the deadline ended: unanswered before its body was read (`late`), while it was
    sent (never whole: the store holds what it held), or once botocore read it whole (sent,
    or, to an early answer to `Expect: 100-continue`, not: the store may hold it, and a
    push again says so, sending nothing)."""
    if body.state == "2":
        return f"{url}: not pushed: the upload was not sent whole in {seconds:g} s " + (
            "(WARM_REMOTE_DEADLINE)"
        )
    if body.state == "3":
        return (
            f"{url}: not known to be pushed: the store did not answer in {seconds:g} s once "
            "the upload was read (WARM_REMOTE_DEADLINE): push again (it sends nothing where "
            "the store holds it)"
        )
    return late
