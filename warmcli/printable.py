"""Text from a bundle (or any other untrusted source), made safe to show on a terminal or log.

A bundle's labels, operations, shapes, candidate names, fingerprints, manifest
values and toolchains are untrusted: an ESC or OSC sequence in one would drive the
reader's terminal (clear it, set its title, plant a hyperlink), a CR or LF would
forge a line of output or of a `WARM_EXPLAIN` log, and a bidi override would show
text other than what is there. `printable` replaces every such character with a
visible escape (`\\x1b`, `\\u202e`), so what is shown is what is stored, on one line.
Rich markup is the renderer's to refuse: the CLI hands Rich `Text`, never markup.
This module owns no state and never prints.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the invisible format characters that reorder or break lines.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """`value` as text on one line, every control or reordering character visibly escaped."""
    return _UNSAFE.sub(_escape, str(value))


def printable_lines(value: object) -> list[str]:
    """`value`'s lines (a compiler log, a multi-line error), each made `printable`."""
    return [printable(line) for line in str(value).splitlines()]
