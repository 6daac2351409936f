"""How reports look: Rich tables and JSON documents built from the library's reports.

Pure presentation: every function takes a report or a bundle's records and
returns a Rich renderable or a JSON-ready dict. Every string shown goes through
`line` (or `add_row`): a Rich `Text`, never markup, with control characters escaped
(`warmcli.printable`), since a bundle's text is untrusted. Nothing here runs a pass, opens a
device or writes a file; the CLI decides where the output goes. This module holds the
pieces every view shares (`listing`, `line`, `add_row`, `when`); the views are
`run` (a run's passes), `stats` (a bundle's contents, whole or summarised) and `ops`
(verify, merge, diff, clean). It owns no state. Rich is imported when a view is first
built, not with this module: a JSON document needs none of it.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from warmcli.printable import CUT_CHARS, cut, printable

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text


def listing(title: str | None = None, *, stacked: bool = False) -> Table:
    """The table every listing uses: a title on the left, a rule under the header; in a
    terminal too narrow for its columns, one record after another (`narrow.Listing`), or,
    `stacked`, one list per named column (views side by side, as a pass's counts)."""
    from rich import box

    from warmcli.cli.render.narrow import Listing

    shown = None if title is None else line(title)
    table = Listing(title=shown, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.stacked = stacked
    return table


def line(text: object, style: str = "") -> Text:
    """`text` shown as it is: no markup, every control character visibly escaped."""
    from rich.text import Text

    return Text(printable(text), style=style)


CELL_CHARS = CUT_CHARS  # a table cell shows this much of a text (a label may be 4M long)


def cell(value: object) -> str:
    """`value` as a table shows it: a text over `CELL_CHARS` cut, saying its length (its
    whole is in the JSON document)."""
    return cut(value, CELL_CHARS)


def add_row(table: Table, *cells: object, style: str | None = None) -> None:
    """A table row of `line`s, each `cell` long at most."""
    table.add_row(*(line(cell(c)) for c in cells), style=style)


def when(stamp: str | float | None, timespec: str = "seconds") -> str:
    """`stamp` (seconds since the epoch) as a local date and time; as it is stored where it
    is no time or past any date (a bundle's times are untrusted: 1e300, inf, -1e18)."""
    try:
        return datetime.datetime.fromtimestamp(float(stamp or "")).isoformat(timespec=timespec)
    except (ValueError, OverflowError, OSError):
        return str(stamp)


def compiler_line(info: dict[str, str]) -> str:
    """One device's compiler as `warm devices` and `warm run --verbose` show it (inert: a
    compiler's version line is text warm did not write)."""
    if info["compiler"] == "none":
        return printable(f"compiler: {info['device']}: none ({info['why']})")
    return printable(
        f"compiler: {info['device']}: {info['compiler']} {info['path']} "
        f"({info['version']}): {info['why']}"
    )
