"""Words a user types as a `warm` command that are none of warm's: `warm help [COMMAND]` and
`warm version` (the flags `--help` and `--version` meant), `warm explain` (README's "Explaining
misses and strict mode": `warm verify --workload` and `WARM_EXPLAIN=1` explain misses, `warm
stats --explain` a tunable) and a command in capitals (`warm STATS`), each one line
(`not_a_command`) instead of Click's guess (which guessed `verify` for `version`); a file
whose name reads as an option (`-w.py`), told how to name it, and `warm run`'s `--bundle` given
to `warm verify`, told to name the bundle as its argument (`refuse_misread`, `not_here`);
architectures after one `--arch` (`--arch sm_90 sm_80`), told to give each its own
(`stray_arch`, `arch_each`); and any other argument after a workload (`no_arguments`). It
holds no state and prints nothing: `warmcli.cli.app`'s group fails with the line.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Iterator
from typing import Any

from typer._click.exceptions import UsageError  # (Typer's own click)

from warmcli.printable import printable

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


def refuse_misread(args: list[str], option: str, ctx: Any) -> None:
    """Where an argument that starts with `option` (no option of the command's) names a file
    here (`-w.py`, read as `-w`), the `UsageError` saying how to name that file; where
    `option` is `warm run`'s `--bundle` given to `warm verify` before any workload (Click
    guessed `--module`), the one `not_here` says."""
    named = next((a for a in args if a.startswith(option) and os.path.lexists(a)), None)
    if named is not None:
        said = f"No such option: {option}: {named} is a file here: name it ./{named} (or after --)"
        raise UsageError(said, ctx)
    if getattr(ctx.command, "name", None) == "verify" and option in ("--bundle", "-b"):
        raise UsageError(not_here("verify", option, "run"), ctx)


def not_here(command: str, option: str, other: str) -> str:
    """The one line for an option of warm `other` given to warm `command`."""
    why = {
        ("verify", "--pycuda"): ": warm run's own verify pass is the replay of a PyCUDA script",
        ("verify", "--bundle"): VERIFY_BUNDLE,
        ("verify", "-b"): VERIFY_BUNDLE,
    }.get((command, option), "")
    return f"warm {command} takes no {option} (an option of warm {other}){why}"


VERIFY_BUNDLE = ": name the bundle as its argument, warm verify BUNDLE --workload W.py"


def no_arguments(given: str) -> str:
    """The one line for arguments meant for the workload (`given`)."""
    return (
        f"a workload takes no arguments ({printable(given)}): warm runs it with sys.argv "
        "holding only its path; give it settings in environment variables, or warm a module "
        "of your own that sets them and calls it"
    )


_ARCH_WORD = re.compile(r"(sm|compute)_\d{2,3}[a-z]?")


def stray_arch(args: list[str], extra: list[str], workload: object = None) -> str | None:
    """The line for architectures among the arguments left over (`extra`, and the `workload`
    the parser took: `--arch sm_90 sm_80 w.py`'s `sm_80`) where `args` give `--arch`
    (`--arch sm_90 sm_80`, as the synopsis's `[--arch sm_90 ...]` may read), else None
    (`8`, or `sm_80` with no `--arch` given: the workload's, refused as such)."""
    if not any(arg == "--arch" or arg.startswith("--arch=") for arg in args):
        return None
    taken = [str(workload)] if workload else []
    stray = [word for word in [*taken, *extra] if _ARCH_WORD.fullmatch(word)]
    if not stray:
        return None
    # (a GPU's: `--arch compute_90` is refused, its PTX kept with sm_90's cubins)
    each = " ".join(f"--arch {word.replace('compute_', 'sm_', 1)}" for word in stray)
    said = f"{' '.join(stray)}: --arch takes one architecture, one --arch each"
    return said + (f", a GPU's (write {each})" if "compute_" in said else f" (write {each})")


@contextlib.contextmanager
def arch_each(args: list[str], ctx: Any) -> Iterator[None]:
    """Parsing a command that takes no workload (`check`): the parser's refusal of extra
    arguments, where they are architectures after `--arch`, as `stray_arch` says it."""
    try:
        yield
    except UsageError as exc:
        unset = [a for i, a in enumerate(args) if not (i and args[i - 1] == "--arch")]
        said = "unexpected extra argument" in str(exc) and stray_arch(args, unset)
        if not said:
            raise
        raise UsageError(said, ctx) from None
