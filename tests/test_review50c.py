"""A hostile review of stop 50's product changes: what it found, each fixed.

A probe's answer cut: `processes.run` now keeps a child's first 32 kB and last 8 kB, which
is right for a compiler's log but not for the probes whose output warm parses. Under a long
`COMPILER_PATH` (2,000 folders: a 230 kB `programs` line) `cc -print-search-dirs`' line was
left out and its program folders read as none, the answer a compiler gives that names none,
remembered so; `cc -E -v`'s search list, past 32 kB, would be read as none or half of it.
Probes (`processes.probe`: those two, nvcc's `--list-gpu-code` and `--dryrun`) keep their
output whole up to 4 MiB, and fail as where they cannot start beyond it.

A warning that failed the run: `shadowed` (is a module beside the workload not the one of its
name it imports?) asked `Path.is_file` of a name built from each `__module__` the workload
holds; a class of generated code named past 255 bytes raised `File name too long` (an
unreadable folder of a used module's name would raise too) and `warm run` exited 2 where it
warms the same without the check. A name no file can have is none beside it now.

A probe killed remembered as an answer (older than stop 50, met attacking its probes):
`cc -print-search-dirs` killed by `stop_compilers` (a run's Ctrl-C while a thread probed
cc) or out of time answered "", kept in warm's home: every later process read cc's program
folders as none. No answer is now not kept (that process reads none; the next asks again).

A log of long lines bounded badly: with no line break near the cut, the head or tail was
cut inside a UTF-8 character (`\ufffd`), and a short first line then a long one kept only
that line of the 32 kB head. A line break moves the cut only within 4 kB of it now, and a
cut between characters is never inside one.

An import error said `out of memory`: review50a took an ImportError saying `annot allocate
memory` under any address-space limit for one; the loader's `cannot allocate memory in
static TLS block` (a library loaded late, no limit its cause) is now left as it is.

A folder's `__main__.py` taken for a shadow: a workload holding `__main__` beside one was
told to rename it, though `import __main__` is the script under Python, never that file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends import processes
from warmcli.backends.host import programs
from warmcli.backends.kept_output import HEAD_BYTES, PROBE_BYTES, TAIL_BYTES, Kept


def test_a_programs_line_past_the_kept_head_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    folders = [f"/nonexistent/review50c/folder{i:05d}" for i in range(2000)]
    monkeypatch.setenv("COMPILER_PATH", os.pathsep.join(folders))
    line = programs._read_folders("", "cc")  # the real cc's real answer
    assert len(line) > 200_000
    listed = line.split(os.pathsep)
    assert listed[0].startswith(folders[0] + "/") and any(f.startswith(folders[-1]) for f in listed)


def test_a_probe_printing_past_its_bound_fails_as_one_that_cannot_start(tmp_path: Path) -> None:
    loud = f"import sys; sys.stdout.write('x' * {PROBE_BYTES + TAIL_BYTES + 1})"
    with pytest.raises(OSError, match="printed more than 4 MiB"):
        processes.probe(["python3", "-c", loud], 60)
    whole = processes.probe(["python3", "-c", f"print('y' * {PROBE_BYTES - 100})"], 60)
    assert not whole.cut and len(whole.out) == PROBE_BYTES - 99


LONG_NAMED = """
import copy

from warmcli import Kernel

DEVICE = "host"


class Generated:  # as generated code names its module: past a file name's 255 bytes
    pass


Generated.__module__ = "generated_" + "x" * 300


def workload(rt):
    x = rt.buffer(4)
    rt.launch(Kernel("void f(float *x, int n) { }", "f", "Pi", defines=copy.deepcopy({})), x, 4)
"""


def test_a_module_name_too_long_for_a_file_is_no_error_and_a_warning_no_failure(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    """`shadowed` asked `Path.is_file` of `generated_xxx...xxx.py` beside the workload, which
    raises `File name too long` (it ignores only a missing file): the warning's check failed
    the run, exit 2. Now a name no file can have is none beside it, and a real shadow (the
    `copy.py` beside it) is a warning, the run warmed and exit 0 as without it."""
    workload = tmp_path / "w.py"
    workload.write_text(LONG_NAMED)
    (tmp_path / "copy.py").write_text("X = 1\n")
    proc = warm("run", workload, "-b", bundle_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "copy.py beside the workload is not the copy it imports" in proc.stderr
    assert "File name too long" not in proc.stderr and "generated_" not in proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout, proc.stdout


KILLED_PROBE = """
import shutil, sys
from warmcli import config
from warmcli.backends import processes
from warmcli.backends.host import programs

if sys.argv[1] == "stopped":  # as a run's Ctrl-C leaves it: every compiler killed as it starts
    processes.stop_compilers()  # (a fast cc may still answer before the kill: out of time too)
    programs.FOLDERS_TIMEOUT = 0
print(programs.program_folders(shutil.which("cc"), tuple(config.compiler_programs().items())))
"""


def test_a_search_dirs_probe_killed_on_an_interrupt_is_not_remembered_as_none(
    tmp_path: Path,
) -> None:
    """`cc -print-search-dirs` killed by `stop_compilers` (a run's Ctrl-C or SIGTERM while a
    thread probed cc) or out of time answered "", which `remembered` kept in warm's home:
    every later process read cc's program folders as none, its `as` and `ld` looked for on
    `PATH` only (another assembler than cc runs, in the key). Now no answer is not kept."""
    env = {**os.environ, "WARM_HOME": str(tmp_path / "home")}

    def folders(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", KILLED_PROBE, mode], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    assert folders("stopped") == "[]"  # (this process: none)
    assert folders("later").startswith("['/"), "the killed probe's none was remembered"


def test_a_log_of_long_lines_keeps_its_head_and_never_cuts_a_character() -> None:
    """A log with no line break near the cut (one of no line break at all, C++'s long lines)
    was cut inside a character (`\\ufffd` where the bytes of `é` were split), and one whose
    first line was short kept only that line of its 32 kB head: the rest of its first error,
    which a user reads first, left out."""
    for first, char in ((b"a", "é"), (b"ab", "€"), (b"a", "𝄞"), (b"short first line\n", "é")):
        kept = Kept()
        for start in range(0, 200_000, 4093):  # (read in pieces, as a pipe gives them)
            kept.add((first + char.encode() * 60_000)[start : start + 4093])
        head, marker, tail = kept.text().partition("\n[... warm left out ")
        assert marker and "\ufffd" not in head + tail, (first, char)
        assert len(head.encode()) > HEAD_BYTES - 4, (first, char, len(head))
        assert tail.endswith(char * 100) and len(tail.encode()) > TAIL_BYTES - 200


IMPORT_FAILS = """
import resource, runpy, sys
said = sys.argv[1]
resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))  # far above what it uses
import warmcli.cli
def fake_main():  # a stand-in for a command whose import failed (named so: a fake)
    raise ImportError(said)
warmcli.cli.main = fake_main
sys.argv = ["warm", "stats", "x.warm"]
runpy.run_module("warmcli", run_name="__main__")
"""


def test_an_import_error_that_is_no_memory_limit_is_never_said_out_of_memory() -> None:
    """review50a took an ImportError saying `annot allocate memory` under an address-space
    limit for one: the loader's `cannot allocate memory in static TLS block` (libgomp loaded
    late: no limit is the cause, more memory no fix) was said `out of memory (a memory limit:
    ulimit -v ...)` where any limit was set. It is left as it is now, as a missing module is."""
    for said in (
        "/lib/x86_64-linux-gnu/libgomp.so.1: cannot allocate memory in static TLS block",
        "No module named 'review50c_missing'",
    ):
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_FAILS, said], capture_output=True, text=True, timeout=60
        )
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert "out of memory" not in done.stderr, done.stderr


def test_a_folders_main_is_not_the_main_a_workload_imports(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    """A workload that holds `__main__` (`import __main__`, as code reading its script's
    globals does) in a folder with a `__main__.py` (a folder `python folder` runs) was told
    `__main__.py beside the workload is not the __main__ it imports: ... rename __main__.py`:
    under Python, `import __main__` is the script, never the folder's `__main__.py`."""
    workload = tmp_path / "w.py"
    workload.write_text("import __main__\n" + LONG_NAMED)
    (tmp_path / "__main__.py").write_text("print('the folder, run as python folder')\n")
    proc = warm("run", workload, "-b", bundle_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "__main__" not in proc.stderr, proc.stderr
