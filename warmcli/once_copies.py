"""Which copies of a once-only header gcc reads, as lines of a headers digest.

gcc reads a header marked `#pragma once` (or one `#import`ed) once, and skips a file it reaches
later whose content, size and modification time (in whole seconds) are those of one such file it
has read: two copies of one header (`x/h.h` and `y/h.h`, one text) are read once where their
times are alike and twice where they differ, so what a build computes may follow its files'
times (a header that counts how often it is read). `once_copies` names, for each content the
headers a digest reached (`warmcli.headers`) hold more than once, where gcc may read one once,
which copies share a modification second, by their places among the copies (not their paths):
a build whose copies' times are alike keys apart from one whose differ. A mark is a real
directive, as the preprocessor reads it (`warmcli.directives`: a comment holds none, a
spliced line does): `#pragma once`, `#import`, or a `_Pragma` that may say `once` (any but
one of a plain literal without it: a macro of another header may give it), never a word
(`important`, `call_once`), which kept the copies' seconds in a key where gcc reads them all.
No copies (most kernels): no line, no file read, a key as before. Its state: a per-process
memo of the marks each file holds, by its path and stat stamp, of files settled (as
`warmcli.headers`' own: `warmcli.stamped`), so a kernel keyed again reads no header again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from warmcli.directives import may_hide, spliced
from warmcli.stamped import Stamp, opened, settled, stamp

# What may make gcc read a file once: `#pragma once`, `#import`, a `_Pragma` that may say
# `once` (all but `_Pragma("...")` of a literal without it), as its directives read.
_DIRECTIVE = re.compile(
    rb"^[ \t]*(?:#|%:|\?\?=)[ \t]*(?:pragma[ \t]+(once)|(import))\b"
    rb'|\b_Pragma\b(?![ \t]*\([ \t]*"(?:(?!\bonce\b)[^"\\\n]|\\.)*"[ \t]*\))',
    re.MULTILINE,
)
_WORDS = (b"once", b"import", b"_Pragma")  # one of them, where no line is spliced: else none
_MAX_READ = 4 << 20  # the most of a file read for a mark
_MAX_MEMO = 4096
_memo: dict[str, tuple[Stamp, tuple[bytes, ...]]] = {}  # path: its stamp, its marks


def once_copies(reached: Mapping[str, str], source: str = "") -> list[str]:
    """For each sha256 more than one file of `reached` (each file's real path and sha256, in the
    order reached) holds, where one of them is marked or the `source` or a reached file imports
    (`_found`: gcc compares an `#import`ed file with every one read before; a `_Pragma` may say
    `once` where a macro of it is used): a line of each
    copy's place among them as the first copy sharing its modification second (`0 0`: alike,
    `0 1`: apart)."""
    copies: dict[str, list[str]] = {}
    for path, digest in reached.items():
        copies.setdefault(digest, []).append(path)
    found = [paths for paths in copies.values() if len(paths) > 1]
    if not found:
        return []
    source_marks = _found(source.encode(errors="surrogatepass"))
    anywhere = (b"import", b"_Pragma")  # of any file read: it may mark another one
    imports = any(m in source_marks or any(m in _marks(p) for p in reached) for m in anywhere)
    lines = []
    for paths in found:
        if imports or b"once" in _marks(paths[0]):
            seconds = [_second(path) for path in paths]
            lines.append("\0once " + " ".join(str(seconds.index(s)) for s in seconds))
    return lines


def _marks(path: str) -> tuple[bytes, ...]:
    """The marks (`_found`) in the first `_MAX_READ` bytes of the file at `path` (memoised once
    it is settled), none where it cannot be read."""
    try:
        known = _memo.get(path)
        if known is not None and known[0] == stamp(os.stat(path)):
            return known[1]
        if (found := opened(path)) is None:  # (a regular file only: a FIFO never waited on)
            return ()
        with found[0] as fh:
            text = fh.read(_MAX_READ)
    except (OSError, ValueError):
        return ()
    marks = _found(text)
    if settled(found[1]):  # else an edit may keep its whole stamp
        if len(_memo) >= _MAX_MEMO:
            _memo.clear()
        _memo[path] = (stamp(found[1]), marks)
    return marks


def _found(text: bytes) -> tuple[bytes, ...]:
    """The marks `text`'s directives hold: `once`, `import`, `_Pragma` (`_DIRECTIVE`)."""
    if b"\\" not in text and b"??/" not in text and not any(w in text for w in _WORDS):
        return ()  # (a comment is a space: it splits no word; a line splice may, `??/`'s too)
    found = _DIRECTIVE.findall(spliced(text) if may_hide(text) else text)
    once, imports = any(o for o, _ in found), any(i for _, i in found)
    pragma = any(not (o or i) for o, i in found)
    return (b"once",) * once + (b"import",) * imports + (b"_Pragma",) * pragma


def _second(path: str) -> int | None:
    """The file's modification time in whole seconds, as gcc compares them; None for none."""
    try:
        return int(os.stat(path).st_mtime)
    except (OSError, ValueError):
        return None
