"""Wrongs a new user's trial left at stop 41, each now right: a daemon thread that launches
after its pass ended is stopped and said so, never a corrupt bundle. The real CLI in a
subprocess, real SQLite files, the real C compiler.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Each pass's daemon thread launches a kernel within its pass (which waits for that launch),
# then one of its own (its pass's number in a define) once the next pass has called workload():
# its pass ended by then, however slow the machine (a sleep of 0.2 s after workload() returned
# was not, at a load of 20 on 2 cores); it lands in the next pass, on the last pass's runtime,
# and that pass waits for the thread to end (its launch stopped, or gone on). The last pass's
# thread has no next pass: it launches nothing late, and ends with the process.
LATE_THREAD = """
import threading, time
from warmcli import Kernel
CALLS, THREADS = [0], []
def workload(rt):
    CALLS[0] += 1
    mine = CALLS[0]
    if THREADS:
        THREADS[-1].join(120)
    k = Kernel("void late(int *x) { x[0] = PASS; }", "late", "P", defines={"PASS": mine})
    first = Kernel("void early(int *x) { x[0] = 1; }", "early", "P")
    launched = threading.Event()
    def bg():
        s = rt.stream()
        rt.launch(first, rt.buffer(1, "int32"), stream=s)
        launched.set()
        while CALLS[0] == mine:
            time.sleep(0.01)
        rt.launch(k, rt.buffer(1, "int32"), stream=s)
        print("LAUNCHED LATE", mine, flush=True)
    THREADS.append(threading.Thread(target=bg, name="late", daemon=True))
    THREADS[-1].start()
    assert launched.wait(120)
"""


def test_a_daemon_thread_launching_after_its_pass_is_stopped_not_a_corrupt_bundle(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    path = workload_file(LATE_THREAD)
    bundle = tmp_path / "late.warm"
    run = warm("run", path, "-b", bundle, "-d", "host")
    said = run.stdout + run.stderr
    assert "corrupt" not in said and "closed" not in said, said
    assert run.returncode == 0, said
    assert "note: thread late launched kernel late[PASS=2] after its pass ended" in said, said
    # stopped there, as Python stops a daemon thread as its process ends: its launch never ran
    assert "LAUNCHED LATE" not in said.split("Pass 3")[1], said
    assert "LAUNCHED LATE 2" not in said, said
    assert warm("verify", bundle).returncode == 0


RAISES_ON = """
from warmcli import Kernel
CALLS = [0]
def workload(rt):
    CALLS[0] += 1
    rt.launch(Kernel("void a(int *x) { x[0] = 1; }", "a", "P"), rt.buffer(1, "int32"))
    if CALLS[0] == {call}:
        raise ValueError("bad batch")
"""


def test_a_workload_that_raises_after_a_store_says_what_is_kept(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    for call, during in ((2, "CompileAndAutotune"), (3, "Verify (Execute)")):
        path = workload_file(RAISES_ON.replace("{call}", str(call)), f"w{call}.py")
        bundle = tmp_path / f"r{call}.warm"
        run = warm("run", path, "-b", bundle, "-q")
        assert run.returncode == 2, run.stdout + run.stderr
        # (in the second pass, what trial48e added: it ran before, in this process)
        before = (
            " (it ran to its end in this process before, during CompileOnly: warm calls it once"
            " a pass, so it must run again after it returned, whatever its earlier run left, a"
            " folder or file it made)"
            if call == 2
            else ""
        )
        assert run.stderr == (
            f"warm: error: workload raised during {during}: {path}:8: ValueError: bad batch"
            f"{before}; 1 kernel(s) and 0 tune(s) stored in {bundle} before it are kept\n"
        )
        assert warm("verify", bundle).returncode == 0
    # a user's error of several lines is said on one line, its newline escaped (leftovers42a;
    # warm's own of several, a compile log, says it on its first: test_unseen_workloads29)
    path = workload_file(RAISES_ON.replace("{call}", "2").replace("bad batch", "bad\\n  why"))
    run = warm("run", path, "-b", tmp_path / "r4.warm", "-q")
    assert "ValueError: bad\\x0a  why (it ran to its end in this process before" in run.stderr
    assert run.stderr.endswith(
        f"; 1 kernel(s) and 0 tune(s) stored in {tmp_path / 'r4.warm'} before it are kept\n"
    ), run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    # raising before anything was stored says nothing of it (and leaves no new bundle)
    path = workload_file(RAISES_ON.replace("{call}", "1"), "w1.py")
    run = warm("run", path, "-b", tmp_path / "r1.warm", "-q")
    assert run.returncode == 2 and run.stderr.endswith("ValueError: bad batch\n"), run.stderr
    assert not (tmp_path / "r1.warm").exists()


def test_drv_in_out_take_a_fortran_ordered_array_as_pycuda_does() -> None:
    """PyCUDA's `drv.In`/`Out`/`InOut` copy any contiguous array (its memcpy_htod and
    memcpy_dtoh take a buffer of PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE to copy back): the
    kernel reads and writes the array's bytes in memory order. warm refused a Fortran-ordered
    one ("needs a C-contiguous writable array"); a strided view stays refused, as PyCUDA's
    buffer request refuses it."""
    import numpy as np
    import pytest

    from warmcli.backends.host import HostDevice
    from warmcli.kernel import Kernel
    from warmcli.pycuda.args import ArgumentError, In, InOut, Out, staged
    from warmcli.pycuda.launch import run_staged
    from warmcli.runtime.runtime import Runtime

    a = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    for handler in (In, Out, InOut):
        found = staged(handler(a))
        assert found is not None and found.array is a
    with pytest.raises(ArgumentError, match="contiguous"):
        staged(In(np.zeros((4, 4), np.float32)[:, 1:3]))
    readonly = a.copy(order="F")
    readonly.flags.writeable = False
    assert staged(In(readonly)) is not None
    with pytest.raises(ArgumentError, match="writable"):
        staged(InOut(readonly))

    # A real host kernel through the copy-in/copy-out path: it sees the bytes PyCUDA copies.
    rt = Runtime(HostDevice(), jobs=1)
    k = Kernel(
        "void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * 2 + i; }", "f", "Pi"
    )
    got = a.copy(order="F")
    handlers = {0: staged(InOut(got))}
    values = [None, np.int32(got.size)]
    run_staged(rt, rt.default_stream, handlers, values, lambda v: rt.launch(k, *v), False)
    memory = a.ravel(order="K")  # what PyCUDA's memcpy_htod copies: the bytes as they lie
    expected = memory * 2 + np.arange(a.size, dtype=np.float32)
    assert got.flags.f_contiguous
    assert got.ravel(order="K").tobytes() == expected.tobytes()


HEADERS = """
from warmcli import Kernel
SRC = '#include "gain.h"\\n#include "sub/other.h"\\nvoid g(float *x) { x[0] = GAIN + OTHER; }'
K = Kernel(SRC, "g", "P", options=("-Iinc",))
def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def test_a_header_miss_names_the_header_that_changed(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    path = workload_file(HEADERS)
    (tmp_path / "inc" / "sub").mkdir(parents=True)
    (tmp_path / "inc" / "gain.h").write_text("#define GAIN 2\n")
    (tmp_path / "inc" / "sub" / "other.h").write_text("#define OTHER 1\n")
    bundle = tmp_path / "h.warm"
    run = warm("run", path, "-b", bundle, "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "inc" / "gain.h").write_text("#define GAIN 3\n")
    proc = warm("verify", bundle, "--workload", path, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("miss: kernel g: headers:")]
    assert line.endswith("(changed: gain.h)"), line
    # one the bundle's build did not read at all is named too
    (tmp_path / "inc" / "sub" / "other.h").write_text('#include "extra.h"\n#define OTHER 1\n')
    (tmp_path / "inc" / "sub" / "extra.h").write_text("\n")
    (tmp_path / "inc" / "gain.h").write_text("#define GAIN 2\n")
    proc = warm("verify", bundle, "--workload", path, cwd=tmp_path)
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("miss: kernel g: headers:")]
    assert line.endswith("(changed: sub/other.h; new: extra.h)"), line


def test_changed_headers_reads_a_bundles_list_as_untrusted_text() -> None:
    """Pure logic: a malformed or absent list names nothing; a bundle's own names are never
    shown (only this process's, escaped)."""
    import json

    from warmcli.runtime.shown import changed_headers

    ours = {"header_files": json.dumps([["a.h", "1" * 16], ["b\x1b.h", "2" * 16]])}
    for theirs in ("", "[", '{"a": 1}', '[["a.h"]]', "[[1, 2]]", json.dumps([[None, "x"]])):
        assert changed_headers([{"header_files": theirs}], ours) == ""
    held = {"header_files": json.dumps([["a.h", "0" * 16], ["evil\x1b[2J.h", "3" * 16]])}
    said = changed_headers([held], ours)
    assert said == " (changed: a.h; new: b\\x1b.h)", said
    assert changed_headers([held], {}) == ""


def test_a_daemon_thread_tuning_after_its_pass_is_stopped_too(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    source = LATE_THREAD.replace(
        'rt.launch(k, rt.buffer(1, "int32"), stream=s)',
        "rt.tune(Tunable(f'late{CALLS[0]}', {'a': k, 'b': first}, "
        "lambda rt, c, x, *, stream=None: rt.launch(c, x, stream=stream)), "
        "rt.buffer(1, 'int32'), stream=s)",
    ).replace("from warmcli import Kernel", "from warmcli import Kernel, Tunable")
    assert "rt.tune(" in source
    run = warm("run", workload_file(source), "-b", tmp_path / "t.warm", "-d", "host")
    said = run.stdout + run.stderr
    assert run.returncode == 0 and "corrupt" not in said, said
    assert re.search(r"note: thread late tuned late\d after its pass ended", said), said
