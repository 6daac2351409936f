"""`python -m warmcli` and the `warm` command: the CLI, with `warm --version` answered
before the CLI's own imports (typer, rich, every command) are paid for."""

import sys


def main() -> None:
    """`warm`: `--version` alone is printed at once; anything else goes to the CLI."""
    if sys.argv[1:] == ["--version"]:
        from warmcli._version import __version__

        sys.stdout.write(f"warm {__version__}\n")
        return
    from warmcli.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
