"""The table every listing is (`warmcli.cli.render.listing`), readable in a narrow terminal.

A Rich table in a terminal narrower than its columns shrinks them until a name is cut
to `x8…` or a column to nothing (`COLUMNS=40 warm stats`). A `Listing` is a Rich table
that, when the terminal cannot give each column its text (a folding column at least
`FOLDED` cells), shows one record after another instead: each non-empty cell on a line
of its own, under its column's name (a cell of a column with no name beside the one
before it, as a count beside its name), folded to the width there is. Names and their
values (those records, a bundle's manifest) are `Pairs`: where a name and its value do
not both fit, the name is cut (`…`), never the value. Each decides at each render, from
the width it is given; it owns only its rows and prints nothing itself. A `stacked` listing
(views side by side: a pass's compilation, autotune and execution counts) shows instead
each view as a list under its name, one after another.
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Column, Table
from rich.text import Text

FOLDED = 12  # the least a folding column may be given before records are shown instead
VALUE = 12  # the least a value is given (its width, if narrower) before names are cut


class Listing(Table):
    """A Rich table that becomes one record after another when it does not fit; one whose
    `stacked` is set (views side by side, as a pass's counts) becomes one list per view."""

    stacked: bool = False

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.rows and self.needed() > options.max_width:
            yield from self.lists() if self.stacked else self.records()
        else:
            yield from super().__rich_console__(console, options)

    def needed(self) -> int:
        """The width this table needs to show every no-wrap cell whole and every other
        column at least `FOLDED` cells wide (or its widest text, if narrower)."""
        _, right, _, left = self.padding
        widths = [_widest(c) if c.no_wrap else min(_widest(c), FOLDED) for c in self.columns]
        pads = (left + right) * len(widths) - (0 if self.pad_edge else left + right)
        # A box's edges and column separators take a cell each, blank ones too (as Rich counts).
        lines = (2 if self.show_edge else 0) + len(widths) - 1 if self.box is not None else 0
        return sum(widths) + pads + lines

    def records(self) -> Iterator[Table | Text]:
        """The rows as records: its title, then each cell under its column's name (a
        blank line around them, where the table has its edges)."""
        if self.title is not None:
            yield self.title if isinstance(self.title, Text) else Text(self.title)
        yield Text()
        grid = pairs(name_style="bold")
        cells = [list(c.cells) for c in self.columns]
        for i, row in enumerate(self.rows):
            if i:
                grid.add_row("", "")
            shown: list[tuple[str, Text]] = []
            for column, values in zip(self.columns, cells, strict=True):
                value, header = values[i], str(column.header)
                if not _text(value):
                    continue
                cell = value if isinstance(value, Text) else Text(str(value))
                if not header and shown:  # a column with no name goes on with the one before
                    shown[-1] = (shown[-1][0], Text.assemble(shown[-1][1], "  ", cell))
                else:
                    shown.append((header, cell))
            for header, cell in shown:
                grid.add_row(Text(header), cell, style=row.style)
        yield grid
        yield Text()

    def lists(self) -> Iterator[Table | Text]:
        """The columns as lists: its title, then each named column (a view) under its name,
        its rows' cells a line each, beside them those of the unnamed columns after it."""
        if self.title is not None:
            yield self.title if isinstance(self.title, Text) else Text(self.title)
        groups: list[list[Column]] = []
        for column in self.columns:
            if str(column.header) or not groups:
                groups.append([column])
            else:
                groups[-1].append(column)
        for group in groups:
            yield Text()
            yield Text(str(group[0].header), style="bold")
            grid = pairs()
            for row in zip(*(list(c.cells) for c in group), strict=True):
                shown = [_text(cell) for cell in row]
                if any(shown):
                    grid.add_row(shown[0], "  ".join(shown[1:]))
            yield grid
        yield Text()


class Pairs(Table):
    """A grid of names and their values (`pairs`). Where a name and its value do not both
    fit, the names are cut (`…`) so that the values keep `VALUE` cells (at least half the
    width): a value is never squeezed to nothing by the names beside it; values all narrower
    than that are kept whole, the names cut to a letter and `…` at the least (`se…  0.000 s`
    at 12 columns)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        names, values = self.columns
        _, right, _, left = self.padding
        room = options.max_width - (max(left, right) if self.collapse_padding else left + right)
        need = min(_widest(values), VALUE)
        widest = _widest(names)
        names.max_width = None
        if widest + need > room:
            whole = room - need if need < VALUE else max(room - need, room // 2)
            names.max_width = max(2, min(widest, whole))  # (a letter and `…`, at the least)
        yield from super().__rich_console__(console, options)


def pairs(name_style: str = "") -> Pairs:
    """Names and their values, a row each: a name is cut (`…`) before its value is."""
    grid = Pairs.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, overflow="ellipsis", style=name_style)
    grid.add_column(overflow="fold")
    return grid


def _widest(column: Column) -> int:
    """The widest line of a column's header and cells, in terminal cells."""
    texts = [_text(column.header), *map(_text, column.cells)]
    return max(cell_len(ln) for text in texts for ln in text.splitlines() or [""])


def _text(value: object) -> str:
    return value.plain if isinstance(value, Text) else str(value)
