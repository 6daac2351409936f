"""Forking servers (`tests/forked_python.py`, `tests/forked_cli.py`) shared by processes whose
environments differ only in what the compilers and the workload read: the tool variables
(`TOOL_VARIABLES`: `PATH`, `COMPILER_PATH`, `CPATH`..., `NVCC_*`, `TMPDIR`) and a test's
own, named (`W`, `CHECK`...). For modules of toolchain-identity tests, where every test sets
one of these to a path of its own, so that the servers keyed by the whole environment
(`ForkedPythons`, `Servers`) started one a test and saved nothing.

A server is started without the free variables; each child takes its whole environment from
its request (as the base servers' do), so it finds them as a started process would. That
holds because a server's imports (`import numpy, warmcli`; `warmcli.cli` and the commands
`app.load` loads) read none of them: numpy's own `NPY_*`/`OPENBLAS_*`, `HOME`,
`PYTHONUSERBASE`, `TYPER_USE_RICH` alone, and leave `tempfile`'s folder unchosen
(`test_a_servers_imports_read_no_free_variable` in `tests/test_keys47.py` checks it).
Owns nothing but the servers it starts (ended by `close`); not for a test of how a process
starts, as the base modules say.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forked_cli import ForkedWarm, Servers
from forked_python import ForkedPython, _shared

TOOL_VARIABLES = (
    "PATH",
    "COMPILER_PATH",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "TMPDIR",
)


def _fixed(env: dict[str, str], free: tuple[str, ...]) -> dict[str, str]:
    """`env` less the variables a child may set apart from its server."""
    return {k: v for k, v in env.items() if k not in free}


class ToolEnvPythons:
    """Production scripts forked: one `ForkedPython` an environment less `free` (the tool
    variables and `own`) and warm's own variables, each child run in its whole `env`."""

    def __init__(self, cwd: Path, *own: str) -> None:
        self.cwd, self.free = cwd, (*TOOL_VARIABLES, *own)
        self._servers: dict[str, ForkedPython] = {}

    def run(self, code: str | Path, *args: str, env: dict[str, str], cwd: Path, **kw: Any) -> Any:
        """`ForkedPython.run` from the server of `env` less the free variables."""
        fixed = _fixed(env, self.free)
        shared = repr(sorted(_shared(fixed).items()))  # (warm's own variables apart too)
        if shared not in self._servers:
            self._servers[shared] = ForkedPython(fixed, self.cwd)
        server = self._servers[shared]
        server.base = _shared(env)  # (what `run` checks: the server's, but the free ones)
        return server.run(code, *args, env=env, cwd=cwd, **kw)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


class ToolEnvServers(Servers):
    """`Servers` keyed (and started) by an environment less `free`: `ForkedWarm(warm, this)`
    runs each command of `warm` forked, whatever tool variables its environment sets."""

    def __init__(self, root: Path, *own: str) -> None:
        super().__init__(root)
        self.free = (*TOOL_VARIABLES, *own)

    def server(self, env: dict[str, str], args: list[str] | None = None) -> Any:
        return super().server(_fixed(env, self.free), args)


_SHARED: dict[tuple[str, ...], ToolEnvServers] = {}  # the session's, by the names `own` frees


def forked_tool_warm(*own: str) -> tuple[Any, Any]:
    """A module's fixtures `tool_servers` (a `ToolEnvServers`, `own` free too: one for the
    test process, shared by every module freeing the same names, ended with the session) and
    `warm` (conftest's, each command a fork of them, `popen` a process started): for a module
    whose tests each set a path of their own in a tool variable or the workload's (`TMPDIR`,
    `MARK`), where a server keyed by the whole environment was started a test. Assign both at
    module level: `tool_servers, warm = forked_tool_warm("MARK")`."""

    @pytest.fixture(name="tool_servers", scope="session")
    def servers() -> Iterator[ToolEnvServers]:
        if own not in _SHARED:
            _SHARED[own] = ToolEnvServers(Path(__file__).resolve().parents[1], *own)
        yield _SHARED[own]
        if own in _SHARED:  # (the first of the modules sharing it to be torn down ends it)
            _SHARED.pop(own).close()

    @pytest.fixture(name="warm")
    def warm(warm: Any, tool_servers: ToolEnvServers) -> ForkedWarm:
        return ForkedWarm(warm, tool_servers)

    return servers, warm
