"""Stop 54's cuts of `warm run`'s own cost, held to the behaviour they keep.

The shadowed-module check (`warmcli.warming.shadowed`) resolves each module's folder once
instead of each module's file whole: a module reached through a link (its file a link into
the workload's folder, or its folder a link to it) is still the workload's own, so a module
beside the workload that it does not get is still warned of. A plain host run imports none
of PyCUDA's stand-ins (`warmcli.cli.run_pycuda`), which only `--pycuda` or `--arch` use.
"""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path

import pytest

from warmcli.warming.shadowed import shadowed

# Uses `copy` (the standard library's: warm imported it first) while a copy.py is beside it.
USES_COPY = "import copy\n\ndef deep(x):\n    return copy.deepcopy(x)\n"

WORKLOAD = """
import sys
import threading
from pathlib import Path

sys.path.insert(0, {lib!r})
import o54_helper  # its file a link to real_helper.py, beside this workload

from warmcli import Kernel

K = Kernel("void k(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1.0f; }}", "k", "Pi")


def workload(rt):
    import numpy as np

    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(K, x, 4)
    held = sorted(m for m in sys.modules if m.startswith("warmcli.pycuda"))
    Path({marks!r}).write_text(repr(held))
    return o54_helper.deep([1, 2])
"""


def _folder_with_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "copy.py").write_text("X = 1\n")  # the user's copy: warm had imported its own
    (folder / "real_helper.py").write_text(USES_COPY)
    return folder


def test_a_run_through_a_linked_module_still_warns_and_imports_no_pycuda(warm, tmp_path):
    folder = _folder_with_copy(tmp_path)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "o54_helper.py").symlink_to(folder / "real_helper.py")
    marks = tmp_path / "pycuda_modules.txt"
    workload = folder / "workload.py"
    workload.write_text(WORKLOAD.format(lib=str(lib), marks=str(marks)))
    proc = warm("run", workload, "--bundle", tmp_path / "b.warm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "copy.py beside the workload is not the copy it imports" in proc.stderr
    assert marks.read_text() == "[]"  # no warmcli.pycuda module in the worker


@pytest.mark.parametrize("how", ["file link", "folder link", "no link"])
def test_shadowed_resolves_a_module_through_either_link(tmp_path, how):
    folder = _folder_with_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if how == "file link":
        elsewhere.mkdir()
        (elsewhere / "helper.py").symlink_to(folder / "real_helper.py")
        file = elsewhere / "helper.py"
    elif how == "folder link":
        elsewhere.symlink_to(folder, target_is_directory=True)
        file = elsewhere / "real_helper.py"
    else:  # its own copy elsewhere: not the workload's, so nothing of its is warned of
        elsewhere.mkdir()
        (elsewhere / "helper.py").write_text(USES_COPY)
        file = elsewhere / "helper.py"
    module = types.ModuleType("o54_linked")
    module.__file__ = str(file)
    exec(compile(file.read_text(), str(file), "exec"), module.__dict__)
    sys.modules["o54_linked"] = module
    try:
        lines = shadowed(folder / "workload.py")
    finally:
        del sys.modules["o54_linked"]
    warned = [line for line in lines if line.startswith("copy.py beside the workload")]
    assert len(warned) == (0 if how == "no link" else 1), lines


# Each waits for the other's file: they end only where both run at once (one after the other,
# the first would wait out its 60 s and time out).
MEETS = (
    "touch {mine}; i=0; while [ ! -e {theirs} ] && [ $i -lt 6000 ]; "
    "do sleep 0.01; i=$((i+1)); done; [ -e {theirs} ]"
)


def test_at_once_runs_a_host_compilers_two_probes_together(tmp_path):
    """`as --version` and `ld --version` of a first run are asked at once
    (`processes.at_once`): two real children that each need the other running both end."""
    from warmcli.backends import processes

    a, b = tmp_path / "a", tmp_path / "b"

    def child(mine: Path, theirs: Path) -> processes.Finished:
        return processes.run(["sh", "-c", MEETS.format(mine=mine, theirs=theirs)], 60)

    first, second = processes.at_once(lambda: child(a, b), lambda: child(b, a))
    assert (first.returncode, first.timed_out) == (0, False), first
    assert (second.returncode, second.timed_out) == (0, False), second


def test_at_once_keeps_the_owner_and_raises_what_its_thread_raised(tmp_path):
    """The thread's child is the caller's `Owner`'s (the compiler probe's `stop` kills it on
    Ctrl-C), and what the thread raised reaches the caller once both ended."""
    from warmcli.backends import processes

    owner = processes.Owner()

    def kill_once_started() -> int:
        for _ in range(3000):  # (up to 30 s for the thread's child to start)
            if owner.groups:
                break
            threading.Event().wait(0.01)
        owned = len(owner.groups)
        owner.kill()
        return owned

    with processes.owned_by(owner):
        slept, owned = processes.at_once(
            lambda: processes.run(["sleep", "60"], 120), kill_once_started
        )
    assert owned == 1 and slept.returncode < 0 and not slept.timed_out, slept

    def fails() -> None:
        raise ValueError("the thread's")

    with pytest.raises(ValueError, match="the thread's"):
        processes.at_once(fails, lambda: None)
