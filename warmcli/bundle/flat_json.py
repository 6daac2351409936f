"""A kernel row's components as JSON: an object of texts, one nesting a container never parsed.

Warm writes a kernel's components as one flat JSON object of a few texts (its defines and
options are texts of JSON inside it). `json.loads` holds each object and list of a document
as a Python object (~150 bytes for the 3 bytes of `{},`), so a 4 MiB components text of
`[{},{},...]` that a bundle handed over cost every reader of the row ~200 MB while it was
parsed, the serving process too. `loads` parses a text no longer than `FLAT_CHARS` as it is
(its objects cost ~1 MB at most); a longer one only where, its strings left out, it opens no
list and no object but its own and holds at most `MEMBERS` members (else None: no object, so
the row is malformed, named so by its reader). It owns no state but its pattern, compiled
on first use, and never reads a bundle.
"""

from __future__ import annotations

import json

from warmcli.printable import Pattern

FLAT_CHARS = 1 << 14  # a components text no longer is parsed as it is (warm's: under 1 KB)
MEMBERS = 64  # the members a longer one may hold (warm's: 8 at most)
_STRING = Pattern(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes and all


def loads(text: str) -> object:
    """`json.loads(text)`, or None where `text` is longer than `FLAT_CHARS` and not a flat
    object of at most `MEMBERS` members (see the module doc): never parsed then."""
    if len(text) > FLAT_CHARS:
        bare = _STRING.sub("", text)
        if "[" in bare or bare.count("{") > 1 or bare.count(":") > MEMBERS:
            return None
    return json.loads(text)
