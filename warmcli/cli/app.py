"""The `warm` application object: `app`, its command class, and `warm --version`.

Its command class refuses, in warm's own line (not Click's guesses), an option a workload
command (`warm run`, `warm verify`) is given after its workload: named as the other
command's where it is one (`warm verify B --workload w.py --pycuda`), as a misspelling of
its own where it is close to one (`--bundel`), else as an argument the workload never
sees. Its help names an argument and an option's value as README's synopsis does
(`BUNDLES...`, `--arch SM_XX`: `VALUE_NAMES`), never the parser's types; `-h` is `--help`
everywhere; a command's option given before it (`warm --json stats`), and warm's own after
a command (`warm stats --version`), are said so.

Owns `app` (a `WarmApp`), which every command module imports and registers itself on;
`warmcli.cli` imports this module first and then the commands, so registration is no
import cycle. It holds no other state and calls the library only to be told when a command
waits for another writer's bundle lock (`told_of_waits`): one line on stderr, `_say_waiting`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from typing import Any

import typer
from typer._click.exceptions import NoSuchOption, UsageError  # (Typer's own click)
from typer.core import TyperCommand, TyperGroup

from warmcli._version import __version__
from warmcli.cli.common import exit_interrupted, out
from warmcli.cli.docstrings import with_docstring
from warmcli.cli.not_commands import (
    arch_each,
    no_arguments,
    not_a_command,
    not_here,
    refuse_misread,
    stray_arch,
)
from warmcli.cli.plain_params import install
from warmcli.config import VARIABLES
from warmcli.printable import printable


def _variables(production: bool) -> str:
    return ", ".join(
        f"{v.name}{'=' + v.value if v.value else ''} ({v.help})"
        for v in VARIABLES
        if v.production is production
    )


ENV_HELP = (
    f"Environment: {_variables(False)}; in production only, {_variables(True)}.\n\n"
    "Exit codes: 0 ok; 1 verify found something missing or corrupt, diff a corrupt entry "
    "(bundles that differ are 0), check found entries this machine cannot serve, merge wrote "
    "OUT but its shards are not one whole run, or stdout's reader went away before all was "
    "written (| head -1); 2 bad input or environment; "
    "130 interrupted (SIGINT, SIGTERM, SIGHUP). "
    'Under --json a failure is also {"error": ..., "exit": N} on stdout.'
)


class _PlainParams:
    """Installs `warmcli.cli.plain_params`' converters on a command's parameters as it
    parses them (a command and the group alike)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self.get_params(ctx))  # type: ignore[attr-defined]
        return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]


def _say_waiting(line: str) -> None:
    """A writer's wait for another's bundle lock, said once on stderr (it keeps waiting)."""
    with contextlib.suppress(OSError, ValueError):  # stderr refused: it waits unsaid
        sys.stderr.write(f"warm: {line} (Ctrl-C to stop)\n")
        sys.stderr.flush()


class WarmCommand(_PlainParams, TyperCommand):
    """A command whose help shows a flag as `--json` (it takes no value, so no `<bool>`) and
    its arguments in the usage line as `WORKLOAD`, `[BUNDLE]`, `BUNDLES...`, whose values
    are converted without Pydantic (`warmcli.cli.plain_params`), and which, stopped by
    Ctrl-C that nothing inside answered, says so in one line and exits 130."""

    def invoke(self, ctx: Any) -> Any:
        from warmcli.bundle.lock import told_of_waits  # (imported by every writer anyway)

        try:
            with told_of_waits(_say_waiting):
                return super().invoke(ctx)
        except KeyboardInterrupt:  # (a forked worker ignores it: its caller stops it)
            exit_interrupted()

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """`warm`'s own option after a command (`warm stats --version`): one line saying
        where it goes (Click guessed `--json`); any usage error names this command's help."""
        given = list(args)  # (the parser consumes the list it is given)
        try:
            return self._parse_args(ctx, args)
        except NoSuchOption as exc:
            group = ctx.parent.command if ctx.parent is not None else None
            option = exc.option_name
            if group is None or not any(option in param.opts for param in group.params):
                refuse_misread(given, option, ctx)  # `-w.py` read as `-w`, verify's `-b`
                raise
            raise UsageError(f"{option} is an option of warm itself: warm {option}", ctx) from None
        except UsageError as exc:  # (`--explain` with no value: the parser's, with no context)
            exc.ctx = exc.ctx or ctx  # its line names `warm COMMAND --help`, not `warm --help`
            raise

    def _parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """A command that runs a workload (`run`, `verify`), given arguments past its own
        after the workload (an unknown option, a value, `run -m MODULE -- 8`'s `8`): one
        line saying a workload takes none, and what to do instead (`--arch sm_90 sm_80`, as
        `check`'s: one --arch each)."""
        given_args = list(args)  # (the parser consumes the list it is given)
        if self.name not in WORKLOAD_COMMANDS:
            with arch_each(given_args, ctx):
                return super().parse_args(ctx, args)
        ctx.allow_extra_args = True  # what is left over is refused here, said so
        try:
            rest = super().parse_args(ctx, args)
        except NoSuchOption as exc:  # an option of the workload's, after it: say so
            at = _token(given_args, exc.option_name)
            if ctx.resilient_parsing or at is None or not self._workload_in(ctx, given_args, at):
                raise
            other = _owner(self.name, exc.option_name)  # `verify ... --pycuda`: run's option
            said = not_here(self.name, exc.option_name, other) if other else None
            said = said or self._typo(exc.option_name)  # `--bundel`: --bundle meant
            mine = f"warm {self.name} takes no {exc.option_name}, and "  # (not Click's guesses)
            said = said or mine + no_arguments(given_args[at])  # (as given: `--n=8`)
            raise UsageError(said, ctx) from None
        ctx.allow_extra_args = False
        params = ctx.params
        both = bool(params.get("workload") and params.get("module") and self.name == "run")
        after = both and self._module_first(ctx, given_args)  # `-m app -- 8`: 8 is extra
        if not (ctx.args or after) or ctx.resilient_parsing:
            return rest
        from warmcli.bundle.location import shown  # a URL's password or query: never said

        extra = [*([params["workload"]] if both else []), *ctx.args]
        given = " ".join(shown(str(arg)) for arg in extra)
        if not (params.get("workload") or params.get("module")):  # no workload: the parser's
            ctx.fail(f"Got unexpected extra argument(s) ({printable(given)})")
        ctx.fail(stray_arch(given_args, ctx.args, params.get("workload")) or no_arguments(given))

    def _typo(self, option: str) -> str | None:
        """The one line for `option` given after the workload when it is a close misspelling
        of one of this command's own (`--bundel`), else None (`--n`: the workload's)."""
        import difflib

        own = [name for param in self.params for name in param.opts if name.startswith("--")]
        near = difflib.get_close_matches(option, own, n=1, cutoff=0.8)
        return f"warm {self.name} takes no {option}: did you mean {near[0]}?" if near else None

    def _parsed(self, ctx: Any, args: list[str]) -> dict[str, Any]:
        """What the parser makes of `args` alone (each parameter given, by name); {} where
        it refuses them."""
        try:
            opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except UsageError:
            return {}
        return {name: value for name, value in opts.items() if value is not None}

    def _workload_in(self, ctx: Any, args: list[str], end: int) -> bool:
        """Whether `args[:end]` names the workload (its file or `-m MODULE`)."""
        given = self._parsed(ctx, args[:end])
        return "module" in given or "workload" in given

    def _module_first(self, ctx: Any, args: list[str]) -> bool:
        """Whether `run`'s `-m MODULE` came before its WORKLOAD (then the file is extra)."""
        for end in range(1, len(args) + 1):
            given = self._parsed(ctx, args[:end])
            if "module" in given:
                return "workload" not in given
        return False

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False):
                param.metavar = ""
            elif param.param_type_name == "argument":  # `A`, `BUNDLES...`, as in the usage
                param.metavar = (param.name or "").upper() + ("..." if param.nargs != 1 else "")
                param.display_type_rich = lambda ctx: None  # (no `<list[str]>` beside it)
            elif param.metavar is None:  # README's name for its value, not the parser's type
                param.metavar = next((VALUE_NAMES[o] for o in param.opts if o in VALUE_NAMES), None)
        return params

    def get_short_help_str(self, limit: int = 45) -> str:
        """The whole first sentence in `warm --help`'s list of commands, never cut short."""
        text = self.short_help or (self.help or "").split("\n\n")[0]
        return " ".join(text.split())

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = (param.metavar or param.name or "").upper().removesuffix("...")
                name = name if param.required else f"[{name}]"
                pieces.append(name if param.nargs == 1 else f"{name}...")
        return pieces


class WarmGroup(_PlainParams, TyperGroup):
    """`warm` itself: its options (`--version`...) converted without Pydantic too. A Ctrl-C
    while parsing (Typer's answer: a bare exit 130) is one line, as are a command's option
    before the command (`warm --json stats`) and `warm help`, `warm version` (flags meant)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            exit_interrupted()

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            exit_interrupted()

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """`warm help [COMMAND]` and `warm version` point at `--help` and `--version` (Click
        guessed `verify`); `warm explain` at what explains; `warm STATS` at `stats`."""
        said = None if ctx.resilient_parsing else not_a_command(args, COMMANDS)  # (completion)
        if said is not None:
            ctx.fail(said)
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """An option of the command given before it (`warm --json stats`), or with no
        command (`warm --json`): one line saying where it goes (Click's own guessed warm's
        `--version`)."""
        given = list(args)  # (the parser consumes the list it is given)
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as exc:
            option = exc.option_name
            named = next((arg for arg in given if arg in COMMANDS), None)
            owners = [
                name
                for name in ([named] if named else sorted(COMMANDS))
                if any(
                    option in (*param.opts, *param.secondary_opts)
                    for param in self.get_command(ctx, name).params
                )
            ]
            if not owners:
                raise
            if named is None:
                which = "every command" if len(owners) == len(COMMANDS) else "warm "
                which += "" if len(owners) == len(COMMANDS) else ", ".join(owners)
                said = f"{option} is an option of {which}: give a command, then {option}"
                raise UsageError(f"{said} (warm {owners[0]} {option} ...)", ctx) from None
            raise UsageError(
                f"{option} is an option of warm {named}: give it after the command "
                f"(warm {named} {option} ...)",
                type(ctx)(self.get_command(ctx, named), parent=ctx, info_name=named),
            ) from None


def _token(args: list[str], option: str) -> int | None:
    """Where the unknown `option` is in `args` (as given: `--n`, `--n=8`, `-nq`), else None."""
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        if (
            arg == option
            or arg.startswith(f"{option}=")
            or (not option.startswith("--") and arg.startswith(option) and not arg.startswith("--"))
        ):
            return i
    return None


def _owner(command: str, option: str) -> str | None:
    """The other workload command (`run`, `verify`) whose own option `option` is, else None
    (its command module imported: only on this error's path)."""
    from typer.models import OptionInfo

    for other in WORKLOAD_COMMANDS:
        if other == command:
            continue
        importlib.import_module(f"warmcli.cli.{COMMANDS[other]}")
        for info in app.registered_commands:
            if (info.name or getattr(info.callback, "__name__", "")) != other:
                continue
            for param in inspect.signature(info.callback).parameters.values():
                default = param.default
                if isinstance(default, OptionInfo) and option in (default.param_decls or ()):
                    return other
    return None


VALUE_NAMES = {  # an option's value as README's synopsis names it (`--arch SM_XX`)
    "--arch": "SM_XX",
    "--bundle": "PATH",
    "--compile-timeout": "S",
    "--compiler": "NAME",
    "--dask": "SCHEDULER",
    "--dask-env": "NAME",
    "--device": "DEVICE",
    "--entry": "NAME",
    "--explain": "OPERATION",
    "--jobs": "N",
    "--key": "KEY",
    "--max-size": "SIZE",
    "--module": "MODULE",
    "--nvcc": "PATH",
    "--older-than": "AGE",
    "--output": "OUT",
    "--ptx": "COMPUTE_XX",
    "--shard": "I/N",
    "--workload": "WORKLOAD",
}
WORKLOAD_COMMANDS = ("run", "verify")  # commands that run a workload (it sees no arguments)
COMMANDS = {  # each command, and the module of `warmcli.cli` that registers it
    "check": "check",
    "clean": "clean",
    "devices": "inspect",
    "diff": "diff",
    "keygen": "sign",
    "merge": "merge",
    "pull": "remote",
    "push": "remote",
    "run": "run",
    "sign": "sign",
    "stats": "inspect",
    "verify": "verify",
}


class WarmApp(typer.Typer):
    """`typer.Typer` whose every command is a `WarmCommand`, its command modules imported
    when first needed: `load` imports only the module of the command a command line names
    (`warm stats` pays for no other command's imports); anything that reads the commands
    before (help, completion, a test's `CliRunner`) imports them all."""

    _loaded = False

    @property
    def registered_commands(self) -> list[Any]:
        if not self._loaded:
            self.load([])
        return self._commands

    @registered_commands.setter
    def registered_commands(self, value: list[Any]) -> None:
        self._commands = value

    def load(self, args: list[str]) -> None:
        """Import the module of the command `args` names, or every command module."""
        self._loaded = True
        named = COMMANDS.get(args[0]) if args else None
        try:
            for module in [named] if named else sorted(set(COMMANDS.values())):
                importlib.import_module(f"warmcli.cli.{module}")
        except KeyboardInterrupt:  # Ctrl-C before a command began: one line, exit 130
            exit_interrupted()

    def command(self, *args: Any, **kwargs: Any) -> Any:
        register = super().command(*args, **{"cls": WarmCommand, **kwargs})
        return lambda function: register(with_docstring(function))  # (`python -OO` drops it)


app = WarmApp(
    name="warm",
    cls=WarmGroup,
    help="Warm compile caches for GPU workloads: every kernel and tune pick in one bundle.\n\n"
    + ENV_HELP,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},  # (every command's too)
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rewrapped to the terminal, nothing cut
)


def version_callback(value: bool) -> None:
    if value:
        out.print(f"warm {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """warm: make GPU processes start hot."""
