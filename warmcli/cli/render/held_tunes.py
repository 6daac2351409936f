"""How `warm stats` holds its tunes' table documents (`tune_shown`) until their tables are
shown: a listing sorts every tune before showing any, and one tune's shown candidates
(`LISTED` of them) are 1,000 dicts, 0.6 MB, so 100 such tunes, all of them held as dicts,
took 60 MB (and rendered as one Rich group, 400 MB). `Held` keeps a document's candidates
as deflated JSON text (every value as it was: JSON's text of a float is exact), inflated
when a table shows them, one tune at a time; `briefed` holds a listing's documents whole
while a table of each may show them (at most `TUNE_TABLES` tunes), and once more tunes are
listed (one line each, candidates counted) holds none of their candidates. Pure
presentation over documents; it owns no state beyond what it holds and never prints.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from warmcli.cli.render.stats import TUNE_TABLES

Doc = dict[str, Any]


class Held(Mapping[str, Any]):
    """A tune's table document, its candidates deflated until asked for (as a dict's)."""

    __slots__ = ("_candidates", "_head")

    def __init__(self, doc: Doc) -> None:
        self._head = {k: v for k, v in doc.items() if k != "candidates"}
        text = json.dumps(doc["candidates"], ensure_ascii=True, allow_nan=True)
        self._candidates = zlib.compress(text.encode("ascii"), 1)

    def __getitem__(self, key: str) -> Any:
        if key == "candidates":
            return json.loads(zlib.decompress(self._candidates))
        return self._head[key]

    def __iter__(self) -> Iterator[str]:
        return iter(["candidates", *self._head])

    def __len__(self) -> int:
        return len(self._head) + 1


def briefed(every_candidate: bool) -> Callable[[Doc], Doc | Held]:
    """How a listing holds each tune's document as it reads it: with its candidates
    (deflated, `Held`) where a table of it shows them (`every_candidate`, or while at most
    `TUNE_TABLES` tunes are read), else, once more are read, without any (theirs and every
    one's held before: each's count of them in `more`, as a line of the listing shows it)."""
    whole: list[Doc] = []
    seen = [0]

    def hold(doc: Doc) -> Doc | Held:
        seen[0] += 1
        if every_candidate:
            return Held(doc)
        if seen[0] <= TUNE_TABLES:
            whole.append(doc)  # (at most `TUNE_TABLES`: held as they are)
            return doc
        for d in (*whole, doc):
            d["more"] = d.get("more", 0) + len(d["candidates"])
            d["candidates"] = []
        whole.clear()
        return doc

    return hold
