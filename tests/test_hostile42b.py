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


def test_a_locked_bundle_replaced_by_a_fifo_never_holds_a_read(tmp_path: Path) -> None:
    """A production process whose bundle was locked at its open retries at a later read
    (`Reopening`): its probe of the lock (`_free`) had SQLite open the file, so a bundle
    replaced meanwhile by a FIFO (`mkfifo`) held that read for ever, waiting for a writer
    of the pipe, and under the Reopening's lock every other thread's read too; where the
    first open refuses a FIFO without waiting (`read_header`). Now the probe finds no
    regular file at once and the open says why, as for a file replaced by no bundle."""
    import os
    import threading

    from warmcli import Bundle
    from warmcli.bundle import reopening
    from warmcli.errors import BundleError, BundleLocked

    path = tmp_path / "b.warm"
    os.mkfifo(path)
    store = reopening.Reopening(str(path), lambda: Bundle.open(path), BundleLocked("locked"))
    store._next = 0.0  # its next try is due
    met: list[BaseException] = []

    def read() -> None:
        try:
            store.kernel("k")
        except BaseException as exc:  # what the read met, checked below
            met.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(3)
    held = reader.is_alive()
    if held:  # held by the FIFO: let it go (a writer opens it), then fail
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        reader.join(5)
    assert not held, "a read was held by the FIFO"  # was: held until a writer opened it
    assert len(met) == 1 and isinstance(met[0], BundleError), met
    assert "FIFO" in store.refused or "regular file" in store.refused, store.refused
    store.close()
