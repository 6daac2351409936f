"""The `warm` command line: parses arguments, calls the library, prints with Rich.

Each command lives in its own module and registers itself on `app` (`warmcli.cli.app`,
imported first, then the command a command line names, or every command: no import
cycle); what they share (consoles, errors, options) is in `common`. The CLI only parses
and prints: all work is in the library (`warmcli.warming`, `warmcli.ops` and below them).
"""

from __future__ import annotations

import sys

from warmcli.cli.app import app
from warmcli.cli.common import exit_interrupted, exit_now

__all__ = ["app", "main"]


def main() -> None:
    """`warm`: a usage error (unknown option, missing argument, bad value) is one line on
    stderr naming the command's `--help`, exit 2 (and a JSON object on stdout too under
    `--json`), never the parser's usage block; Ctrl-C while parsing exits 130."""
    app.load(sys.argv[1:2])
    try:
        code = app(prog_name="warm", standalone_mode=False)
    except Exception as exc:  # the parser's own (Typer's click): known by what they carry
        if type(exc).__name__ == "Abort":  # interrupted before a command took over
            exit_interrupted()
        message = getattr(exc, "format_message", None)
        if message is None:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # plain `warm`: the help it asks for
            exc.show()  # type: ignore[attr-defined]
            sys.exit(2)
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path} --help" if ctx is not None else "warm --help"
        fail_code = getattr(exc, "exit_code", 2) or 2
        exit_now(f"{message()} (see {where})", fail_code)
    sys.exit(code if isinstance(code, int) else 0)
