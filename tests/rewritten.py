"""The test modules' assert-rewritten code written once, before pytest-xdist's workers start.

pytest rewrites each test module's `assert`s (so that a failing one says the values it
compared) as the module is imported, and keeps the rewritten code in `tests/__pycache__`
unless `sys.dont_write_bytecode` is set, as `PYTHONDONTWRITEBYTECODE` sets it where the
suite runs: each worker of `pytest -n 2` rewrote all the test modules again at every run
(~6 s of CPU each, most of its collection; a clean clone has no cache either way).
`write_once` has the controller write that cache before the workers start, the modules
shared between as many forks of it as there are workers, with pytest's own functions, so
each worker reads the very code it would have made. Each file is checked against its
source's hash at every read (pytest's `_read_pyc`), never its mtime: an edited test is
rewritten again, never run stale. Any failure (pytest's private names moved) leaves
pytest to rewrite at import, as before.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest


def write_once(config: pytest.Config, tests: Path) -> None:
    """In the controller of a distributed run (`-n N`) with pytest's assert rewriting on,
    the rewritten code of each `test_*.py` in `tests` whose cached copy is missing or out
    of date, written by N forks (each a share of the modules), waited for."""
    workers = getattr(config.option, "numprocesses", None) or 0
    if hasattr(config, "workerinput") or not isinstance(workers, int) or workers < 1:
        return  # (a worker, or no workers: pytest rewrites at import as always)
    if config.getoption("assertmode") != "rewrite":
        return
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        todo = []
        for source in sorted(tests.glob("test_*.py")):
            pyc = rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(source, pyc) is None:
                todo.append((source, pyc))
        if todo:
            todo[0][1].parent.mkdir(exist_ok=True)
    except Exception:
        return
    forks = []
    for share in range(min(workers, len(todo))):
        pid = os.fork()
        if pid == 0:  # (a fork writes and ends at once, running no handler of pytest's)
            code = 1
            with contextlib.suppress(BaseException):
                for source, pyc in todo[share :: min(workers, len(todo))]:
                    source_hash, co = rewrite._rewrite_test(source, config)
                    rewrite._write_pyc(state, co, source_hash, pyc)  # (written whole or not)
                code = 0
            os._exit(code)
        forks.append(pid)
    for pid in forks:
        os.waitpid(pid, 0)
