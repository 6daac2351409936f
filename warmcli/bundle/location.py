"""Whether a bundle is named by URL rather than by path: what a reader asks of every bundle
it is given, answered without importing the fetching layer (`warmcli.bundle.remote`,
which a bundle named by path never needs); and whether a path that a whole new file is
renamed over (a merge's OUT, a pull's PATH) names something that is no regular file; and
whether a URL's text can be sent at all (`url_text`: its port a number from 1 to 65535, an
http(s) one naming a host, holding no space or control character, an `s3://` one no
credentials, nor a password holding `/`, `?` or `#` unencoded); `url_parts` splits one as
`urlsplit` does, dropping nothing. `shown` is how every place that shows a bundle's location
shows a URL (`withheld`: each one a message names, in a path's spelling too, a folder of it named
alone, an option's `--bundle=URL` too): its password
or token and its query (a presigned signature, `?token=`) withheld (a password cut short by a
`/`, `?` or `#` too); `kept_as` is the URL a kept copy is known
by (neither credentials nor a query's signing fields: a new signature of the same object is
the same copy). `endpoint` is the one reading of an http(s) URL's scheme, host and port
that every check of one makes (this machine's? the same origin? past the proxy?): the host
`http.client` connects to, a host holding a bracket other than around an IPv6 address alone
refused, as is one no lookup takes (`a..b`, a label over 63 characters, one not ASCII once
percent-decoded). It holds no state, reads no file's content and never fetches."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from warmcli.errors import RemoteError
from warmcli.printable import cut, printable

SCHEMES = ("https", "http", "s3")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")  # (`Path` makes `file:///x` `file:/x`)


def is_url(text: str | os.PathLike[str]) -> bool:
    """Whether `text` names a bundle by URL rather than by path (a text `urlsplit` cannot
    split, such as `https://[x/b.warm`, is no URL: it is read as the path it spells)."""
    if not isinstance(text, str) or "://" not in text:
        return False
    try:
        return urlsplit(text).scheme in SCHEMES
    except ValueError:
        return False


def unread_scheme(path: str) -> str:
    """For a bundle `path` that is not there: where it starts as a URL of a scheme warm does
    not read (`file://`, `ftp://`, `gs://`: read as a relative path), the words saying so."""
    found = _SCHEME.match(path)
    if found is None or found[1].lower() in SCHEMES:
        return ""
    return (f" ({found[1]}:// is no URL warm reads, only https://, http:// to this machine and "
            "s3://: it was read as a relative path; name a local bundle by its path)")  # fmt: skip


def url_text(url: str) -> str:
    """`url`, where it can be sent: else a `RemoteError` naming it. Text that is no UTF-8
    (a byte a shell hands over undecoded, `$'\\xff'`) never can; an http(s) URL is ASCII,
    its other letters percent-encoded as a browser sends them (S3 keys take any UTF-8)."""
    try:
        url.encode()
    except UnicodeEncodeError:
        raise RemoteError(f"{printable(shown(url))}: the URL is no UTF-8 text") from None
    parts = urlsplit(url)
    if not url.isascii() and parts.scheme != "s3":
        raise RemoteError(
            f"{shown(url)}: an http(s) URL is ASCII: percent-encode its other letters (é is %C3%A9)"
        )
    if parts.scheme != "s3" and any(c <= " " or c == "\x7f" for c in url):  # (never sent)
        raise RemoteError(
            f"{printable(shown(url))}: an http(s) URL holds no space or control character: "
            "percent-encode it (a space is %20)"
        )
    head, netloc = url_parts(url)[:2]
    if _cut_password(netloc, url[len(head) + len(netloc) :]):
        raise RemoteError(
            f"{printable(shown(url))}: its password holds a /, ? or # as it is: percent-encode "
            "it (/ is %2F, ? is %3F, # is %23)"
        )
    _, at, host = parts.netloc.rpartition("@")
    _, colon, port = host.rpartition("]")[2].rpartition(":")  # after an IPv6 address's ]
    if colon and port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise RemoteError(f"{shown(url)}: its port {port!r} is no number from 1 to 65535")
    if parts.scheme == "s3" and at:
        raise RemoteError(
            f"{shown(url)}: an s3:// URL names no credentials: they come from the AWS "
            "variables (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)"
        )
    if parts.scheme != "s3" and not (host.rpartition(":")[0] if colon else host):
        raise RemoteError(f"{shown(url)}: names no host (https://host/path.warm)")
    if parts.scheme != "s3":
        try:
            endpoint(url)
        except ValueError as exc:
            raise RemoteError(f"{printable(shown(url))}: {exc}") from None
    return url


def endpoint(url: str) -> tuple[str, str, int]:
    """`url`'s scheme, and the host and port `http.client` connects to for it (credentials cut
    at the last `@`, percent-decoded as `urllib.request.Request` reads it, lower-cased; a
    `[...]`'s brackets taken off; the scheme's port where none is named): what every check of
    an http(s) URL's host reads. A `ValueError` (one line) where the host holds a bracket other
    than around an IPv6 address alone (`[::1]x.example`, `x[::1]`, `[::1]]`, `[v1.x]`):
    `urlsplit` reads those as `::1`, while the name `[::1]x.example` is looked up as it is; and
    where it is a name no lookup takes (`_looked_up`)."""
    import ipaddress

    parts = urlsplit(url)
    host, port = unquote(parts.netloc.rpartition("@")[2]).lower(), ""
    if host.rfind(":") > host.rfind("]"):
        host, _, port = host.rpartition(":")
    if "[" in host or "]" in host:
        inner = host[1:-1]
        malformed = f"its host {printable(repr(cut(host, 80)))} is malformed"
        if host[:1] != "[" or host[-1:] != "]" or "[" in inner or "]" in inner:
            raise ValueError(f"{malformed}: brackets hold an IPv6 address alone ([::1])")
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"{malformed}: what brackets hold is no IPv6 address") from None
        host = inner
    elif not _looked_up(host):  # (getaddrinfo's idna, and the latin-1 Host header: a traceback)
        raise ValueError(
            f"its host {printable(repr(cut(host, 80)))} is no name a lookup takes (ASCII, an "
            "internationalized one in its xn-- form, each label 1 to 63 characters)"
        )
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"its port {printable(repr(cut(port, 20)))} is no number from 1 to 65535")
    default = {"https": 443, "http": 80}.get(parts.scheme, 0)
    return parts.scheme, host, int(port) if port else default


def _looked_up(host: str) -> bool:
    """Whether `host` (percent-decoded) is a name `socket.getaddrinfo` and the `Host` header
    take: ASCII (`€.example`, from `%E2%82%AC`, fails latin-1), each label 1 to 63
    characters (the idna codec's: `a..b`, `%C2%AD` raised `UnicodeError` out of urlopen)."""
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return host.isascii()


def shown(location: str | os.PathLike[str]) -> str:
    """`location` as it may be shown (an error, a warning, a report, `--json`, a note kept
    beside a copy): a URL's password as `user:***@`, a token alone as `***@`, and its
    query (a presigned URL's signature, `?token=...`) as `?***`, a URL with a slash too many
    (`https:///u:pass@host/`) as the one without; anything else as it is."""
    text = os.fspath(location)
    if not isinstance(text, str) or "://" not in text:
        return str(text)
    try:
        if not urlsplit(text).scheme:
            return text
    except ValueError:  # `http://[x/?sig=`, a store's redirect: withheld all the same
        if not text.partition("://")[0].isalpha():
            return text
    scheme, _, after = text.partition("://")
    if after.startswith("/"):  # `https:///u:pass@host/`: read as no host, a path naming it
        extra = len(after) - len(after.lstrip("/"))
        return f"{scheme}://{'/' * extra}{shown(f'{scheme}://{after[extra:]}')[len(scheme) + 3 :]}"
    head, netloc, path, query, fragment = url_parts(text)
    rest = text[len(head) + len(netloc) :]
    if _cut_password(netloc, rest):  # `u:***@` and what follows the `@` that ends it
        return shown(f"{head}{netloc.partition(':')[0]}:***@{rest.partition('@')[2]}")
    userinfo, at, host = netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if at:
        netloc = (f"{user}:***@" if colon else "***@" if user else "@") + host
    if query:
        query = "***"
    tail = ("" if query is None else "?" + query) + ("" if fragment is None else "#" + fragment)
    return f"{head}{netloc}{path}{tail}"


def withheld(message: str, texts: Iterable[str | None]) -> str:
    """`message` with each of `texts` (a command's arguments; an option's value spelled
    `--bundle=URL` or `-bURL` too) that is a URL showing a secret written as `shown` writes
    it, as given and as a path spells it (`https:/u:p@[::1/b.warm`: a text no URL splits is
    read as a path, and `Path` drops a `/`; so is one written with a slash too few,
    `_one_slash`), and each of that path's folders named alone (`no directory https: (...,
    u:***@host)`: `_folders`)."""
    for text in texts:
        for given in _values(text or ""):
            if (hidden := shown(given) if "://" in given else _one_slash(given)) == given:
                continue
            for spelling in dict.fromkeys((given, os.path.normpath(given))):
                message = _folders(message.replace(spelling, hidden), spelling)
    return message


def _values(text: str) -> tuple[str, ...]:
    """`text`, and where it is an option given its value in one word, that value."""
    if text.startswith("--") and "=" in text:
        return text, text.partition("=")[2]
    return (text, text[2:]) if text[:1] == "-" and text[1:2] not in ("", "-") else (text,)


def _folders(message: str, spelling: str) -> str:
    """`message` with each folder of the path `spelling` that holds a URL's secret (its
    credentials, read as a folder's name; a password cut by `/`, its words; a query), named
    as a word of its own, written as `_one_slash` writes it."""
    words, hidden = spelling.split("/"), _one_slash(spelling).split("/")
    if len(words) == len(hidden):
        pairs = [(word, said) for word, said in zip(words, hidden, strict=True) if word != said]
    else:  # a password cut by `/`: the words from the scheme's to the one its `@` ends
        end = next((i for i, word in enumerate(words) if i and "@" in word), 0)
        cut = words[1 : end + 1]
        pairs = [(word, "***") for word in cut[1:-1]]
        pairs += [(words[-1], hidden[-1])] if 0 < end < len(words) - 1 else []  # (a query)
        if cut:
            pairs += [(cut[0], f"{cut[0].partition(':')[0]}:***")]
            pairs += [(cut[-1], f"***@{cut[-1].rpartition('@')[2]}")]
    for word, said in pairs:
        bounded = rf"(?<![^\s/(,'\"=]){re.escape(word)}(?![^\s/),'\":;])"
        message = re.sub(bounded, lambda _, said=said: said, message) if word else message
    return message


def _one_slash(text: str) -> str:
    """A URL written with one slash (`https:/u:pass@host/b.warm`, read as a path) as `shown`
    writes the URL it meant (`https:/u:***@host/b.warm`); any other text as it is."""
    scheme, colon, rest = text.partition(":")
    if not colon or scheme.lower() not in SCHEMES or not rest.startswith("/") or rest[1:2] == "/":
        return text
    meant = shown(f"{scheme}:/{rest}")  # `scheme://...`
    return f"{scheme}:/{meant[len(scheme) + 3 :]}"


def _cut_password(netloc: str, rest: str) -> bool:
    """Whether a URL's netloc ends inside a password holding `/`, `?` or `#` unencoded
    (`https://u:pa/ss@host/`: its netloc `u:pa`, no `@` in it, its port no number or none, an
    `@` in what follows it, `rest`): what follows its `:` is never shown, nor its port."""
    _, colon, port = netloc.rpartition("]")[2].partition(":")  # (after an IPv6 address's ])
    return "@" not in netloc and bool(colon) and not port.isdigit() and "@" in rest


# A query's signing fields (S3's and GCS's presigned URLs, their legacy forms, CloudFront's,
# Azure's SAS, a bearer token): signed anew, the same object; any other field names another.
# A legacy or SAS field (`Expires`, `sp`, `st`...) is one only beside the field that signs
# it (`Signature`, `sig`): else, as `?sp=a.warm`, it may name another object.
_SIGNED_BY = {
    "signature": {"awsaccesskeyid", "expires", "policy", "key-pair-id", "googleaccessid"},
    "sig": {"se", "st", "sp", "sv", "sr", "ss", "srt", "spr", "si", "sip", "skoid", "sktid"}
    | {"skt", "ske", "sks", "skv", "sdd", "ses"},
}
_TOKENS = frozenset({"token", "access_token"})


def kept_as(url: str) -> str:
    """What a URL's kept copy is known by: the URL without its credentials and its query's
    signing fields (`X-Amz-*`, `X-Goog-*`, a `token`, and `_SIGNED_BY`'s where the field
    that signs them is there: a presigned URL signed anew is the same object), the other
    fields kept, in their order (`?versionId=2`, `?name=a.warm` name other objects);
    itself where it has neither."""
    head, netloc, path, query, fragment = url_parts(url)
    if not query and "@" not in netloc:
        return url
    fields = [f for f in (query or "").split("&") if f]
    names = {_name(f) for f in fields}
    signing = _TOKENS.union(*(_SIGNED_BY[s] | {s} for s in _SIGNED_BY if s in names))
    kept = [f for f in fields if not _signing(_name(f), signing)]
    return (
        f"{head}{netloc.rpartition('@')[2]}{path}"
        + ("?" + "&".join(kept) if kept else "")
        + ("" if fragment is None else "#" + fragment)
    )


def _name(field: str) -> str:
    """A query's `name=value` field's name, as compared: decoded, in lower case."""
    return unquote(field.partition("=")[0]).lower()


def _signing(name: str, signing: frozenset[str]) -> bool:
    """Whether a query's field `name` is one a new signature changes."""
    return name in signing or name.startswith(("x-amz-", "x-goog-"))


def url_parts(url: str) -> tuple[str, str, str, str | None, str | None]:
    """`url` (holding `://`) split as `urlsplit` splits it, but nothing removed (it drops a
    tab or a newline): what precedes its netloc (`https://`), the netloc, the path, and the
    query and the fragment (None where there is none)."""
    start = url.index("://") + 3
    rest = url[start:]
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    before, hashed, fragment = rest[end:].partition("#")
    path, asked, query = before.partition("?")
    return url[:start], rest[:end], path, query if asked else None, fragment if hashed else None


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """Why a bundle may not be written over `path` (followed through links): `"a FIFO"`,
    `"a character device"`... where it exists and is neither a regular file nor a folder;
    None otherwise (nothing there, a regular file, a folder: each said by its caller)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((kind for test, kind in _KINDS if test(mode)), None)
