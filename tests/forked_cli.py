"""`warm` commands run as forks of one process that imported the CLI once: for tests that
run many small commands in a row (each a verdict on a bundle), where Python's start and
the CLI's imports (~0.1 s of CPU a command) were most of the cost.

Each command is still a process of its own: a fork of the server (`_SERVER`, a
`python -c` started in the caller's environment, which imports `warmcli.cli` and its
parser, and nothing of a command), whose child runs `python -m warmcli ARGS` as Python
would (`runpy.run_module("warmcli", run_name="__main__")`, `sys.argv` set, the working
folder changed), its stdout and stderr files, its stdin /dev/null, and which ends through
the interpreter's own exit (its teardown, `atexit`, finalizers, as a started `warm`
does). Not for a test of what a process starts with (its imports, descriptors, limits,
signals ignored, memory peak): those start `python -m warmcli` themselves. The server
owns the child it waits for; the caller owns the server (`close`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The server: one request a line on stdin ({"args", "cwd", "out", "err"}), answered on its
# own copy of stdout, first the child's pid, then its exit code (as subprocess gives it).
_SERVER = r"""
import json, os, runpy, sys
import warmcli.cli, warmcli.cli.app  # the CLI's imports, paid once (no command's)
import importlib
for _m in sorted(set(sys.modules["warmcli.cli.app"].COMMANDS.values())):
    importlib.import_module(f"warmcli.cli.{_m}")
reply = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        reply.close()
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.argv = ["warm", *request["args"]]
        runpy.run_module("warmcli", run_name="__main__", alter_sys=True)
        sys.exit(0)  # (the CLI always exits itself)
    reply.write(json.dumps(pid) + "\n")
    reply.flush()
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    reply.flush()
"""


class ForkedWarm:
    """`warm.forked()`: called as `Warm` is (`run("stats", bundle)`, `timeout=`, `cwd=`),
    returning a `subprocess.CompletedProcess` of text; a server per environment, started
    again where the `Warm`'s environment changed since."""

    def __init__(self, warm: Any, root: Path) -> None:
        self._warm, self._root = warm, root
        self._server: subprocess.Popen[str] | None = None
        self._env: dict[str, str] = {}
        self._scratch = Path(tempfile.mkdtemp(prefix="warm-forked-"))

    def __enter__(self) -> ForkedWarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _started(self) -> subprocess.Popen[str]:
        if self._server is not None and self._env != self._warm.env:
            self._stop()
        if self._server is None:
            self._env = dict(self._warm.env)
            self._server = subprocess.Popen(
                [sys.executable, "-c", _SERVER],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self._env,
                cwd=self._root,
            )  # fmt: skip
        return self._server

    def _line(self, server: subprocess.Popen[str], timeout: float | None) -> Any:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], timeout)
        if not ready:
            return None
        line = server.stdout.readline()
        assert line, "the forking server ended"
        return json.loads(line)

    def __call__(
        self, *args: str | Path, timeout: float = 300, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        server = self._started()
        out, err = self._scratch / "out", self._scratch / "err"
        request = {
            "args": [str(a) for a in args],
            "cwd": str(cwd or self._root),
            "out": str(out),
            "err": str(err),
        }
        assert server.stdin is not None
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = self._line(server, 60)
        assert isinstance(pid, int), "the forking server did not fork"
        code = self._line(server, timeout)
        argv = [sys.executable, "-m", "warmcli", *request["args"]]
        if code is None:  # as `subprocess.run` does: the command killed, then raised
            os.kill(pid, signal.SIGKILL)
            self._line(server, 60)
            raise subprocess.TimeoutExpired(argv, timeout)
        stdout, stderr = out.read_text(), err.read_text()  # (decoded as `subprocess.run` does)
        return subprocess.CompletedProcess(argv, code, stdout, stderr)

    def _stop(self) -> None:
        if self._server is not None:
            assert self._server.stdin is not None
            self._server.stdin.close()
            try:
                self._server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            assert self._server.stdout is not None
            self._server.stdout.close()
            self._server = None

    def close(self) -> None:
        self._stop()
        for name in ("out", "err"):
            (self._scratch / name).unlink(missing_ok=True)
        self._scratch.rmdir()
