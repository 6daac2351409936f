"""What a new user meets running README.md's commands as written: the help each command
prints. Every test runs the real CLI in a subprocess (the `warm` fixture).
"""

from __future__ import annotations

import pytest
from conftest import Warm

COMMANDS = ("run", "stats", "verify", "check", "merge", "push", "pull", "sign", "keygen")
COMMANDS += ("diff", "clean", "devices")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_defaults_without_markup_escapes(warm: Warm, command: str) -> None:
    """Help is plain text: `[default: ...]` reads as written, never `\\[default: ...]`."""
    proc = warm(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "\\[" not in proc.stdout, proc.stdout
