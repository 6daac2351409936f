"""`warm stats --json`'s document written as it is read: `stream_json`.

A document whose values may be iterators (a large bundle's kernels and tunes) is
written an item a line, as each is read, so a listing of any length costs the memory
of one item; tunes that are JSON text already (`JsonText`, a range's bytes) are written
as they are, and one held `Deflated` (`held`: a long line, read before it is written)
inflated as it is written; a line holding a lone surrogate's escape (a candidate's name
packed as its bytes, `surrogatepass`) is written with it as the text `\\ud800` (`_strict`:
what strict JSON readers take). An error met meanwhile (a corrupt row, Ctrl-C) closes the
open list and leaves the document open, and the error's keys (`fail`, through `emit_json`) end
it: stdout holds one JSON object whatever happens. Its state is `_Emitted`'s flag (in
`warmcli.cli.common`); it prints only the document it is handed.
"""

from __future__ import annotations

import codecs
import json
import sys
import zlib
from collections.abc import Iterator
from typing import Any

from warmcli.cli.common import _Emitted, json_text
from warmcli.cli.output import writing_output
from warmcli.cli.render.tune_line import LINES_APART, JsonText
from warmcli.printable import spelled_surrogates

HELD_WHOLE = 1 << 16  # characters of a line held as it is until written (`held`)


class Deflated(bytes):
    """A line of JSON text, encoded and deflated, until `stream_json` writes it."""

    __slots__ = ()


def held(text: JsonText) -> JsonText | Deflated:
    """`text`, as a listing holds it until it is written: deflated where long (a tune of
    500,000 samples is a line of 2.5 MB, from 7 KB of a bundle: 300 such held 937 MB)."""
    return text if len(text) <= HELD_WHOLE else Deflated(zlib.compress(text.encode(), 1))


def stream_json(doc: dict[str, Any]) -> None:
    """`emit_json` of a document whose values may be iterators: each of their items is
    written as it is read, on one line of its own (JSON's C encoder: several times faster
    than an indented one; a `JsonText` item, or bytes, are JSON already and written as they
    are). An error met meanwhile closes its list: the error's keys end the document. stdout
    refusing it is an `OutputError` (`warmcli.cli.output`)."""
    with writing_output():
        _stream(doc)


def _stream(doc: dict[str, Any]) -> None:
    write, listing = sys.stdout.write, False
    write("{")
    try:
        for i, (key, value) in enumerate(doc.items()):
            write(f"{',' if i else ''}\n  {json.dumps(key)}: ")
            if not isinstance(value, Iterator):
                write(_indented(value, 1))
                continue
            write("[")
            empty = listing = True
            for batch in _batches(value):  # a batch at a time: few calls, little memory
                if type(batch) is bytes:  # JSON text encoded (a range's tunes): as it is
                    write(f"{',' if not empty else ''}\n    ")
                    _write_encoded(batch)
                else:
                    write(("," if not empty else "") + ",".join(map(_line, batch)))
                empty = False
            write("]" if empty else "\n  ]")
            listing = False
    except BaseException:  # cut short (a corrupt row, Ctrl-C): `emit_json` ends it
        write("]" if listing else "")
        _Emitted.cut = True
        raise
    write("\n}\n")


_encode = json.JSONEncoder(default=str).encode  # one encoder: `json.dumps` makes one a call


def _line(item: Any) -> str:
    text = item if isinstance(item, JsonText) else _encode(item)
    return "\n    " + (text if "\\ud" not in text else _strict(text))


def _strict(text: str) -> str:
    """JSON text of items (joined as `LINES_APART` joins them), each lone surrogate in it
    written as the text `\\ud800` (`spelled_surrogates`): looked for only where the text
    holds an escape that may be one (a line as it is, else read back and encoded again)."""
    if "\\ud" not in text:
        return text
    items = json.loads(f"[{text}]")
    return LINES_APART.join(_encode(spelled_surrogates(item)) for item in items)


def _write_encoded(data: bytes) -> None:
    """JSON text encoded in UTF-8 to stdout: to its bytes, where it writes UTF-8."""
    if b"\\ud" in data:  # (a lone surrogate's escape, maybe: `_strict`)
        data = _strict(data.decode()).encode()
    stdout = sys.stdout
    raw = getattr(stdout, "buffer", None)
    if raw is None or codecs.lookup(stdout.encoding or "ascii").name != "utf-8":
        stdout.write(data.decode())
        return
    stdout.flush()
    view = memoryview(data)
    while view:  # an unbuffered stdout (python -u) may take part of it at a time
        view = view[raw.write(view) :]


def _batches(items: Iterator[Any], size: int = 256) -> Iterator[list[Any] | bytes]:
    """`size` items at a time; a long `JsonText` alone, and bytes (a range's tunes encoded:
    `tune_bytes`, or a `Deflated` line inflated) on their own."""
    batch: list[Any] = []
    for item in items:
        if type(item) is Deflated:
            item = zlib.decompress(item)
        if type(item) is bytes:
            if batch:
                yield batch
                batch = []
            yield item
            continue
        batch.append(item)
        if len(batch) == size or (type(item) is JsonText and len(item) > 1 << 16):
            yield batch
            batch = []
    if batch:
        yield batch


def _indented(value: Any, depth: int) -> str:
    return json_text(value).replace("\n", "\n" + "  " * depth)
