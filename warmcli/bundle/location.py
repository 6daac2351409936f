"""Whether a bundle is named by URL rather than by path: what a reader asks of every bundle
it is given, answered without importing the fetching layer (`warmcli.bundle.remote`,
which a bundle named by path never needs). It holds no state, reads nothing and never
fetches."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

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
