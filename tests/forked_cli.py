"""`warm` commands run as forks of one process that imported the CLI once: for tests that
run many small commands (each a verdict on a bundle), where Python's start and the CLI's
imports (~0.2 s of CPU a command) were most of the cost.

Each command is still a process of its own: a fork of a server (`_SERVER`, a `python -c`
started in the test's environment, which imports `warmcli.cli` and loads its commands as
warm does, `app.load`, and runs nothing), whose child takes the command's environment (its
`WARM_*` variables: warm reads every setting at call time, `warmcli.config`) and its
arguments as the bytes a started process is given (`_given`: an ASCII locale decodes them
as its Python would), its working folder (first on `sys.path`, as under `python -m`),
stdout and stderr files of its own and /dev/null as stdin, then runs `python -m warmcli
ARGS` as Python does (`runpy.run_module("warmcli", run_name="__main__")`, `sys.argv` set)
and ends through the interpreter's own exit (its teardown, `atexit`, finalizers), as a
started `warm` does. One server per environment apart from `WARM_*`, and per command that
runs a workload (`_ALONE`: its workload finds imported what a started one's does), kept
while recently used (`Servers`, one a test process, ended with the session). What a fork
cannot give: a hash seed of its own (every command of a server hashes strings alike, as
under one `PYTHONHASHSEED`: a test of what differs between processes by it starts them).
Not for a test of what a process starts with (its imports, descriptors, limits, signals,
memory peak): those start `python -m warmcli` themselves, and `ForkedWarm.popen` starts a
real process. `ForkedWarm.production` forks too, from a production server of
`tests/forked_python.py` (one an environment apart from `WARM_*`, held by `Servers` and
ended with them), which imported numpy and warmcli: a test of what a production process
starts with (its imports, `sys.modules`, descriptors, limits, signals, exit codes, hash
seed, memory peak, floating-point state) runs conftest's plain `Warm(warm.env).production`,
a started process. A module imports `forked_warm` and `forked_made` (fixtures named `warm`
and `made`) to have conftest's, each command forked; `warmed_once` warms a module's workload
once, forked, for its tests to copy.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import pytest

# The server: one request a line on stdin ({"args", "env", "cwd", "out", "err"}), answered
# on its own copy of stdout, first the child's pid, then its exit code (as subprocess's).
_SERVER = r"""
import json, os, runpy, sys
import warmcli.cli  # the CLI's imports, paid once, and those of the commands it loads:
sys.modules["warmcli.cli.app"].app.load(sys.argv[1:])  # ([] all, ["run"] run's, as warm's)
reply = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        reply.close()
        given = lambda text: text.encode("latin-1")  # the bytes a started process is given
        os.environb.clear()
        os.environb.update({given(k): given(v) for k, v in request["env"].items()})
        os.chdir(given(request["cwd"]))
        if sys.path[0] == "":  # `python -m`'s: the working folder, not `python -c`'s ''
            sys.path[0] = os.getcwd()
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.argv = ["warm", *(os.fsdecode(given(a)) for a in request["args"])]
        runpy.run_module("warmcli", run_name="__main__", alter_sys=True)
        sys.exit(0)  # (the CLI always exits itself)
    reply.write(json.dumps(pid) + "\n")
    reply.flush()
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    reply.flush()
"""

# The commands that run a user's workload: each forked from a server that loaded only its
# own module, as `warm run` does, so the workload finds imported only what a started
# `warm run` had (a workload named `decimal.py`, `test_readme36`); every other command from
# one that loaded them all (as `warm --help` does): the modules a command imports can
# change nothing else it says.
_ALONE = ("run", "verify")

_Key = tuple[tuple[tuple[str, str], ...], str]


def _key(env: dict[str, str], args: list[str]) -> _Key:
    """What a server's environment must equal: all but warm's own variables (and the name
    of the test pytest sets, which every test's `warm` copies); and the command it loaded
    (`_ALONE`'s, or '' for all)."""
    mine = ("WARM_", "PYTEST_CURRENT_TEST")
    command = args[0] if args and args[0] in _ALONE else ""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(mine))), command


def _given(text: str) -> str:
    """`text` as the bytes `subprocess` gives a started process (`os.fsencode`), sent as
    the characters of those bytes: the server decodes them as that process's Python would
    (an ASCII locale's surrogate escapes, `os.fsdecode`), not as this process did."""
    return os.fsencode(text).decode("latin-1")


class Servers:
    """The forking servers of one test process, by `_key`, and their scratch folder: the
    `KEPT` last used stay running (each holds 25 to 40 MB; a module whose tests each set a
    variable of their own, a path in `tmp_path`, would otherwise leave one a test)."""

    KEPT = 6  # (the environment most tests share: its `run`, `verify` and all-command servers)

    def __init__(self, root: Path) -> None:
        self.root = root
        self._scratch: Path | None = None  # (`scratch`, made by the first command)
        self._running: dict[_Key, subprocess.Popen[str]] = {}
        self.calls = 0  # (each call's own stdout and stderr files, removed once read)
        self._pythons: Any = None  # (`ForkedWarm.production`'s, made on first use)

    @property
    def scratch(self) -> Path:
        """The folder of the commands' stdout and stderr files, made on first use: a module's
        `Servers` is made as it is imported (collected: by every pytest worker), and only the
        worker that runs its tests ends it (`close`), so one made then was left in `TMPDIR`."""
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="warm-forked-"))
        return self._scratch

    def pythons(self, env: dict[str, str]) -> Any:
        """The production server (`tests/forked_python.ForkedPython`) for `env`: one an
        environment apart from `WARM_*`, the `KEPT` last used running, ended by `close`."""
        from forked_python import ForkedPythons

        if self._pythons is None:
            self._pythons = ForkedPythons(self.root, kept=self.KEPT)
        return self._pythons(env)

    def server(self, env: dict[str, str], args: list[str] | None = None) -> subprocess.Popen[str]:
        key = _key(env, args or [])
        running = self._running.pop(key, None)  # (put back last: the most recently used)
        if running is None or running.poll() is not None:
            running = subprocess.Popen(
                [sys.executable, "-c", _SERVER, *filter(None, [key[1]])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                cwd=self.root,
            )  # fmt: skip
        self._running[key] = running
        while len(self._running) > self.KEPT:
            _end(self._running.pop(next(iter(self._running))))
        return running

    def close(self) -> None:
        for server in self._running.values():
            _end(server)
        self._running.clear()
        if self._pythons is not None:
            self._pythons.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def _end(server: subprocess.Popen[str]) -> None:
    """A server ended: its stdin closed (it ends its loop), killed if it has not in 30 s."""
    assert server.stdin is not None and server.stdout is not None
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    server.stdout.close()


def _line(server: subprocess.Popen[str], timeout: float | None) -> Any:
    assert server.stdout is not None
    return read_line(server.stdout, timeout)


def read_line(stream: IO[str], timeout: float | None) -> Any:
    """The next JSON line a server writes on `stream` (a pipe), waited for at most `timeout`
    seconds in all (None: no line by then). Read a byte at a time from its descriptor, never
    through the file object: its `readline` reads ahead, so a child's exit-code line written
    just after its pid line (a command done before the test read the pid) sat in the
    object's buffer while `select` waited on the empty pipe for the whole timeout, the kill
    then went to a reaped pid and every later call read the other's line."""
    fd, line = stream.fileno(), b""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], left)[0]:
            return None
        byte = os.read(fd, 1)
        assert byte, "the forking server ended"
        line += byte
    return json.loads(line)


class ForkedWarm:
    """A `Warm` (`conftest`) whose calls (`run("stats", bundle)`, `timeout=`, `cwd=`) are
    forks of a server of `servers`, each returning a `subprocess.CompletedProcess` of text
    as `Warm`'s do; in the `Warm`'s environment as it is at each call."""

    def __init__(self, warm: Any, servers: Servers) -> None:
        self._warm, self._servers = warm, servers

    @property
    def env(self) -> dict[str, str]:
        return self._warm.env  # type: ignore[no-any-return]

    @env.setter
    def env(self, env: dict[str, str]) -> None:
        self._warm.env = env

    def __call__(
        self, *args: str | Path, timeout: float = 300, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        texts = [str(a) for a in args]
        server = self._servers.server(self.env, texts)
        self._servers.calls += 1  # (a file no command a timeout left running writes to)
        out, err = (self._servers.scratch / f"{self._servers.calls}.{n}" for n in ("out", "err"))
        request = {
            "args": [_given(a) for a in texts],
            "env": {_given(k): _given(v) for k, v in self.env.items()},
            "cwd": _given(str(cwd or self._servers.root)),
            "out": str(out),
            "err": str(err),
        }
        assert server.stdin is not None
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = _line(server, 120)
        assert isinstance(pid, int), "the forking server did not fork"
        code = _line(server, timeout)
        argv = [sys.executable, "-m", "warmcli", *texts]
        if code is None:  # as `subprocess.run` does: the command killed, then raised
            os.kill(pid, signal.SIGKILL)
            _line(server, 60)
            raise subprocess.TimeoutExpired(argv, timeout)
        stdout, stderr = out.read_text(), err.read_text()  # (decoded as `subprocess.run` does)
        out.unlink()
        err.unlink()
        return subprocess.CompletedProcess(argv, code, stdout, stderr)

    def json(self, *args: str | Path) -> Any:
        """As `Warm.json`: the command's `--json` document (asserted exit 0)."""
        proc = self(*args, "--json")
        assert proc.returncode == 0, proc.stderr + proc.stdout
        return json.loads(proc.stdout)

    def with_env(self, **env: str) -> ForkedWarm:
        """`Warm.with_env`, forked: `env` over this environment, each command still forked
        (from this server where `env` sets only `WARM_*` variables)."""
        return ForkedWarm(self._warm.with_env(**env), self._servers)

    def popen(self, *args: Any, **options: Any) -> Any:
        """`Warm.popen`: a command to signal or wait on is a process started as always."""
        return self._warm.popen(*args, **options)

    def production(self, code: str, *args: str | Path, bundle: Path | None = None) -> Any:
        """`Warm.production`, forked: `code` run as `python -c code *args` in this
        environment (over `bundle` through `WARM_BUNDLE`, if given), in the repository's
        root, its exit 0 asserted (its stderr shown), the JSON it prints returned; a fork
        of the `servers`' production server for this environment
        (`tests/forked_python.py`, which imported numpy and warmcli once)."""
        from forked_python import produced

        return produced(self._servers.pythons(self.env), self._warm, code, *args, bundle=bundle)


# A module of verdict commands, none of how a process starts, imports these two (`from
# forked_cli import forked_made, forked_warm`): conftest's `warm` and `made`, each command
# of theirs forked.
@pytest.fixture(name="warm")
def forked_warm(warm: Any, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once."""
    return forked(warm)


@pytest.fixture(name="made", scope="module")
def forked_made(made: tuple[Any, Path], forking_servers: Any) -> tuple[Any, Path]:
    """conftest's `made`, its `warm` forked as `forked_warm`'s is."""
    warm, good = made
    return ForkedWarm(warm, forking_servers), good


def warmed_once(folder: Path, workload: str, servers: Servers) -> Path:
    """`folder` holding `w.py` (`workload`'s text), `b.warm` (`warm run w.py -b b.warm -q`,
    a fork of `servers`' in the tests' environment apart from `WARM_*`) and `home`, the warm
    home that warmed it: a module fixture's, which each test copies with conftest's
    `as_run_in` (as a run in its `tmp_path` would leave them)."""
    from conftest import Warm

    (folder / "w.py").write_text(workload)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")), servers)
    done = warm("run", folder / "w.py", "-b", folder / "b.warm", "-q")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return folder
