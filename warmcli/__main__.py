"""`python -m warmcli` and the `warm` command: the CLI, with `warm --version` answered
before the CLI's own imports (typer, rich, every command) are paid for, and a process
whose work ran in a worker that has exited (`warm run`) ended without the interpreter's
teardown (`warmcli.cli.common.end_process`). Ctrl-C while the CLI is still imported is
one line and exit 130, never the import's traceback; once a command has ended, Ctrl-C is
ignored and its exit code stands."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing.TYPE_CHECKING`: `warm --version` imports no typing (nor re)
if TYPE_CHECKING:
    from typing import NoReturn


def main() -> None:
    """`warm`: `--version` alone is printed at once; anything else goes to the CLI."""
    if sys.argv[1:] == ["--version"]:
        from warmcli._version import __version__

        sys.stdout.write(f"warm {__version__}\n")
        return
    try:
        from warmcli.cli import main as cli_main
        from warmcli.cli.common import end_process, exit_interrupted
    except KeyboardInterrupt:  # Ctrl-C while the CLI is imported: one line, as anywhere else
        _interrupted()
    code: object = None
    interrupted = False
    try:
        cli_main()
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # past the command's own answer, as it ended
        interrupted = True
    for _ in range(3):  # the command has ended, its exit code stands: Ctrl-C is ignored
        try:  # (one that came just before is raised here, at the call: ignored the same)
            _ignore_ctrl_c()
            break
        except KeyboardInterrupt:
            continue
    if interrupted:  # one line, exit 130 (no second JSON object where one was printed)
        try:
            exit_interrupted()
        except SystemExit as said:
            code = said.code
    end_process(code)
    raise SystemExit(code)


def _ignore_ctrl_c() -> None:
    """Ctrl-C from here on is ignored: as the process ended, it printed a traceback, or
    killed `warm` by the signal once Python had restored SIGINT's default action."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupted() -> NoReturn:
    """`warm: interrupted` (under `--json` also its JSON), exit 130, as the CLI says it."""
    sys.stderr.write("warm: interrupted\n")
    if "--json" in sys.argv[1:]:
        sys.stdout.write('{\n  "error": "interrupted",\n  "exit": 130\n}\n')
    raise SystemExit(130)


if __name__ == "__main__":
    main()
