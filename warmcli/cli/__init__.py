"""The `warm` command line: parses arguments, calls the library, prints with Rich.

Each command lives in its own module and registers itself on `app` (`warmcli.cli.app`,
imported first, then the command a command line names, or every command: no import
cycle); what they share (consoles, errors, options) is in `common`. The CLI only parses
and prints: all work is in the library (`warmcli.warming`, `warmcli.ops` and below them).
`main` turns Python's cyclic garbage collector on again once the command's modules are
imported (the entry point pauses it for them), what they made frozen; an option typed with a
typographic dash (`—json`) is one line naming it; a `TrustedKeyWarning` is one warning line;
a stop signal while the command's modules are imported is held until they are, then answered
(`warm: interrupted`, 130): a C extension's init (numpy's) turns a `KeyboardInterrupt` raised in
its own imports into an ImportError, after printing its traceback. An exit 130 that no line
said (Typer's own, for a Ctrl-C it caught) says it. It holds no state.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

from warmcli.cli.app import app
from warmcli.cli.common import exit_interrupted, exit_now, unsaid_interrupt
from warmcli.interrupted import held_interrupts
from warmcli.printable import printable

__all__ = ["app", "main"]


def main() -> None:
    """`warm`: a usage error (unknown option, missing argument, bad value) is one line on
    stderr naming the command's `--help`, exit 2 (and a JSON object on stdout too under
    `--json`), never the parser's usage block, a URL it names shown as every message shows
    one (`_shown_urls`); Ctrl-C while parsing exits 130."""
    _typographic_dash(sys.argv[1:])
    with held_interrupts():  # (answered as it ends: the module doc)
        app.load(sys.argv[1:2])
    _collect_from_here()
    _warn_in_one_line()
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
        exit_now(f"{_shown_urls(message())} (see {where})", fail_code)
    if unsaid_interrupt(code):  # Typer's bare 130 for a Ctrl-C between warm's own answers
        exit_interrupted()
    sys.exit(code if isinstance(code, int) else 0)


_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"  # not `-`


def _typographic_dash(args: list[str]) -> None:
    """An option typed with a typographic dash (`—json`: pasted from a page that set `--`
    as an em dash), which the parser takes for a file name or an extra argument: one line
    naming the dash and the option meant, exit 2."""
    for arg in args:
        if arg == "--":
            return
        word = arg.lstrip(_DASHES + "-").split("=")[0]
        if arg[:1] in _DASHES and word.isascii() and word.replace("-", "").isalpha():
            import unicodedata

            meant = f"{'-' if len(word) == 1 else '--'}{word}"
            dash = unicodedata.name(arg[0]).lower()
            exit_now(f"{printable(arg)}: its dash is {dash}, not '-': type {meant}", 2)


def _shown_urls(message: str) -> str:
    """`message` (the parser's: `unexpected extra argument (URL)`), each URL the command
    line holds in it as `location.shown` shows it: no password, token or query."""
    from warmcli.bundle.location import shown

    for arg in sys.argv[1:]:
        if "://" in arg and shown(arg) != arg:
            message = message.replace(arg, shown(arg))
    return message


def _warn_in_one_line() -> None:
    """A `TrustedKeyWarning` the library issues (once per process) is shown as warm's other
    warnings are, one line on stderr (`warm: warning: ...`), not Python's two."""
    import warnings

    from warmcli.cli.common import err
    from warmcli.errors import TrustedKeyWarning

    shown_before = warnings.showwarning

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, TrustedKeyWarning):
            return shown_before(message, category, *args, **kwargs)
        said = f"warm: warning: {printable(str(message))}"
        err.print(said, markup=False, highlight=False, soft_wrap=True)
        return None

    warnings.showwarning = show


def _collect_from_here() -> None:
    """The `warm` entry point (`warmcli.__main__`) pauses Python's cyclic garbage collector
    while the CLI and the command's modules are imported: they make objects that live as
    long as the process, which tens of collections would scan for nothing (about 8 ms of a
    `warm run`, twice a bare `import numpy`'s). Here it runs again, over what is made from
    now on only: what the imports made is frozen (`gc.freeze`), never scanned again, nor
    written to by a collection in the worker `warm run` forks (pages it shares)."""
    if Collector.paused_by_entry and not gc.isenabled():
        Collector.paused_by_entry = False
        gc.freeze()
        gc.enable()


class Collector:
    """Whether the entry point paused the collector (a `main()` called otherwise, in a
    process that turned it off itself, leaves it as that process chose)."""

    paused_by_entry = False
