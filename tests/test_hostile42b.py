"""Holes hostile42b found in what stop 42 added, each reproduced for real: the real CLI in
a subprocess (real `warm run`s of host workloads, the real C compiler), real SQLite files."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

RAISES_A_CLASS_NAMED_OVER_TWO_LINES = """
import threading
DEVICE = "host"
E = type("Bad\\nLine", (Exception,), {})
def workload(rt):
    if WHERE == "thread":
        t = threading.Thread(target=lambda: (_ for _ in ()).throw(E("m")), name="t1")
        t.start()
        t.join()
    else:
        raise E("m")
"""


def test_an_exception_class_named_with_a_newline_is_said_on_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """A workload's exception whose class name holds a newline (`type("Bad\\nLine", ...)`):
    its message was escaped (f66d398) but the class name was not, so `warm run` said the
    error over two lines ('...: Bad' then '    Line: m'), and a thread's note alike."""
    path = tmp_path / "w.py"
    path.write_text('WHERE = "entry"\n' + RAISES_A_CLASS_NAMED_OVER_TWO_LINES)
    proc = warm("run", path, "-b", tmp_path / "a.warm")
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(said) == 1, proc.stderr
    assert "Bad\\x0aLine: m" in said[0], said
    path.write_text('WHERE = "thread"\n' + RAISES_A_CLASS_NAMED_OVER_TWO_LINES)
    proc = warm("run", path, "-b", tmp_path / "b.warm")
    note = [line for line in (proc.stdout + proc.stderr).splitlines() if "thread t1" in line]
    assert note and all(n.endswith("Bad\\x0aLine: m") for n in note), proc.stdout + proc.stderr
