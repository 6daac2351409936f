"""The `warm` command's two Rich consoles, `out` (stdout) and `err` (stderr), each made on
first use (a command that prints only JSON, or nothing, never imports Rich), with no markup
and no emoji codes (a bundle's text is shown as it is), as wide as `COLUMNS` or the terminal
(`NARROWEST` at least), off a terminal not wrapped (`UNWRAPPED`). A print cut short by
Ctrl-C never leaves its console holding every later line (`_Made.print`). Owns the two
consoles; writes only what it is given.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warmcli import config
from warmcli.cli.output import TrimmedStdout

if TYPE_CHECKING:
    from rich.console import Console

UNWRAPPED = 1 << 16  # columns off a terminal without COLUMNS: a row is one line, however long
NARROWEST = 10  # the least width printed to: a narrower COLUMNS or terminal prints as this wide


def _columns() -> int | None:
    """`COLUMNS` when it is a positive number (`NARROWEST` at least); None when unset, 0
    or no number (then the output is as wide as when it is unset)."""
    try:
        columns = int(config.columns() or "")
    except ValueError:
        return None
    return max(columns, NARROWEST) if columns > 0 else None


def _at_least_narrowest(console: Console) -> Console:
    """`console`, made `NARROWEST` wide at least: Rich takes `COLUMNS=0` for a width of
    nothing (and prints nothing), and a terminal may be narrower."""
    if console.width < NARROWEST:
        console.width = max(_columns() or shutil.get_terminal_size().columns, NARROWEST)
    return console


def _stdout_console() -> Console:
    """On a terminal, Rich's own console (it measures the terminal). Off one (a pipe, a CI
    log), nothing wraps: the width is `COLUMNS` when a number (`_columns`), else any row's."""
    from rich.console import Console

    plain = {"markup": False, "emoji": False, "_environ": config.rich_environment()}
    if sys.stdout.isatty():  # (the progress bars' Live redirects sys.stdout into this console)
        return _at_least_narrowest(Console(**plain))
    return Console(file=TrimmedStdout(), width=_columns() or UNWRAPPED, **plain)  # type: ignore[arg-type]


def _stderr_console() -> Console:
    """Rich's console on stderr; stderr's reader gone, it goes quiet (Rich's own answer
    points stdout at /dev/null and exits 1: a command's JSON and its exit code were lost)."""
    from rich.console import Console

    plain = {"markup": False, "emoji": False, "_environ": config.rich_environment()}
    console = Console(stderr=True, soft_wrap=True, **plain)  # type: ignore[arg-type]
    console.on_broken_pipe = lambda: setattr(console, "quiet", True)  # type: ignore[method-assign]
    return _at_least_narrowest(console)


class _Made:
    """A Rich console made when first used: a command that prints only JSON (or nothing)
    never imports Rich. Every attribute is the console's, and so is `with` (Rich's `Live`
    holds its console's lock so)."""

    def __init__(self, make: Callable[[], Console]) -> None:
        self._make = make
        self._console: Console | None = None

    def made(self) -> Console:
        if self._console is None:
            self._console = self._make()
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made(), name)

    def print(self, *objects: Any, **options: Any) -> None:
        """The console's `print`, leaving its buffering as it found it however it ends: a
        Ctrl-C as Rich's print ends (as its `with` block is left) kept that block open, and
        the console then held every later line, `warm: interrupted` too, never written (exit
        130, stderr empty). What it rendered is written with the console's next line."""
        console = self.made()
        depth = console._buffer_index  # (Rich's count of its `with` blocks open)
        try:
            console.print(*objects, **options)
        finally:
            if console._buffer_index > depth:  # (plain stores: no signal answered between)
                console._buffer_index = depth

    def __enter__(self) -> Console:
        return self.made().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.made().__exit__(*exc)


# No markup and no emoji codes in anything printed: a bundle's text is shown as it is.
out: Console = _Made(_stdout_console)  # type: ignore[assignment]
err: Console = _Made(_stderr_console)  # type: ignore[assignment]
