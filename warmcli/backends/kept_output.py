"""What warm keeps of a compiler's output (a child's pipe, NVRTC's log): its first
`HEAD_BYTES` and its last `TAIL_BYTES`, cut at line breaks near the bounds (else between
characters), with one line between saying how many lines and bytes were left out.

A compiler that prints without end (a million lines of one error, a wrapper's loop) costs
warm no more memory or time than one that prints a page: `Kept` is fed the output as it is
read and holds at most its head and a tail it trims as it goes, so the pipe is drained
without being held; `kept_text` bounds a log already in memory the same way. The first
errors, which a user reads first, are always there. Owns no state beyond each `Kept`;
never reads a pipe, starts a process or prints.
"""

from __future__ import annotations

import codecs

HEAD_BYTES = 32 << 10  # a compiler's first errors: what a user needs
TAIL_BYTES = 8 << 10  # its last lines: a summary (`N errors generated`), a linker's verdict
NEAR_BYTES = 4 << 10  # how far from a cut a line break moves it (a whole line kept or left)
# A probe's answer, parsed whole (`cc -print-search-dirs`: its `programs` line alone is
# hundreds of kB under a long `COMPILER_PATH`, each entry listed twice over): never cut.
PROBE_BYTES = 4 << 20


class Kept:
    """The bounded part of one stream's bytes, fed to `add` as they are read."""

    def __init__(self, head_bytes: int = HEAD_BYTES) -> None:
        self.head_bytes = head_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0  # every byte fed
        self.lines = 0  # every line break fed

    def add(self, data: bytes) -> None:
        """Feed the next bytes read; beyond the head only the last `TAIL_BYTES` are kept."""
        self.size += len(data)
        self.lines += data.count(b"\n")
        room = self.head_bytes - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > 2 * TAIL_BYTES:  # trimmed now and then, not on every read
            del self.tail[: len(self.tail) - TAIL_BYTES]

    @property
    def cut(self) -> bool:
        """Whether `text` leaves something out."""
        return len(self.head) + min(len(self.tail), TAIL_BYTES) < self.size

    def text(self, encoding: str = "utf-8") -> str:
        """What was fed, decoded (undecodable bytes replaced, line breaks made `\\n`), its
        middle left out past the bounds."""
        head, tail = bytes(self.head), bytes(self.tail[-TAIL_BYTES:])
        if not self.cut:
            return _decoded(head + tail, encoding)
        # Whole lines where a line ends near the cut; else (a log of few, long lines: C++'s
        # template errors, or no line break at all) as much as the bound holds, never part
        # of a UTF-8 character (which would read as U+FFFD).
        utf8 = codecs.lookup(encoding).name == "utf-8"
        end = head.rfind(b"\n", max(0, len(head) - NEAR_BYTES)) + 1
        head = head[: end or (_utf8_end(head) if utf8 else len(head))]
        start = tail.find(b"\n", 0, min(NEAR_BYTES, len(tail) - 1)) + 1
        tail = tail[start or (_utf8_start(tail) if utf8 else 0) :]
        left = self.size - len(head) - len(tail)
        lines = self.lines - head.count(b"\n") - tail.count(b"\n")
        return _decoded(head, encoding) + left_out(lines, left) + _decoded(tail, encoding)


def _utf8_end(data: bytes) -> int:
    """The length of `data` less a UTF-8 character cut short at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # ASCII, or the first byte of a character
            need = 1 if byte < 0xC0 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if need > back else len(data)
    return len(data)


def _utf8_start(data: bytes) -> int:
    """Where `data`'s first whole UTF-8 character starts: past the rest of one cut."""
    start = 0
    while start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    return start


def left_out(lines: int, size: int) -> str:
    """The line standing for what was left out of an output."""
    what = f"{lines:,} lines, {size:,} bytes" if lines else f"{size:,} bytes"
    return f"\n[... warm left out {what} of this output here ...]\n"


def kept_text(text: str) -> str:
    """`text` (a log already read whole: NVRTC's) bounded as `Kept` bounds a stream."""
    if len(text) <= HEAD_BYTES + TAIL_BYTES:  # (characters: a byte or more each)
        return text
    kept = Kept()
    kept.add(text.encode(errors="replace"))
    return kept.text()


def _decoded(data: bytes, encoding: str) -> str:
    """Bytes as text mode reads a pipe: line breaks (`\\r\\n`, `\\r`) made `\\n`."""
    return data.decode(encoding, errors="replace").replace("\r\n", "\n").replace("\r", "\n")
