"""What the tests of two warms over one bundle share (`test_upgrade42` and others): the production
script that serves a workload (`SERVE`: its results' digest, what it compiled and tuned, as
JSON; `meeting(script)`, `MEETING` of `SERVE`: processes started at once meeting once each
one's first launch is served or built, so none writes back before all have looked their
first kernel up), a `warm run -q`'s `stored` line (`stored`), a file's digest, a bundle's
kernel and tune keys (`keys`), an earlier release's checkout (`release`: a folder where one
is, else a `git worktree` of its commit made for the test module, or skipped), `TwoWarms`,
the CLI of either warm (the checkout given) run from a folder that is no warm checkout, so
`python -m warmcli` is the one on PYTHONPATH (or, given `Servers`, a fork of a process that
imported that warm's CLI once, `tests/forked_cli.py`), and `Fleet`, both warms over one
folder: their CLI, production processes and pre-builds. Real processes throughout; nothing
here is a fake."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, compile_warm
from forked_cli import ForkedWarm, Servers

SERVE = """
import hashlib, json, runpy, sys, warmcli
rt = warmcli.runtime("host")
ys = runpy.run_path(sys.argv[1])["workload"](rt)
digest = hashlib.sha256(b"".join(rt.read(y).tobytes() for y in ys)).hexdigest()
done = warmcli.report()
print(json.dumps({"digest": digest, "compiled": len(done.kernels),
                  "tuned": sorted(t.name.split()[0] for t in done.tunes)}))
"""


_MEET = """import os, time
first = rt.launch
def launch(*args, **kwargs):
    del rt.launch
    done = first(*args, **kwargs)
    meet = os.environ["MEET"]
    open(os.path.join(meet, str(os.getpid())), "w").close()
    end = time.monotonic() + 120
    while len(os.listdir(meet)) < int(os.environ["MEET_N"]) and time.monotonic() < end:
        time.sleep(0.01)
    return done
rt.launch = launch
"""


def meeting(script: str) -> str:
    """`script` (`SERVE`'s form), each process's first launch (the workload's first kernel
    keyed: served or built) followed by a meeting of `MEET_N` processes in the folder `MEET`
    (each marks it, then waits for all, 120 s at most): none writes back (at exit) before
    every one has looked that kernel up. A build is served wherever its binary runs (README),
    another toolchain's too: a process that keys a kernel after another's write-back
    committed is served that one's build, and has none of its own to write back."""
    assert script.count("ys = runpy") == 1, "no runtime's workload run to meet in"
    return script.replace("ys = runpy", _MEET + "ys = runpy")


MEETING = meeting(SERVE)


STORED = "bundle {}: stored {} new kernel(s) and {} new tune(s)"


def stored(out: str) -> str:
    """The `stored` line of a `warm run -q`'s output: its first but for the notes before it
    (`  note: bundle holds 7 kernel(s) ... built by '<another cc>': this run builds its own`,
    where the bundle holds another toolchain's builds of what it runs)."""
    lines = out.splitlines()
    done = [ln for ln in lines if not ln.startswith("  note: ")]
    assert done and done[0].startswith("bundle "), out
    return done[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def keys(path: Path) -> tuple[list[str], list[str]]:
    """A bundle's kernel keys and its tune keys (hex), each sorted, read only."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        kernels = sorted(str(k) for (k,) in db.execute("SELECT key FROM kernels"))
        tunes = sorted(bytes(k).hex() for (k,) in db.execute("SELECT key FROM tunes"))
    return kernels, tunes


def release(commit: str, checkout: Path) -> Iterator[Path]:
    """A release's warm, for a module fixture: `checkout` where it holds one, else a
    `git worktree` of `commit` made for the module (and removed after); skipped where
    neither can be had. Its modules are compiled to bytecode first, as this warm's are
    (`conftest.compile_warm`): under PYTHONDONTWRITEBYTECODE each of its processes, and each
    command a fork of its server ran, compiled every module it imported again."""
    if (checkout / "warmcli").is_dir():
        compile_warm(checkout)
        yield checkout
        return
    made = Path(os.environ.get("TMPDIR", "/tmp")) / f"warm-{checkout.name}-{os.getpid()}"
    git = ["git", "-C", str(ROOT)]
    done = subprocess.run([*git, "worktree", "add", "-q", "--detach", str(made), commit],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"no warm of {commit} here ({done.stderr.strip()[:200]})")
    try:
        compile_warm(made)
        yield made
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(made)], capture_output=True)


class TwoWarms:
    """Either warm's CLI over `folder` (its own `WARM_HOME`), the workload at `folder/wl.py`;
    each command a fork of `servers`' (made over `folder`, no warm checkout, so each server
    imports the warm its PYTHONPATH names) where given."""

    def __init__(self, folder: Path, servers: Servers | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        self.env = dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")
        self.folder = folder
        self.workload = folder / "wl.py"
        self.servers = servers

    def cli(self, code: Path, *args: object, **env: str) -> subprocess.CompletedProcess[str]:
        """`python -m warmcli ARGS` of the warm checked out at `code`."""
        if self.servers is not None:
            assert self.servers.root == self.folder, "a server's folder imports no warm"
            whose = SimpleNamespace(env=dict(self.env, PYTHONPATH=str(code), **env))
            return ForkedWarm(whose, self.servers)(*map(str, args), cwd=self.folder)
        return subprocess.run(
            [sys.executable, "-m", "warmcli", *map(str, args)],
            capture_output=True, text=True, timeout=300, cwd=self.folder,
            env=dict(self.env, PYTHONPATH=str(code), **env),
        )  # fmt: skip


class Fleet(TwoWarms):
    """Both warms over one folder (`TwoWarms`): `new` is today's, `old` the release's; the
    CUDA workload at `folder/cwl.py`."""

    def __init__(self, folder: Path, old: Path, servers: Servers | None = None) -> None:
        super().__init__(folder, servers)
        self.new, self.old, self.cuda = ROOT, old, folder / "cwl.py"

    def ok(self, code: Path, *args: object, **env: str) -> str:
        """The output of a command that must succeed, reading nothing as "corrupt"."""
        done = self.cli(code, *args, **env)
        assert done.returncode == 0, (code, args, done.stdout + done.stderr)
        assert "corrupt" not in done.stdout + done.stderr, done.stdout + done.stderr
        return done.stdout

    def serving(
        self,
        code: Path,
        bundle: Path | str | None,
        workload: Path | None = None,
        *,
        script: str = SERVE,
        **env: str,
    ) -> subprocess.Popen[str]:
        """A production process of the workload started, served `bundle` (None: cold), running
        `script` (`SERVE`, or `MEETING` with `MEET` and `MEET_N` in `env`)."""
        more = {"WARM_BUNDLE": str(bundle)} if bundle is not None else {}
        return subprocess.Popen(
            [sys.executable, "-c", script, str(workload or self.workload)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.folder,
            env=dict(self.env, PYTHONPATH=str(code), **more, **env),
        )  # fmt: skip

    @staticmethod
    def served(process: subprocess.Popen[str]) -> dict[str, object]:
        """What a `serving` process computed, compiled and tuned itself."""
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        return json.loads(out)

    def serve(
        self, code: Path, bundle: Path | str | None, workload: Path | None = None, **env: str
    ) -> dict[str, object]:
        return self.served(self.serving(code, bundle, workload, **env))

    def warm(
        self, code: Path, bundle: Path, *more: object, cuda: bool = True, **env: str
    ) -> list[str]:
        """The `stored` lines of a host and (`cuda`) an `--arch sm_90` run into `bundle`."""
        runs = [(self.workload,), (self.cuda, "--arch", "sm_90")][: 2 if cuda else 1]
        return [
            stored(self.ok(code, "run", *run, "-b", bundle, "-q", *more, **env)) for run in runs
        ]

    def pycuda(self, code: Path, bundle: Path, **env: str) -> str:
        """The `stored` line of an `--arch sm_90` run of the PyCUDA script `folder/pyc.py`."""
        script = self.folder / "pyc.py"
        done = self.ok(
            code, "run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", bundle, **env
        )
        return stored(done)
