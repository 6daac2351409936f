"""A child started with a caller's environment gets that environment, not this process's,
also where warm changes nothing in it (no scratch folder, no C locale, TMPDIR as usable)."""

from __future__ import annotations

import os
import tempfile

from warmcli import config
from warmcli.backends import processes


def test_a_callers_environment_is_handed_on_where_nothing_in_it_changes() -> None:
    env = {"PATH": os.defpath, "WARM_TEST_ONLY_HERE": "unit", "TMPDIR": tempfile.gettempdir()}
    made = config.compiler_environment(tempfile.gettempdir(), env)
    assert made == env and made is not env  # (a copy: the unit's own is never written)
    done = processes.run(["/bin/sh", "-c", "echo ${WARM_TEST_ONLY_HERE-unset}"], 10, environ=env)
    assert done.out == "unit\n"
