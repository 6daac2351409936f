"""`python -m warmcli` is `warm`."""

from warmcli.cli import main

if __name__ == "__main__":
    main()
