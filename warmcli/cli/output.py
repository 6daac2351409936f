"""What `warm` does when its own output cannot be written.

stdout's reader gone (`warm stats | false`, `| head -1`) is no failure of warm's: exit 1,
nothing said, as Python's own tools do. A write the system refuses (`> /dev/full`, a
quota, a file size limit) is one line on stderr and exit 2, as any write it refuses:
`OutputError` (an `OSError`, so every command's own answer to one holds) names it as the
output's. Either way stdout is then pointed at /dev/null, so no later flush (the
interpreter's own at exit) fails again and no traceback follows. (A standard stream a
script closed, `>&-`, is /dev/null from the start: `warmcli.__main__`.) `TrimmedStdout` is
the file Rich's console writes stdout through off a terminal (each holds its unfinished
line). This module owns no state and imports neither Rich nor Typer; it prints only the
one line of a refused write, with `os.write` (stderr may be refused too: then nothing).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from warmcli.errors import OutputError
from warmcli.printable import printable


class TrimmedStdout:
    """The `out` console's file: `sys.stdout` (looked up at each write), every line written
    without its trailing spaces, so that piped output and CI logs hold no padding."""

    def __init__(self) -> None:
        self._partial = ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            with writing_output():
                sys.stdout.write("".join(f"{line.rstrip(' ')}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        with writing_output():
            if self._partial:
                sys.stdout.write(self._partial)
                self._partial = ""
            sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:
        """stdout's: where it is no UTF (an ASCII or Latin-1 locale), Rich draws in ASCII."""
        return getattr(sys.stdout, "encoding", None) or "utf-8"


@contextlib.contextmanager
def writing_output() -> Iterator[None]:
    """Writes to stdout inside: a refusal is an `OutputError`, a closed pipe stays the
    `BrokenPipeError` it is (a reader gone is no error)."""
    try:
        yield
    except OSError as exc:
        said = as_output(exc)
        if said is exc:
            raise
        raise said from exc


def as_output(exc: OSError) -> OSError:
    """`exc`, met writing stdout, as `writing_output` raises it."""
    if isinstance(exc, BrokenPipeError | OutputError):
        return exc
    return OutputError(f"output not written whole: {exc}")


def drop_stdout() -> None:
    """Point stdout (descriptor 1) at /dev/null: what is still buffered for it is lost,
    as it was already, and no later flush fails."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def refused(exc: OSError) -> int:
    """The exit code of a write nothing else answered (stdout's, or any other the system
    refused): a closed pipe 1, said by nothing; else one line and 2."""
    drop_stdout()
    if isinstance(exc, BrokenPipeError):
        return 1
    with contextlib.suppress(OSError):
        os.write(2, f"warm: error: {printable(str(exc))}\n".encode(errors="backslashreplace"))
    return 2
