"""Production scripts (`python -c CODE ARGS`, `python SCRIPT ARGS`) run as forks of one
process that imported numpy and warmcli once: for a module of many small production
processes whose results are what is tested (the same bytes cold, hit and missed), where
Python's start and those imports were most of each one's cost.

Each script is still a process of its own: a fork of a server (`_SERVER`, a `python -c`
started in the module's environment apart from `WARM_*` and pytest's name of the test
running, which imports numpy and warmcli and makes no runtime), whose child takes the
script's whole environment (warm reads every setting at call time), working folder,
`sys.argv` and `sys.path[0]` as Python gives them (`['-c', *args]` and '', or the
script's path and folder), stdout and stderr files of its own and /dev/null as stdin, runs
the code as `__main__` (a script's `__file__` set) and ends through the interpreter's own
exit (`atexit`: warm's report and write-back). Not for a test of how a process starts
(its imports, signals, exit codes, limits, hash seed, what it finds imported: numpy and
`warmcli`'s own are the server's): those start Python themselves, as `tests/forked_cli.py`
says of `warm` commands. `ForkedWarm.production` (`tests/forked_cli.py`) runs its scripts
here, through `produced`, from servers its `Servers` holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from forked_cli import read_line

# One request a line on stdin ({"code" or "path", "args", "env", "cwd", "out", "err"}), answered on
# the server's own copy of stdout: the child's pid, then its exit code (as subprocess's).
_SERVER = r"""
import json, os, runpy, sys
import numpy, warmcli  # the imports a production script pays, paid once
reply = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        reply.close()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        if request["path"] is None:  # `python -c CODE ARGS`
            sys.argv = ["-c", *request["args"]]
            sys.path[0] = ""
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
        else:  # `python PATH ARGS`: its folder first on sys.path, its __file__ set
            sys.argv = [request["path"], *request["args"]]
            sys.path[0] = os.path.dirname(request["path"])
            runpy.run_path(request["path"], run_name="__main__")
        sys.exit(0)
    reply.write(json.dumps(pid) + "\n")
    reply.flush()
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    reply.flush()
"""


def _shared(env: dict[str, str]) -> dict[str, str]:
    """What of `env` a server's must equal: all but warm's own variables and the name of
    the test pytest sets."""
    return {k: v for k, v in env.items() if not k.startswith(("WARM_", "PYTEST_CURRENT_TEST"))}


class ForkedPython:
    """A server of production scripts for one environment (`_shared`); `run` returns a
    `subprocess.CompletedProcess` of text as `subprocess.run` does."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.base = _shared(env)
        self.scratch = Path(tempfile.mkdtemp(prefix="warm-forked-py-"))
        self.calls = 0
        self.server = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.base, cwd=cwd,
        )  # fmt: skip

    def _line(self, timeout: float) -> object:
        assert self.server.stdout is not None
        return read_line(self.server.stdout, timeout)  # (never `readline`: it reads ahead)

    def run(
        self,
        code: str | Path,
        *args: str,
        env: dict[str, str],
        cwd: Path,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """`python -c code *args` (`python code *args` where `code` is a script's Path) in
        `env`, whose `_shared` part must be the server's."""
        assert _shared(env) == self.base
        self.calls += 1
        out, err = (self.scratch / f"{self.calls}.{n}" for n in ("out", "err"))
        path = str(code) if isinstance(code, Path) else None
        request: dict[str, Any] = {"code": None if path else code, "path": path}
        request.update(args=list(args), env=env, cwd=str(cwd))
        assert self.server.stdin is not None
        self.server.stdin.write(json.dumps({**request, "out": str(out), "err": str(err)}))
        self.server.stdin.write("\n")
        self.server.stdin.flush()
        pid = self._line(120)
        assert isinstance(pid, int), "the forking server did not fork"
        code_ = self._line(timeout)
        argv = [sys.executable, *([path] if path else ["-c", str(code)]), *args]
        if code_ is None:
            os.kill(pid, signal.SIGKILL)
            self._line(60)
            raise subprocess.TimeoutExpired(argv, timeout)
        stdout, stderr = out.read_text(), err.read_text()
        out.unlink()
        err.unlink()
        assert isinstance(code_, int)
        return subprocess.CompletedProcess(argv, code_, stdout, stderr)

    def close(self) -> None:
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        self.server.stdout.close()
        for left in self.scratch.iterdir():
            left.unlink()
        self.scratch.rmdir()


def produced(
    server: ForkedPython, warm: Any, code: str, *args: object, bundle: Path | None = None
) -> Any:
    """conftest's `Warm.production`, forked from `server`: `code` run with `args` in `warm`'s
    environment (over `bundle` through `WARM_BUNDLE`, if given) in the repository's root,
    its exit 0 asserted; the JSON it prints."""
    env = dict(warm.env, **({"WARM_BUNDLE": str(bundle)} if bundle is not None else {}))
    root = Path(__file__).resolve().parents[1]
    proc = server.run(code, *map(str, args), env=env, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


class ForkedPythons:
    """A test module's `ForkedPython` servers (or a test process's: `forked_cli.Servers`
    holds one for `ForkedWarm.production`), one per environment (`_shared`: one apart from
    WARM_*), made on first use; with `kept`, only that many last used stay running (a module
    whose tests each set a variable of their own would otherwise leave one a test); `close`
    ends them all (a module fixture's teardown, or the session's)."""

    def __init__(self, cwd: Path, kept: int | None = None) -> None:
        self.cwd, self.kept, self._servers = cwd, kept, dict[str, ForkedPython]()

    def __call__(self, env: dict[str, str]) -> ForkedPython:
        shared = json.dumps(_shared(env), sort_keys=True)
        server = self._servers.pop(shared, None)  # (put back last: the most recently used)
        if server is None or server.server.poll() is not None:
            if server is not None:
                server.close()
            server = ForkedPython(env, self.cwd)
        self._servers[shared] = server
        while self.kept is not None and len(self._servers) > self.kept:
            self._servers.pop(next(iter(self._servers))).close()
        return server

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()
