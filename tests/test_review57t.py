"""Review of the tie helper (`warmcli.backends.tied_start`): a start whose descriptors the
helper's pipe could land on (a warm started with stdout and stderr closed), the pipe's read
end after a start that failed, and the folders a first build makes. Real C compiler, real
processes, each case in a Python process of its own (its descriptors, its umask)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.access("/usr/bin/cc", os.X_OK),
    reason="the helper is built by /usr/bin/cc, on Linux",
)

ROOT = Path(__file__).resolve().parent.parent


def _python(script: str, tmp_path: Path, shell: str = "", **environ: str) -> str:
    """Run `script` in a Python of its own from this tree (`shell`: a redirection or a
    umask for it, as sh spells them); what it wrote to `out` in `tmp_path`."""
    (tmp_path / "script.py").write_text(script)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OUT=str(tmp_path / "out"), **environ)
    command = f'{shell} exec "{sys.executable}" "{tmp_path / "script.py"}"'
    done = subprocess.run(["/bin/sh", "-c", command], cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0
    return (tmp_path / "out").read_text()


CLOSED = r"""
import os
from warmcli.backends import processes, tied_start
log = os.path.join(os.path.dirname(os.environ["OUT"]), "ran.log")
done = processes.run(["/bin/sh", "-c", 'echo ran >> "$1"; echo out; echo err >&2', "sh", log], 30)
with open(os.environ["OUT"], "w") as out:
    out.write(repr((done.returncode, done.out, done.err, tied_start._Helper.path is not None)))
    out.write(" " + repr(open(log).read()))
"""


@pytest.mark.parametrize("closed", ["1>&- 2>&-", "0<&- 1>&-", "0<&- 1>&- 2>&-"])
def test_a_warm_started_with_standard_descriptors_closed_runs_a_command_once(
    tmp_path: Path, closed: str
) -> None:
    """The helper's pipe took descriptor 1 or 2, where Popen puts the child's stdout and
    stderr: the helper said 'R' into the command's own output, closed it at exec and the
    parent, reading no 'R', took the helper for broken and started the command a second
    time (a compile run twice, the first with stderr closed; the helper then given up)."""
    said = _python(CLOSED, tmp_path, shell=f"exec {closed};")
    assert said == repr((0, "out\n", "err\n", True)) + " " + repr("ran\n")


LEAK = r"""
import os
from warmcli.backends import processes, tied_start
assert tied_start.helper_path() is not None
processes.run(["/bin/true"], 30)
before = sorted(os.listdir("/proc/self/fd"))
failed = []
for cwd in ["/nonexistent-57", "/etc/passwd"] * 5:
    try:
        processes.run(["/bin/true"], 30, cwd=cwd)
    except OSError as exc:
        failed.append(exc.filename == cwd)
after = sorted(os.listdir("/proc/self/fd"))
with open(os.environ["OUT"], "w") as out:
    out.write(repr((len(failed), all(failed), len(after) - len(before))))
"""


def test_a_start_that_fails_before_the_helper_runs_leaves_no_descriptor_open(
    tmp_path: Path,
) -> None:
    """A compiler's folder missing (or no folder): the start raised as Python's does, but
    left the helper's pipe's read end open, one descriptor for each such start."""
    assert _python(LEAK, tmp_path) == repr((10, True, 0))


HOME = r"""
import os
from warmcli import home
from warmcli.backends import processes, tied_start
tied_start.__file__ = "/proc/warm-57/tied_start.py"  # its package folder cannot be written
os.umask(int(os.environ["UMASK"], 8))
path = tied_start.helper_path()
elsewhere = os.path.join(os.path.dirname(os.environ["OUT"]), "elsewhere")
os.mkdir(elsewhere)
done = processes.run(["/bin/sh", "-c", "echo ran"], 30, cwd=elsewhere)  # as a compile runs
with open(os.environ["OUT"], "w") as out:
    out.write(repr((
        bool(path) and path == os.path.abspath(home.in_home("tie/" + os.path.basename(path))),
        path is None or os.path.isabs(path), done.out, tied_start._Helper.path == path,
        home.others_may_write(home.in_home("bundle.warm")),
    )))
"""


@pytest.mark.parametrize("umask", ["0", "022"])
def test_a_helper_built_in_a_new_home_leaves_it_writable_by_nobody_else(
    tmp_path: Path, umask: str
) -> None:
    """The first build, where warm's package folder cannot be written, made warm's home
    (and the folders above it) with `os.makedirs`: under umask 0, writable by every user,
    so warm's default bundle was refused from then on ('... is writable by every user'),
    where `home.make_folder` (warm's own) leaves it 0775."""
    said = _python(HOME, tmp_path, UMASK=umask, WARM_HOME=str(tmp_path / "new" / "home"))
    # (under umask 0 the home is group-writable: no helper is run from it, test_chain57)
    assert said == repr((umask != "0", True, "ran\n", True, ""))


def test_a_relative_warm_home_s_helper_runs_for_a_compile_in_another_folder(
    tmp_path: Path,
) -> None:
    """`WARM_HOME=rel/home`: the helper's path was relative, so a compile started in its own
    folder (`cwd`) looked for it there, failed, and gave the helper up for the process."""
    said = _python(HOME, tmp_path, UMASK="022", WARM_HOME="rel/home")
    assert said == repr((True, True, "ran\n", True, ""))


def test_a_started_process_reads_as_the_command_python_s_start_would_return() -> None:
    """`popen` returned a Popen whose `args` were the helper's (its path, this process's pid,
    the pipe, every PATH candidate): a `TimeoutExpired` or `repr` of it named the helper."""
    from warmcli.backends import tied_start

    assert tied_start.helper_path() is not None
    command = ["sleep", "30"]
    proc = tied_start.popen(command, stdout=subprocess.DEVNULL)
    try:
        with pytest.raises(subprocess.TimeoutExpired) as waited:
            proc.wait(0.01)
        assert proc.args == command and waited.value.cmd == command
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("age", [-365 * 86400.0, 3600.0])
def test_a_failed_build_s_marker_dated_ahead_does_not_hold_the_helper_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, age: float
) -> None:
    """A failed build is remembered a day (its `.failed` marker); one dated ahead (written
    while the clock was ahead) held every build off until the clock passed its date and a
    day more. An hour-old one still holds it off."""
    import time

    from warmcli.backends import tied_start

    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)
    monkeypatch.setattr(tied_start, "_folders", lambda: [str(folder)])
    marker = folder / (tied_start._name() + ".failed")
    marker.touch()
    os.utime(marker, (time.time() - age, time.time() - age))
    made = tied_start._find_or_make()
    assert (made is not None) == (age < 0)
