"""Whether a bundle is named by URL rather than by path: what a reader asks of every bundle
it is given, answered without importing the fetching layer (`warmcli.bundle.remote`,
which a bundle named by path never needs); and whether a path that a whole new file is
renamed over (a merge's OUT, a pull's PATH) names something that is no regular file; and
whether a URL's text can be sent at all (`url_text`). It holds no state, reads no file's
content and never fetches."""

from __future__ import annotations

import os
import stat
from urllib.parse import urlsplit

from warmcli.errors import RemoteError
from warmcli.printable import printable

SCHEMES = ("https", "http", "s3")


def is_url(text: str | os.PathLike[str]) -> bool:
    """Whether `text` names a bundle by URL rather than by path (a text `urlsplit` cannot
    split, such as `https://[x/b.warm`, is no URL: it is read as the path it spells)."""
    if not isinstance(text, str) or "://" not in text:
        return False
    try:
        return urlsplit(text).scheme in SCHEMES
    except ValueError:
        return False


def url_text(url: str) -> str:
    """`url`, where it can be sent: else a `RemoteError` naming it. Text that is no UTF-8
    (a byte a shell hands over undecoded, `$'\\xff'`) never can; an http(s) URL is ASCII,
    its other letters percent-encoded as a browser sends them (S3 keys take any UTF-8)."""
    try:
        url.encode()
    except UnicodeEncodeError:
        raise RemoteError(f"{printable(url)}: the URL is no UTF-8 text") from None
    if not url.isascii() and urlsplit(url).scheme != "s3":
        raise RemoteError(
            f"{url}: an http(s) URL is ASCII: percent-encode its other letters (é is %C3%A9)"
        )
    return url


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
