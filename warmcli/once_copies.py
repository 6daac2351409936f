"""Which copies of a once-only header gcc reads, as lines of a headers digest.

gcc reads a header marked `#pragma once` (or one `#import`ed) once, and skips a file it reaches
later whose content, size and modification time (in whole seconds) are those of one such file it
has read: two copies of one header (`x/h.h` and `y/h.h`, one text) are read once where their
times are alike and twice where they differ, so what a build computes may follow its files'
times (a header that counts how often it is read). `once_copies` names, for each content the
headers a digest reached (`warmcli.headers`) hold more than once, where gcc may read one once,
which copies share a modification second, by their places among the copies (not their paths):
a build whose copies' times are alike keys apart from one whose differ. No copies (most
kernels): no line, no file read, a key as before. It keeps no state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

_MARKS = (b"once", b"import")  # what may make gcc read a file once: `#pragma once`, `#import`
_MAX_READ = 4 << 20  # the most of a file read for a mark


def once_copies(reached: Mapping[str, str], source: str = "") -> list[str]:
    """For each sha256 more than one file of `reached` (each file's real path and sha256, in the
    order reached) holds, where one of them is marked or the `source` or a reached file imports
    (`_MARKS`: gcc compares an `#import`ed file with every one read before): a line of each
    copy's place among them as the first copy sharing its modification second (`0 0`: alike,
    `0 1`: apart)."""
    copies: dict[str, list[str]] = {}
    for path, digest in reached.items():
        copies.setdefault(digest, []).append(path)
    found = [paths for paths in copies.values() if len(paths) > 1]
    if not found:
        return []
    imports = "import" in source or any(b"import" in _text(path) for path in reached)
    lines = []
    for paths in found:
        if imports or any(mark in _text(paths[0]) for mark in _MARKS):
            seconds = [_second(path) for path in paths]
            lines.append("\0once " + " ".join(str(seconds.index(s)) for s in seconds))
    return lines


def _text(path: str) -> bytes:
    """The first `_MAX_READ` bytes of the file at `path`, b"" where it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(_MAX_READ)
    except OSError:
        return b""


def _second(path: str) -> int | None:
    """The file's modification time in whole seconds, as gcc compares them; None for none."""
    try:
        return int(os.stat(path).st_mtime)
    except (OSError, ValueError):
        return None
