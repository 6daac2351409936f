"""JSON a bundle holds, parsed only where it opens few lists and objects: a row's memory bound.

`json.loads` holds each object and list of a document as a Python object (~150 bytes for the 3
bytes of `{},`), so a 4 MiB text of `[{},{},...]` that a bundle handed over cost every reader of
its row ~200 MB while it was parsed, the serving process too. Warm writes a kernel's components as
one flat JSON object of a few texts (its defines and options are texts of JSON inside it): `loads`
parses a components text no longer than `FLAT_CHARS` as it is (its objects cost ~1 MB at most), a
longer one only where, its strings left out, it opens no list and no object but its own and holds
at most `MEMBERS` members (else None: no object, so the row is malformed, named so by its reader);
a fingerprint's data, a flat object as warm writes it, is read only where `flat` (1,024 of 16 KiB
each, `{"a":[{},...]}`, held 435 MB). A format-1 tune's candidates
(`warmcli.bundle.candidates.decode`) open two a candidate, each candidate over 70 characters:
`dense` says where a long text opens more than one a `PER_CONTAINER` characters. It owns no state
but its pattern, compiled on first use, and never reads a bundle.
"""

from __future__ import annotations

import json
import re

from warmcli.printable import Pattern

FLAT_CHARS = 1 << 14  # a components text no longer is parsed as it is (warm's: under 1 KB)
MEMBERS = 64  # the members a longer one may hold (warm's: 8 at most)
# a JSON string, escapes and all; one never closed runs to the end (one scan: a failed match
# tried again from each later quote took minutes over `"\\"\\...`, 4 MiB of it)
_STRING = Pattern(r'"[^"\\]*(?:\\.?[^"\\]*)*(?:"|\Z)', re.DOTALL)


PER_CONTAINER = 32  # the characters a long text holds a list or object it opens (warm's: 35+)


def _bare(text: str) -> str:
    """`text` with its JSON strings left out: what opens its lists and objects."""
    return _STRING.sub("", text)


def dense(text: str) -> bool:
    """Whether `text`, longer than `FLAT_CHARS`, opens more than one list or object a
    `PER_CONTAINER` characters outside its strings (never parsed then)."""
    if len(text) <= FLAT_CHARS:
        return False
    bare = _bare(text)
    return bare.count("[") + bare.count("{") > len(text) // PER_CONTAINER + 1


def flat(text: str) -> bool:
    """Whether `text`, its strings left out, opens no list and no object but one of its own,
    of at most `MEMBERS` members (a fingerprint's and a long components text's form)."""
    bare = _bare(text)
    return "[" not in bare and bare.count("{") <= 1 and bare.count(":") <= MEMBERS


def loads(text: str) -> object:
    """`json.loads(text)`, or None where `text` is longer than `FLAT_CHARS` and not `flat`
    (see the module doc): never parsed then."""
    return json.loads(text) if len(text) <= FLAT_CHARS or flat(text) else None
