"""trial45a: warm used interactively, a production session in the plain `python` REPL driven
through a pseudo-terminal, Ctrl-C typed (the terminal's SIGINT to its foreground group) in the
middle of a tune that the bundle lacked, and at the prompt; the session goes on, its later
results match a cold process's, its exit report names the tune the Ctrl-C cut short, and the
bundle verifies."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import ForkedWarm, forked_warm  # noqa: F401  (a fixture: verify, stats forked)

WORKLOAD = r'''
import os
import numpy as np
from warmcli import Kernel, Runtime, Tunable

DEVICE = "host"

SCALE = Kernel(
    "void scale(float *x, int n, float a) { for (int i = 0; i < n; i++) x[i] = x[i] * a + 1.0f; }",
    "scale", "Pif",
)
SRC = r"""
void rsum(const float *x, float *out, int n, long rep) {
  for (long r = 0; r < rep; r++) {
    double acc = 0;
    for (int i = 0; i < n; i += STEP)
      for (int j = i; j < i + STEP && j < n; j++) acc += x[j] * (r + 1);
    out[0] = (float)acc;
  }
}
"""


def launch_rsum(rt, k, x, out, n, rep, *, stream=None):
    if rep > 100 and os.environ.get("MARK"):  # a measuring under way, said to the test
        open(os.environ["MARK"], "a").close()
    rt.launch(k, x, out, n, rep, stream=stream)


RSUM = Tunable(
    name="rsum",
    candidates={
        f"s{s}": Kernel(SRC, "rsum", "PPil", defines={"STEP": s}, name="rsum") for s in (1, 2)
    },
    launch=launch_rsum,
)


def workload(rt: Runtime) -> None:
    x = rt.upload(np.arange(1024, dtype=np.float32))
    rt.launch(SCALE, x, 1024, 2.0)
    out = rt.buffer(1, "float32")
    rt.tune(RSUM, x, out, 1024, 10)
'''

SETUP = "import numpy as np, warmcli, wl; rt = warmcli.runtime()"
# what a cell computes, in the session and in a cold process alike: one line of results
RESULTS = (
    "z = rt.upload(np.arange(1024, dtype=np.float32)); rt.launch(wl.SCALE, z, 1024, 3.0); "
    "o = rt.buffer(1, 'float32'); rt.tune(wl.RSUM, z, o, 1024, 10); "
    "print('RESULT', rt.read(z).tobytes().hex()[:64], rt.read(z).sum(), rt.read(o)[0])"
)


class Terminal:
    """A process on a pseudo-terminal: what it writes read until a text appears (never a
    fixed sleep), what is typed sent to it (Ctrl-C as the terminal's `\\x03`)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the session's process, its terminal the pty
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.seen = b""

    def _more(self, timeout: float) -> bool:
        if not select.select([self.fd], [], [], timeout)[0]:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the session ended (EIO)
            data = b""
        self.seen += data
        return bool(data)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        """What it wrote up to and including `text`'s first appearance since the last."""
        end, want = time.monotonic() + timeout, text.encode()
        while want not in self.seen:
            if time.monotonic() > end or not self._more(min(0.2, end - time.monotonic())):
                raise AssertionError(f"no {text!r} in: {self.seen.decode(errors='replace')}")
        cut = self.seen.index(want) + len(want)
        out, self.seen = self.seen[:cut], self.seen[cut:]
        return out.decode(errors="replace")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def cell(self, line: str) -> str:
        self.type(line + "\n")
        return self.wait_for(">>> ")

    def interrupt_prompt(self) -> str:
        """Ctrl-C at the prompt, typed again where the REPL missed it: CPython's readline loses
        a SIGINT that lands after the prompt is shown but before it waits for input."""
        for _ in range(20):
            self.type("\x03")
            try:
                return self.wait_for("KeyboardInterrupt\r\n>>> ", timeout=3)
            except AssertionError:
                continue
        raise AssertionError(f"Ctrl-C at the prompt never answered: {self.seen!r}")

    def end(self, timeout: float = 120) -> tuple[str, int]:
        """Everything it wrote until it ended, and its wait status."""
        end = time.monotonic() + timeout
        while self._more(0.2):
            assert time.monotonic() < end, self.seen.decode(errors="replace")
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return self.seen.decode(errors="replace"), status


@pytest.fixture(scope="module")
def warmed_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """A folder holding `wl.py`, `b.warm` (its bundle, `warm run` there: forked, as the
    module's `warm`) and `home`, the warm home that warmed it (once for the module)."""
    folder = tmp_path_factory.mktemp("warmed45a")
    (folder / "wl.py").write_text(WORKLOAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(
        Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")), forking_servers
    )
    run = warm("run", folder / "wl.py", "--bundle", folder / "b.warm", "-q", cwd=folder)
    assert run.returncode == 0, run.stderr
    return folder


@pytest.fixture
def warmed(warm: Warm, tmp_path: Path, warmed_once: Path) -> Path:
    """The workload `wl.py` in `tmp_path`, warmed into `tmp_path / 'b.warm'` (`warmed_once`'s
    copied, with the home that warmed it as `warm`'s home, as a run there leaves them: each
    test writes back into its own)."""
    shutil.copytree(warmed_once, tmp_path, dirs_exist_ok=True, symlinks=True)
    assert warm.env["WARM_HOME"] == str(tmp_path / "home")
    return tmp_path / "b.warm"


def _env(warm: Warm, folder: Path, **more: str) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([root, str(folder)])
    return dict(warm.env, PYTHONPATH=path, TERM="dumb", **more)


def test_repl_ctrl_c_in_a_tune_is_reported_and_the_session_goes_on(
    warm: Warm, warmed: Path, tmp_path: Path
) -> None:
    """A production REPL with write-back: a Ctrl-C typed while a tune the bundle lacked is
    measured raises KeyboardInterrupt there, the session goes on (Ctrl-C at the prompt too),
    its later results are a cold process's, and the exit report names the tune the Ctrl-C cut
    short, as README says (it said "served everything" of a process that missed nothing else:
    the hot report's shortcut counted failed tunes, not interrupted ones)."""
    mark = tmp_path / "measuring"
    env = _env(warm, tmp_path, WARM_BUNDLE=str(warmed), WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    cold = subprocess.run(
        [sys.executable, "-c", f"{SETUP}; {RESULTS}"],
        env=dict(env, WARM_BUNDLE=""),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cold.returncode == 0, cold.stderr
    session = Terminal([sys.executable, "-q"], dict(env, MARK=str(mark)), tmp_path)
    session.wait_for(">>> ")
    session.cell(f"{SETUP}; wl.workload(rt)")
    session.cell("big = rt.upload(np.ones(1 << 16, np.float32)); out = rt.buffer(1, 'float32')")
    session.type("rt.tune(wl.RSUM, big, out, 1 << 16, 5000); print('tuned')\n")
    deadline = time.monotonic() + 60
    while not mark.exists():  # its measuring under way
        assert time.monotonic() < deadline, session.seen
        session._more(0.05)
    session.type("\x03")
    cut = session.wait_for(">>> ")
    assert "KeyboardInterrupt" in cut and "tuned" not in cut.replace("print('tuned')", "")
    session.interrupt_prompt()
    result = session.cell(RESULTS)
    assert [ln for ln in result.splitlines() if ln.startswith("RESULT")] == [cold.stdout.strip()]
    session.type("\x04")
    text, status = session.end()
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "served everything" not in text, text
    assert "(measuring interrupted: nothing stored)" in text, text
    assert "tune rsum float32[65536] float32[1] 65536 5000" in text, text
    check = warm("verify", warmed)
    assert check.returncode == 0, check.stdout + check.stderr
    stats = json.loads(warm("stats", warmed, "--json").stdout)
    assert (len(stats["tunes"]), len(stats["kernels"])) == (1, 3)  # nothing cut short stored


def test_a_report_asked_before_exit_says_the_write_back_is_still_to_come(
    warm: Warm, warmed: Path, tmp_path: Path
) -> None:
    """`warmcli.report()` asked in a cell of a session writing back said `(written back into
    it)` of misses only the exit writes back: a notebook killed after reading it lost them.
    Before the exit it says they are still to be written; the exit's report, once written,
    says they were."""
    code = (
        f"{SETUP}; from warmcli import Kernel; x = rt.upload(np.ones(8, np.float32)); "
        "rt.launch(Kernel('void neg(float *x){x[0]=-x[0];}', 'neg', 'P'), x); "
        "print(warmcli.report(), flush=True); import sys; sys.stdin.readline()"
    )
    env = _env(warm, tmp_path, WARM_BUNDLE=str(warmed), WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    session = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert session.stdout is not None and session.stdin is not None
    asked = session.stdout.readline()
    assert "lacked 1 kernel(s)" in asked and "(to be written back into it at exit)" in asked
    before = json.loads(warm("stats", warmed, "--json").stdout)
    assert len(before["kernels"]) == 3  # nothing written yet, as the report said
    _, err = session.communicate("", timeout=120)  # (its stdin closed: the session ends)
    assert session.returncode == 0, err
    assert "lacked 1 kernel(s) and 0 tune(s)" in err and "(written back into it)" in err, err
    assert len(json.loads(warm("stats", warmed, "--json").stdout)["kernels"]) == 4


@pytest.mark.parametrize("ending", ["pass", "sys.exit(0)"])
def test_ctrl_c_in_the_exit_write_back_ends_by_sigint_however_the_main_code_ended(
    warm: Warm, warmed: Path, tmp_path: Path, ending: str
) -> None:
    """A session ended with `exit()` (SystemExit in the main code, as a REPL's `exit()` or a
    script's `sys.exit(0)`) whose write-back a Ctrl-C stopped while it waited for another
    writer's lock ended with status 0, where one that ran to its end (a REPL's Ctrl-D) ended
    by SIGINT: README says a Ctrl-C that stops a write-back ends the process by SIGINT."""
    import signal

    code = (
        f"{SETUP}; import sys; from warmcli import Kernel; x = rt.upload(np.ones(8, np.float32))\n"
        "rt.launch(Kernel('void neg(float *x){x[0]=-x[0];}', 'neg', 'P'), x)\n"
        f"print('ending', flush=True)\n{ending}\n"
    )
    session, _, err = ctrl_c_in_write_back(warm, tmp_path, warmed, code)
    assert session.returncode == -signal.SIGINT, err
    assert "could not write back into the bundle: interrupted" in err, err
    assert len(json.loads(warm("stats", warmed, "--json").stdout)["kernels"]) == 3


def ctrl_c_in_write_back(
    warm: Warm, tmp_path: Path, warmed: Path, code: str
) -> tuple[subprocess.Popen[str], str, str]:
    """`python -c code` over `warmed` with write-back on, sent SIGINT (a Ctrl-C) once it has
    printed `ending` and its exit's write-back has opened the lock file, which another writer
    holds: the process, its stdout and its stderr."""
    import fcntl
    import signal

    env = _env(warm, tmp_path, WARM_BUNDLE=str(warmed), WARM_BUNDLE_WRITE="1")
    with open(f"{warmed}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another writer's, held: the write-back waits
        session = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert session.stdout is not None
        assert session.stdout.readline() == "ending\n"
        fds, deadline = Path(f"/proc/{session.pid}/fd"), time.monotonic() + 60
        while not any(target.endswith(".lock") for target in _links(fds)):
            assert time.monotonic() < deadline, "its write-back never opened the lock file"
            time.sleep(0.01)
        session.send_signal(signal.SIGINT)  # Ctrl-C, in the write-back's wait
        out, err = session.communicate(timeout=120)
    return session, out, err


def _links(fds: Path) -> list[str]:
    """The files a process has open (`/proc/PID/fd`): those still open as they are read."""
    targets = []
    with contextlib.suppress(OSError):  # (it ended)
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):  # (closed meanwhile)
                targets.append(os.readlink(fd))
    return targets
