"""`python -m warmcli` and the `warm` command: the CLI, with `warm --version` answered
before the CLI's own imports (typer, rich, every command) are paid for, and a process
whose work ran in a worker that has exited (`warm run`) ended without the interpreter's
teardown (`warmcli.cli.common.end_process`)."""

import sys


def main() -> None:
    """`warm`: `--version` alone is printed at once; anything else goes to the CLI."""
    if sys.argv[1:] == ["--version"]:
        from warmcli._version import __version__

        sys.stdout.write(f"warm {__version__}\n")
        return
    from warmcli.cli import main as cli_main
    from warmcli.cli.common import end_process

    try:
        cli_main()
    except SystemExit as exc:
        end_process(exc.code)
        raise


if __name__ == "__main__":
    main()
