"""Words a user types as a `warm` command that are none of warm's: `warm help [COMMAND]` and
`warm version` (the flags `--help` and `--version` meant), `warm explain` (README's "Explaining
misses and strict mode": `warm verify --workload` and `WARM_EXPLAIN=1` explain misses, `warm
stats --explain` a tunable) and a command in capitals (`warm STATS`), each one line
(`not_a_command`) instead of Click's guess (which guessed `verify` for `version`); and a file
whose name reads as an option (`-w.py`), told how to name it (`refuse_a_file`). It holds no
state and prints nothing: `warmcli.cli.app`'s group fails with the line.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from typer._click.exceptions import UsageError  # (Typer's own click)

EXPLAIN = (
    "warm has no 'explain' command: misses are explained by warm verify BUNDLE --workload W.py "
    "(one line each) and, in production, by WARM_EXPLAIN=1; a tunable's tunes by warm stats "
    "BUNDLE --explain OPERATION"
)


def not_a_command(args: list[str], commands: Collection[str]) -> str | None:
    """The line for `warm ARGS...` whose first word is no command in `commands` but one a user
    may mean by it; None for any other."""
    name = args[0] if args else ""
    if not name or name in commands:
        return None
    if name in ("help", "version"):
        command = f"{args[1]} " if name == "help" and args[1:2] and args[1] in commands else ""
        return f"warm has no '{name}' command: warm {command}--{name}"
    if name == "explain":
        return EXPLAIN
    if name.lower() in commands:
        return f"No such command {name!r}. Did you mean {name.lower()!r}?"
    return None


def refuse_a_file(args: list[str], option: str, ctx: Any) -> None:
    """Where an argument that starts with `option` (no option of the command's) names a file
    here (`-w.py`, read as `-w`), the `UsageError` saying how to name that file."""
    named = next((a for a in args if a.startswith(option) and os.path.lexists(a)), None)
    if named is not None:
        said = f"No such option: {option}: {named} is a file here: name it ./{named} (or after --)"
        raise UsageError(said, ctx)
