"""The `warm` command line: parses arguments, calls the library, prints with Rich.

Each command lives in its own module and registers itself on `app` (`warmcli.cli.app`,
imported first, then the command a command line names, or every command: no import
cycle); what they share (consoles, errors, options) is in `common`. The CLI only parses
and prints: all work is in `warmcli.warming.passes` and the modules below it.
"""

from __future__ import annotations

import contextlib
import sys

import typer

from warmcli.cli.app import app
from warmcli.cli.common import fail, json_requested

__all__ = ["app", "main"]


def main() -> None:
    """`warm`: under `--json` a usage error is a JSON object on stdout too, not only text."""
    app.load(sys.argv[1:2])
    if not json_requested():
        app(prog_name="warm")
        return
    try:
        code = app(prog_name="warm", standalone_mode=False)
    except Exception as exc:  # the parser's own errors (unknown option, bad value)
        message = getattr(exc, "format_message", None)
        if message is None:
            raise
        fail_code = getattr(exc, "exit_code", 2) or 2
        with contextlib.suppress(typer.Exit):
            fail(f"{message()} (see warm --help)", fail_code)
        sys.exit(fail_code)
    sys.exit(code if isinstance(code, int) else 0)
