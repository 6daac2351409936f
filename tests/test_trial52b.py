"""trial52b: warm on a shared Linux host: a group's bundle folder, several users, odd paths.

What was wrong:

- A new bundle was 0644 whatever the umask (SQLite makes its files so): made under umask
  002 in a group's folder, no other member could warm into it (`warm run`: "attempt to write
  a readonly database"). It is now made 0664 less the umask: its group may write it under
  umask 002, every user never, whatever the umask.
"""

from __future__ import annotations

import os
from pathlib import Path

from warmcli.bundle.store import Bundle


def test_a_new_bundle_is_0664_less_the_umask_not_sqlites_0644(tmp_path: Path) -> None:
    made = {}
    for umask in (0o002, 0o022, 0o000):
        old = os.umask(umask)
        try:
            Bundle.create(tmp_path / f"{umask:o}.warm").close()
        finally:
            os.umask(old)
        made[umask] = (tmp_path / f"{umask:o}.warm").stat().st_mode & 0o777
    assert made == {0o002: 0o664, 0o022: 0o644, 0o000: 0o664}  # never writable by all
