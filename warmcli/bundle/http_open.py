"""Opening an `https://` (or this machine's `http://`) URL for `warmcli.bundle.remote`.

`said` makes what a store (or its client) says one inert line, each URL in it as
`location.shown` shows it and a header value refused withheld. `plain_elsewhere` says
whether a URL is plain http:// to another machine (refused: by the host connected to, as
every check here reads it, `location.endpoint`, which refuses a malformed one:
`[::1]x.example`); `failed` says a store's HTTP refusal (a 404: nothing was pushed there
yet). `TIMEOUT` is the wait for a store's answer. `urlopen` opens a request, following a
redirect only where `redirect_refused` finds nothing against it (never from https:// down to
plain http://, nor to plain http:// elsewhere, nor to another scheme, nor to a URL naming
credentials, nor to a malformed host: each said as `shown`), the request's credentials
(`without_credentials`: a URL's `user:pass@`, as HTTP Basic auth, each escape the byte it
names) sent along only to the same origin (not again once a chain of redirects left it),
never through a proxy to this machine (`http_proxy` would take a plain http:// request, and
its password, off it), the proxy's own password (`Proxy-Authorization`, which urllib copies
along a redirect as any header) sent to the proxy alone, each wait (the connection, the
answer, a read) `timeout` seconds at most; under a `Deadline`, every connection it opens is
shut when the deadline passes, whatever it waits for (a store that drips its headers a byte
at a time, each byte within the wait, is stopped there too; an upload's body, a TLS
handshake, its answer); a store that answers and hangs up while the request is sent is read
(its refusal said, a success never taken: the body was not sent whole).
A `Deadline` owns its timer and the sockets it watches; this module never prints.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from warmcli.bundle.location import endpoint, shown
from warmcli.errors import RemoteError
from warmcli.printable import printable

PLAIN = "http:// is taken only for this machine (localhost, or a loopback address: 127.0.0.1, ::1)"


class Deadline:
    """Shuts every connection `watch`ed, `seconds` after it is entered: the whole exchange
    (connecting, a TLS handshake, an upload's body, the answer) is bounded; `passed` says
    whether it did, `sent` whether the request was sent whole by then (its answer awaited)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self._passed, self.sent = seconds, False, False
        self._end = float("inf")
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        # a wait past the platform's clock is an error in the timer's thread: ~3 years will do
        self._timer = threading.Timer(min(seconds, 1e8), self._shut)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._end = time.monotonic() + self.seconds
        self._timer.start()
        return self

    def within(self, wait: float) -> float:
        """`wait`, cut to what is left of the deadline (passed: shut now, a wait of 0.01 s)."""
        left = self._end - time.monotonic()
        if left <= 0:
            self._shut()
        return max(0.01, min(wait, left))

    @property
    def passed(self) -> bool:
        """Whether the deadline passed (its timer, or a wait `within` it, ran out)."""
        return self._passed or time.monotonic() >= self._end - 0.01

    def answer_awaited(self) -> None:
        """The request was sent whole: its answer is awaited."""
        with self._lock:
            self.sent = not self.passed

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self._end = float("inf")  # after it, `passed` says whether a connection was shut

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.passed:
                _shut(sock)

    def _shut(self) -> None:
        with self._lock:
            self._passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Wake whatever waits on `sock` (the plain socket's shutdown: a TLS socket's own
    would drop its state under a read in progress)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


# A URL within a message (botocore names its endpoint's, `AWS_ENDPOINT_URL`, whole), and the
# header value http.client echoes whole when it refuses one (`AWS_SESSION_TOKEN` with a CR).
# A scheme of 32 characters at most: unbounded, a run of letters with no `://` after it (a
# store's 64 KiB reason phrase, an S3 error's Message) was scanned from each of its letters to
# its end (10 s for 65,000); a longer run before `://` is matched from its last 32.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s\"'<>]+")
_HEADER = re.compile(r"(Invalid header value)\b.*", re.S)


def said(value: object) -> str:
    """What a store or its client said (a reason, a status line, a URL it redirects to), as
    one inert line of at most 200 characters: it is shown in errors, and raised in
    production. Each URL in it is as `location.shown` shows it (no password, no query),
    and a header value refused (a credential's, a session token's) is not shown."""
    text = _HEADER.sub(
        r"\1 (not shown: it may hold a credential; a line break or control character in one?)",
        str(value),
    )
    text = _URL.sub(lambda url: shown(url.group()), printable(" ".join(text.split())))
    return text[:200]


def loopback(host: str | None) -> bool:
    import ipaddress

    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_elsewhere(url: str) -> bool:
    """Whether `url` is plain http:// to another machine (or no http at all): refused. Its
    host is the one connected to (`location.endpoint`: a malformed one, `[::1]x.example`,
    refused as elsewhere)."""
    try:
        scheme, host, _ = endpoint(url)
    except ValueError:
        return urlsplit(url).scheme != "https"  # (https://: refused as malformed by its caller)
    return scheme != "https" and not (scheme == "http" and loopback(host))


def redirect_refused(origin: str, to: str) -> str | None:
    """Why a redirect from `origin` to `to` is not followed, or None: never from https://
    down to plain http:// (this machine's too), nor to plain http:// elsewhere, nor to a
    URL naming credentials (`user:pass@`: they would be read as part of its host)."""
    if urlsplit(to).scheme not in ("https", "http"):
        return "only https:// (or http:// to this machine) is followed"
    if urlsplit(origin).scheme == "https" and urlsplit(to).scheme != "https":
        return "never from https:// down to plain http://: anyone on the way could change it"
    if "@" in urlsplit(to).netloc:
        return "it names credentials (user@): a redirect is followed without them"
    try:
        endpoint(to)  # a host read two ways, `[::1]evil`: no origin may be judged of it
    except ValueError as exc:
        return str(exc)
    return PLAIN if plain_elsewhere(to) else None


def without_credentials(url: str) -> tuple[str, str | None]:
    """`url` without the credentials it names (`https://user:pass@host/`, or a token alone,
    `https://token@host/`), and those as an HTTP Basic `Authorization` value (percent-
    decoded to the bytes the escapes name, as curl sends them: `%FF` is the byte 0xFF, not
    UTF-8's replacement character; a token is the user, its password empty); else `url`
    itself and None."""
    import base64
    from urllib.parse import unquote_to_bytes

    from warmcli.bundle.location import url_parts

    head, netloc, path, query, fragment = url_parts(url)
    userinfo, at, host = netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    token = unquote_to_bytes(user) + b":" + unquote_to_bytes(password)
    tail = ("" if query is None else "?" + query) + ("" if fragment is None else "#" + fragment)
    return head + host + path + tail, "Basic " + base64.b64encode(token).decode("ascii")


def _origin(url: str) -> tuple[str, str, int]:
    """`url`'s origin, as the connection reads it (`location.endpoint`: ValueError where its
    host is malformed)."""
    return endpoint(url)


def _same_origin(one: str, other: str) -> bool:
    """Whether two URLs are of one origin (a malformed host is of none)."""
    try:
        return _origin(one) == _origin(other)
    except ValueError:
        return False


def _local(url: str) -> bool:
    """Whether `url`'s connection is to this machine (a malformed host is not)."""
    try:
        return loopback(endpoint(url)[1])
    except ValueError:
        return False


def urlopen(
    request: Any, timeout: float, deadline: Deadline | None = None, name: str | None = None
) -> Any:
    """`urllib.request.urlopen(request)`, a redirect followed only where `redirect_refused`
    finds nothing against it (each hop judged from the URL it left); each wait `timeout`
    seconds at most, and every connection shut when `deadline` passes. The request's
    `Authorization` (an unredirected header) goes along a redirect only to the same origin
    (scheme, host and port), as requests does: never to another host or port. Errors name
    the URL as `name` (`location.shown`'s), else as shown."""
    import http.client
    import urllib.request
    from urllib.parse import urljoin

    def refuse(origin: str, to: str) -> None:
        try:
            why = redirect_refused(origin, to)
        except ValueError:  # urlsplit's: `http://[x/` names no host it can read
            why = "it is no URL"
        if why:
            named = name or shown(request.full_url)
            raise RemoteError(f"{named}: redirect to {said(shown(to))} refused ({why})")

    class Redirects(urllib.request.HTTPRedirectHandler):
        def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
            to = headers.get("location") or headers.get("uri")
            if to:  # judged before urllib's own refusal of a scheme, which echoes it whole
                with contextlib.suppress(ValueError):  # (then said as no URL)
                    to = urljoin(req.full_url, to)
                refuse(req.full_url, to)
            return super().http_error_302(req, fp, code, msg, headers)

        http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

        def redirect_request(self, *args: Any) -> Any:  # (req, fp, code, msg, headers, to)
            refuse(args[0].full_url, args[-1])
            new = super().redirect_request(*args)
            if new is not None:  # urllib copies the proxy's, to a host it may not go through
                new.remove_header("Proxy-authorization")  # (the proxy's handler adds it anew)
            auth = args[0].unredirected_hdrs.get("Authorization")
            if new is not None and auth and _same_origin(args[0].full_url, new.full_url):
                new.add_unredirected_header("Authorization", auth)
            return new

    class Proxies(urllib.request.ProxyHandler):  # the environment's, never for this machine
        def proxy_open(self, req: Any, proxy: str, kind: str) -> Any:
            if _local(req.full_url):
                return None  # plain http:// is taken for this machine only: it stays here
            return super().proxy_open(req, proxy, kind)

    handlers: list[Any] = [Redirects, Proxies]
    if deadline is not None:

        def made(address: Any, wait: float, *rest: Any) -> socket.socket:
            """A connection's socket, watched from its start: its name's lookup (as long as
            the resolver waits, within the deadline: `_addresses`), its connecting and its
            TLS handshake (whose socket this one becomes) wait within the deadline."""
            try:
                found = _addresses(*address[:2], deadline.within(deadline.seconds))
            except UnicodeError as exc:  # a proxy's host no lookup takes (`a..b`): a traceback
                raise OSError(f"no host name a lookup takes: {said(repr(address[0]))}") from exc
            last = OSError(f"no address of {said(repr(address[0]))}")
            for *_, where in found:  # each address in turn, as `socket.create_connection`
                try:
                    sock = socket.create_connection(where[:2], deadline.within(wait), *rest)
                except OSError as exc:
                    last = exc
                    continue
                sock.settimeout(deadline.within(wait))
                deadline.watch(sock)
                return sock
            raise last

        class Watched(http.client.HTTPConnection):  # its socket watched, its answer timed
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._create_connection = made
                self.cut: OSError | None = None  # the store hung up on the request

            def connect(self) -> None:
                super().connect()
                deadline.watch(self.sock)

            def send(self, data: Any) -> None:
                """The request, until the store hangs up on it (then its answer, sent
                before, is read: an upload refused before its body is said as refused)."""
                if self.cut is None:
                    try:
                        super().send(data)
                    except (BrokenPipeError, ConnectionResetError) as exc:
                        self.cut = exc

            def getresponse(self) -> Any:
                if self.cut is None:
                    deadline.answer_awaited()
                try:
                    response = super().getresponse()
                except (OSError, http.client.HTTPException):
                    if self.cut is not None:  # no answer: the hang-up is what is said
                        raise self.cut from None
                    raise
                if self.cut is not None and response.status < 400:  # never taken as done
                    response.close()
                    raise self.cut
                return response

        class Https(Watched, http.client.HTTPSConnection):
            pass

        class HttpHandler(urllib.request.HTTPHandler):
            def http_open(self, req: Any) -> Any:
                return self.do_open(Watched, req)

        class HttpsHandler(urllib.request.HTTPSHandler):
            def https_open(self, req: Any) -> Any:
                return self.do_open(Https, req, context=self._context)

        handlers += [HttpHandler, HttpsHandler]
    return urllib.request.build_opener(*handlers).open(request, timeout=timeout)


def _addresses(host: str, port: int, wait: float) -> list[Any]:
    """`socket.getaddrinfo(host, port)` for a connection, waited for `wait` seconds at most:
    a resolver that does not answer is no socket a `Deadline` can shut (its own wait, 5 s a
    try and server by default, ran past WARM_REMOTE_DEADLINE), so it is asked in a daemon
    thread, given up on after `wait` (`TimeoutError`), left to end with the resolver's wait."""
    found: list[Any] = []

    def look() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except BaseException as exc:  # given to the caller, never a thread's traceback
            found.append(exc)

    thread = threading.Thread(target=look, name="warm-lookup", daemon=True)
    thread.start()
    thread.join(min(wait, 1e8))  # (a deadline beyond any clock: a wait `join` takes)
    if not found:
        raise TimeoutError(f"the name lookup of {said(repr(host))} took over {wait:g} s")
    if isinstance(found[0], BaseException):
        raise found[0].with_traceback(None)
    return found[0]  # type: ignore[no-any-return]


TIMEOUT = 10.0  # seconds before a store that does not answer counts as unreachable


def failed(url: str, code: int, reason: str) -> str:
    """A store's refusal of a download, said; nothing at the URL as never pushed there."""
    if code == 404:
        return f"{url}: no bundle there (HTTP 404 {reason}): none was pushed to it yet (warm push)"
    return f"{url}: HTTP {code} {reason}"
