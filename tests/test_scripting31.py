"""warm driven from shell scripts and pipelines: output that cannot be written.

Every command's stdout redirected to a full disk (`> /dev/full`), or into a pipe whose
reader has gone (`| false`), and warm's standard streams closed by the script (`>&-`,
`2>&-`, `<&-`): one line on stderr and a non-zero exit (2 for a disk that refuses the
output, 1 for a reader gone, the error's own code on an error path), never a traceback;
with a standard stream closed, the command does its work as with /dev/null there. All
through `python -m warmcli`, as the real `warm` command runs it: started, where the test is
of the process's own streams, locale, home or shell; a fork of a process that imported
the CLI once (`tests/forked_cli.py`, the module's `warm`) where it is of what a command
says of its arguments (URLs and names no UTF-8 spells, names too long, an empty bundle).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, its commands forked)

from tests.conftest import EXAMPLES, ROOT, Warm, nvcc_or_skip

HOST = EXAMPLES / "matmul_host.py"


@pytest.fixture(scope="module")
def scripted(
    tmp_path_factory: pytest.TempPathFactory, made_once: Path, forking_servers: Any
) -> dict[str, Path]:
    """One host bundle warmed by `warm run` (conftest's `made_once`, the host example's
    `warm run -b B -q`, copied), a signing key, and a folder to write in."""
    from forked_cli import ForkedWarm

    where = tmp_path_factory.mktemp("scripting31")
    bundle = Path(shutil.copyfile(made_once / "good.warm", where / "host.warm"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(where / "home"), COLUMNS="200")  # (the `warm` fixture's server)
    warm = ForkedWarm(Warm(env), forking_servers)
    proc = warm("keygen", where / "k.key")
    assert proc.returncode == 0, proc.stderr
    return {"bundle": bundle, "key": where / "k.key", "dir": where}


def _commands(scripted: dict[str, Path]) -> dict[str, Callable[[], list[str | Path]]]:
    """Each command, as a script runs it; one that writes is given a fresh copy."""
    b, d = scripted["bundle"], scripted["dir"]

    def copy(name: str) -> Path:
        shutil.copy(b, d / name)
        return d / name

    def new_key() -> Path:
        for stale in (d / "n.key", d / "n.key.pub"):
            stale.unlink(missing_ok=True)
        return d / "n.key"

    return {
        "version": lambda: ["--version"],
        "help": lambda: ["stats", "--help"],
        "stats": lambda: ["stats", b],
        "stats --json": lambda: ["stats", b, "--json"],
        "verify": lambda: ["verify", b],
        "check --json": lambda: ["check", b, "--json"],
        "diff": lambda: ["diff", b, b],
        "devices --json": lambda: ["devices", "--json"],
        "clean": lambda: ["clean", copy("c.warm"), "--dry-run"],
        "merge --json": lambda: ["merge", b, "-o", d / "m.warm", "--force", "--json"],
        "sign": lambda: ["sign", copy("s.warm"), "--key", scripted["key"]],
        "keygen --json": lambda: ["keygen", new_key(), "--json"],
        "run": lambda: ["run", HOST, "-b", copy("r.warm"), "--no-verify"],
        "run --json": lambda: ["run", HOST, "-b", copy("r.warm"), "--no-verify", "--json"],
    }


COMMANDS = list(_commands({"bundle": Path(), "key": Path(), "dir": Path()}))


def _warm(
    warm: Warm, args: list[str | Path], *, stdout: int, shell: str = ""
) -> subprocess.CompletedProcess[str]:
    """`python -m warmcli ARGS` with stdout on `stdout` (a descriptor), under `sh` with
    the redirections `shell` adds (`2>&-`) where given; stderr is captured."""
    argv = [sys.executable, "-m", "warmcli", *map(str, args)]
    if shell:
        argv = ["sh", "-c", f'"$@" {shell}', "sh", *argv]
    return subprocess.run(
        argv, stdout=stdout, stderr=subprocess.PIPE, text=True, env=warm.env, timeout=300, cwd=ROOT
    )


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr and "Error:" not in proc.stderr, proc.stderr
    return proc.stderr.splitlines()


@pytest.mark.parametrize("name", COMMANDS)
def test_stdout_on_a_full_disk_is_one_line_and_exit_2(
    warm: Warm, scripted: dict[str, Path], name: str
) -> None:
    """`warm CMD > /dev/full`: every command but stats printed an OSError traceback (exit 1),
    stats one line and exit 2."""
    with open("/dev/full", "w") as full:
        proc = _warm(warm, _commands(scripted)[name](), stdout=full.fileno())
    lines = _no_traceback(proc)
    assert proc.returncode == 2, (proc.returncode, lines)
    assert [line for line in lines if line.startswith("warm: error:")] == lines[-1:], lines
    assert "No space left on device" in lines[-1], lines


@pytest.mark.parametrize("name", COMMANDS)
def test_stdout_into_a_pipe_nobody_reads_is_exit_1_and_nothing_said(
    warm: Warm, scripted: dict[str, Path], name: str
) -> None:
    """`warm CMD | false`: `warm --version` printed a BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone before warm writes
    try:
        proc = _warm(warm, _commands(scripted)[name](), stdout=write)
    finally:
        os.close(write)
    assert _no_traceback(proc) == [] and proc.returncode == 1, (proc.returncode, proc.stderr)


def test_an_error_for_a_closed_pipe_or_a_full_disk_keeps_its_own_exit_code(
    warm: Warm, scripted: dict[str, Path]
) -> None:
    """`warm stats missing.warm --json | false` printed a BrokenPipeError traceback and exit
    1, `> /dev/full` an OSError one: the error (exit 2) is said on stderr and stands."""
    args: list[str | Path] = ["stats", scripted["dir"] / "missing.warm", "--json"]
    read, write = os.pipe()
    os.close(read)
    try:
        piped = _warm(warm, args, stdout=write)
    finally:
        os.close(write)
    with open("/dev/full", "w") as full:
        refused = _warm(warm, args, stdout=full.fileno())
    for proc in (piped, refused):
        lines = _no_traceback(proc)
        assert proc.returncode == 2, (proc.returncode, lines)
        assert lines[0] == f"warm: error: {args[1]}: no such bundle", lines


def test_stderr_refused_keeps_the_exit_code_and_the_json(
    warm: Warm, scripted: dict[str, Path]
) -> None:
    """`warm stats missing.warm --json 2> /dev/full` exited 1 (its error line's OSError), not
    2; with stderr a pipe nobody reads, Rich's answer to the broken pipe pointed stdout at
    /dev/null and exited 1: the JSON error was lost too."""
    missing = scripted["dir"] / "missing.warm"
    expected = {"error": f"{missing}: no such bundle", "exit": 2}
    full = _warm(warm, ["stats", missing, "--json"], stdout=subprocess.PIPE, shell="2>/dev/full")
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "warmcli", "stats", str(missing), "--json"],
            stdout=subprocess.PIPE,
            stderr=write,
            text=True,
            env=warm.env,
            timeout=300,
        )
    finally:
        os.close(write)
    for done in (full, proc):
        assert (done.returncode, json.loads(done.stdout)) == (2, expected)


@pytest.mark.parametrize("closed", [">&-", "2>&-", "<&-", "<&- >&- 2>&-"])
def test_a_closed_standard_stream_is_as_dev_null(
    warm: Warm, scripted: dict[str, Path], closed: str
) -> None:
    """A script that closes warm's stdout (`>&-`) got an AttributeError traceback from every
    command; with stderr closed (`2>&-`) `warm run` stored nothing and exited 1, and `warm
    stats` exited 1 after printing everything. Each now works as with /dev/null there."""
    bundle = scripted["dir"] / "closed.warm"
    for stale in (bundle, bundle.with_name("closed.warm.lock")):
        stale.unlink(missing_ok=True)
    for args in (["run", HOST, "-b", bundle, "-q"], ["stats", bundle], ["stats", bundle, "--json"]):
        proc = _warm(warm, args, stdout=subprocess.DEVNULL, shell=closed)
        assert proc.returncode == 0, (args, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
    assert warm("verify", bundle).returncode == 0
    missing = _warm(
        warm, ["stats", bundle.with_name("nope.warm")], stdout=subprocess.DEVNULL, shell=closed
    )
    assert missing.returncode == 2, missing.stderr


@pytest.mark.parametrize("args", [["stats"], ["check"], ["run", HOST, "--no-verify", "-b"]])
def test_an_ascii_stdout_is_written_not_a_traceback(
    warm: Warm, scripted: dict[str, Path], args: list[str | Path]
) -> None:
    """Under a locale whose stdout is ASCII (`PYTHONIOENCODING=ascii`, `LC_ALL=C
    PYTHONUTF8=0`), every table's rule (─), `µs` and `×` were a UnicodeEncodeError traceback
    (warm run: exit 1, its table unprinted): tables are drawn in ASCII there, and any other
    character is written as its escape."""
    shutil.copy(scripted["bundle"], scripted["dir"] / "ascii.warm")
    env = dict(warm.env, PYTHONIOENCODING="ascii")
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", *map(str, args), scripted["dir"] / "ascii.warm"],
        capture_output=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stderr == b"" and proc.stdout.isascii(), proc.stderr
    assert args[0] == "check" or b"-----" in proc.stdout, proc.stdout.decode()  # (a table)


def test_sign_refuses_an_empty_file_as_every_reading_command_does(
    warm: Warm, scripted: dict[str, Path]
) -> None:
    """`warm sign EMPTY --key K` (a `mktemp` name, a bundle truncated by a full disk) made a
    new bundle there and signed it (exit 0: a signed bundle of nothing), where `stats`,
    `verify`, `check` and `clean` say `not a warm bundle (an empty file)`, exit 2."""
    empty = scripted["dir"] / "empty.warm"
    empty.write_bytes(b"")
    proc = warm("sign", empty, "--key", scripted["key"], "--json")
    assert (proc.returncode, json.loads(proc.stdout)) == (
        2,
        {"error": f"{empty}: not a warm bundle (an empty file)", "exit": 2},
    ), proc.stderr
    assert empty.read_bytes() == b"" and not empty.with_name("empty.warm.lock").exists()


def test_run_names_warms_home_it_cannot_make(warm: Warm, scripted: dict[str, Path]) -> None:
    """`warm run W.py` with no bundle named, where the default bundle's folder cannot be
    made (HOME read-only, WARM_HOME unset; here a file stands in its way, as root may
    write anywhere) said only `[Errno 20] Not a directory: '.../home/.cache'`."""
    home = scripted["dir"] / "rohome"
    home.mkdir(exist_ok=True)
    (home / ".cache").write_text("not a folder")
    env = {k: v for k, v in warm.env.items() if k not in ("WARM_HOME", "XDG_CACHE_HOME")}
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(HOST), "-q", "--json"],
        capture_output=True,
        text=True,
        env=dict(env, HOME=str(home)),
        timeout=300,
        cwd=ROOT,
    )
    folder = home / ".cache" / "warm"
    assert (proc.returncode, json.loads(proc.stdout)) == (
        2,
        {
            "error": f"cannot make warm's home {folder} for the default bundle (Not a "
            "directory): set WARM_HOME, or name the bundle with --bundle",
            "exit": 2,
        },
    ), proc.stderr


SCALE_CU = """
from warmcli import Kernel

K = Kernel('extern "C" __global__ void scale(float *x, int n) { int i = threadIdx.x; '
           'if (i < n) x[i] *= 2; }', "scale", "Pi", language="cuda")

def workload(rt):
    rt.launch(K, rt.buffer(32), 32, grid=(1, 1, 1), block=(32, 1, 1))
"""


NVCC = ("--arch", "sm_90", "--compiler", "nvcc", "--no-ptx", "-q")


@pytest.mark.parametrize("tmpdir", ["missing", "a file"])
def test_nvcc_builds_where_tmpdir_is_unusable(
    warm: Warm, scripted: dict[str, Path], tmpdir: str
) -> None:
    """A CI job whose TMPDIR names a folder that is not there (or no folder): warm's own
    scratch folders fell back to /tmp, as Python's do, but every kernel failed its compile
    with `nvcc fatal: Could not open output file '/nonexistent/tmpxft_...'` (nvcc reads
    TMPDIR and does not fall back): nvcc is handed the folder Python found usable."""
    nvcc_or_skip()
    workload = scripted["dir"] / "scale_cu.py"
    workload.write_text(SCALE_CU)
    bundle = scripted["dir"] / f"nvcc-{tmpdir.replace(' ', '-')}.warm"
    unusable = scripted["dir"] / "no-such-tmp"
    if tmpdir == "a file":
        unusable = scripted["key"]  # a file, where a folder is named
    proc = Warm(dict(warm.env, TMPDIR=str(unusable)))("run", workload, *NVCC, "-b", bundle)
    assert proc.returncode == 0, proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout, proc.stdout


INSTALL = "--install-completion"  # for the shell it runs under (bash, kept as its parent)


def test_install_completion_that_cannot_write_is_one_line(warm: Warm, tmp_path: Path) -> None:
    """`warm --install-completion` where the shell's rc file cannot be written (a read-only
    HOME; here a folder in its place) printed Typer's IsADirectoryError traceback, exit 1."""
    (tmp_path / ".bashrc").mkdir()
    env = dict(warm.env, HOME=str(tmp_path))
    proc = subprocess.run(
        ["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-m", "warmcli", INSTALL],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=ROOT,
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        f"warm: error: [Errno 21] Is a directory: '{tmp_path / '.bashrc'}'\n",
    )


ONE_KERNEL = """
from warmcli import Kernel

K = Kernel("void one(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "one", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
"""


def test_a_workload_whose_file_name_is_no_utf8_is_warmed(warm: Warm, tmp_path: Path) -> None:
    """`warm run $'w\\xfd.py'` (a Latin-1 file name, as a script's glob hands it over)
    printed a UnicodeEncodeError traceback ('surrogates not allowed'), exit 1, from `warm
    run` and `warm verify --workload` alike."""
    folder = os.fsencode(tmp_path)
    script = folder + b"/w\xfd.py"
    with open(script, "w") as file:
        file.write(ONE_KERNEL)
    bundle = str(tmp_path / "b.warm")
    for args in (["run", script, "-b", bundle, "-q"], ["verify", bundle, "--workload", script]):
        proc = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"warmcli", *map(os.fsencode, args)],
            capture_output=True,
            env=warm.env,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/é.warm", "http://127.0.0.1:9/\udcff.warm"])
@pytest.mark.parametrize("command", [["stats"], ["pull"], ["push", "B"]])
def test_a_url_that_is_no_ascii_is_one_line(
    warm: Warm, scripted: dict[str, Path], url: str, command: list[str]
) -> None:
    """A bundle URL with a letter not percent-encoded (`é`), or a byte no UTF-8 decodes (as
    a shell hands `$'\\xff'` over), was a UnicodeEncodeError traceback (exit 1) from every
    command taking a URL: one line naming it, exit 2."""
    args = [str(scripted["bundle"]) if a == "B" else a for a in command]
    proc = warm(*args, url, timeout=60)  # (`url` given as `os.fsencode` makes its bytes)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "percent-encode" in lines[0] or "no UTF-8" in lines[0], lines


def test_production_names_a_url_that_is_no_ascii(warm: Warm) -> None:
    """`WARM_BUNDLE=http://host/é.warm`: the runtime's UnicodeEncodeError, where README
    promises a `RemoteError` (an `OSError`) to catch."""
    code = (
        "import warmcli\n"
        "from warmcli.errors import RemoteError\n"
        "try:\n    warmcli.runtime('host')\n"
        "except RemoteError as exc:\n    print(exc)\n"
    )
    env = dict(warm.env, WARM_BUNDLE="http://127.0.0.1:9/é.warm")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0 and "percent-encode" in proc.stdout, proc.stderr


def test_stats_explain_of_a_name_no_utf8_spells_is_not_held(
    warm: Warm, scripted: dict[str, Path]
) -> None:
    """`warm stats B --explain $'m\\xff'` was a UnicodeEncodeError traceback from the query:
    no bundle can hold such a name, so it is one not held (exit 2)."""
    name = os.fsdecode(b"m\xff")  # (given as these bytes)
    proc = warm("stats", scripted["bundle"], "--explain", name, timeout=60)
    said = f"{scripted['bundle']}: no tunes for operation 'm\\udcff' (it holds: matmul)"
    assert (proc.returncode, proc.stderr) == (2, f"warm: error: {said}\n")


@pytest.mark.parametrize("command", ["run", "pull"])
def test_a_name_too_long_is_one_line_and_its_json(
    warm: Warm, scripted: dict[str, Path], command: str
) -> None:
    """`warm run W.py -b NAME --json` (`warm pull URL NAME`) with a NAME over the system's
    limit (ENAMETOOLONG, met checking its folder) printed an OSError traceback, exit 1; a
    write the command did not answer is one line and, under --json, its JSON object."""
    name = str(scripted["dir"] / ("a" * 300 + ".warm"))
    args = (
        ["run", HOST, "-b", name]
        if command == "run"
        else ["pull", "http://127.0.0.1:9/b.warm", name]
    )
    proc = warm(*args, "--json")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "file name is 305 bytes, too long" in lines[0], lines  # (said before writing: trial57c)
    assert json.loads(proc.stdout) == {"error": lines[0].removeprefix("warm: error: "), "exit": 2}
