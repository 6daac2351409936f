"""Wrongs left at stop 40, each now right: `warm check --json` names the device each entry was
judged for. The real CLI in a subprocess, real SQLite files, NVRTC or nvcc for a named arch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_check_json_names_the_device_each_entry_was_judged_for(warm: Warm, tmp_path: Path) -> None:
    nvrtc_release_or_skip()
    path = tmp_path / "sm80.warm"
    run = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_80", "-b", path, "--no-verify")
    assert run.returncode == 0, run.stdout + run.stderr
    proc = warm("check", path, "--arch", "sm_75", "--arch", "sm_90", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    ids = {d["id"] for d in doc["devices"]}
    assert {"sm_75", "sm_90"} <= ids, doc["devices"]
    # sm_75 has no build of any kernel (sm_80 cubins, compute_80 PTX): its own misses
    kernels = [m for m in doc["unservable"] if m["kind"] == "kernel"]
    assert kernels and {m["device"] for m in kernels} == {"sm_75"}, kernels
    # sm_90 JITs the compute_80 PTX: listed as its own
    assert doc["ptx_jit"] and {m["device"] for m in doc["ptx_jit"]} == {"sm_90"}, doc["ptx_jit"]
    # every tune is judged (and missed) on both, once each
    tunes = [m for m in doc["unservable"] if m["kind"] == "tune"]
    assert {m["device"] for m in tunes} == {"sm_75", "sm_90"}, tunes
    assert len(tunes) == 2 * doc["tunes"], tunes


OWN_COLLECTOR = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
mine = warmcli.StatisticsCollector()
with warmcli.ProcessModeOverride(warmcli.ProcessMode.EXECUTE, mine):
    pick = module["workload"](warmcli.runtime("host"))
own = warmcli.StatisticsReader(mine).notes()
print(json.dumps({"pick": pick, "notes": warmcli.report().notes, "own": own}))
"""


def test_a_judged_nothing_note_reaches_report_under_the_users_own_collector(
    warm: Warm, tmp_path: Path
) -> None:
    from test_judged40 import WARNING, WORKLOAD

    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    env = dict(warm.env, CHECK="ref", DATA="zeros", WARM_REPORT="1")
    done = subprocess.run(
        [sys.executable, "-c", OWN_COLLECTOR, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["pick"] == "fast_wrong"
    noted = [n for n in shown["own"] if WARNING in n]  # the user's collector has it
    assert len(noted) == 1, shown
    assert shown["notes"] == noted, shown  # and so does report(), and its printed lines
    assert [line for line in done.stderr.splitlines() if WARNING in line] == [
        f"  note: {noted[0]}"
    ], done.stderr


F_SETPIPE_SZ = 1031  # fcntl's (Linux): a pipe's capacity
PAGE = 4096  # the smallest a pipe holds


def _unread(fd: int) -> int:
    """How many bytes the pipe at `fd` holds unread."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def quoted_in_readme(line: str) -> bool:
    """Whether the README quotes `line` whole, in backquotes (its line breaks read as one
    space)."""
    text = re.sub(r"\s*\n\s*", " ", (ROOT / "README.md").read_text())
    return f"`{line}`" in text


def _holds(pid: int, name: Path) -> bool:
    """Whether process `pid` has the file `name` open."""
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(folder / fd) == str(name) for fd in os.listdir(folder))
    except OSError:  # (a descriptor closed as it was read)
        return False


def test_ctrl_c_in_a_vacuum_only_clean_says_the_bundle_is_whole(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A clean that removes nothing but vacuums (a tenth of the file free pages) said a bare
    `interrupted` when Ctrl-C landed in its vacuum: now it says nothing was removed and the
    bundle is whole. The vacuum is held waiting for warm's write lock, which this test takes,
    and SIGINT sent once the clean has opened the lock file."""
    bundle = host_bundle(tmp_path / "b.warm")  # `warm run examples/matmul_host.py`'s, copied
    with contextlib.closing(sqlite3.connect(bundle)) as db:  # pages freed, as a refused
        db.execute("CREATE TABLE junk(x)")  # vacuum (a full disk) leaves them
        db.execute("INSERT INTO junk VALUES (zeroblob(4000000))")
        db.commit()
        db.execute("DROP TABLE junk")
        db.commit()
    held = warm.json("stats", bundle)
    lock = Path(f"{os.path.realpath(bundle)}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer's: the vacuum waits for it
        proc = warm.popen("clean", bundle)
        deadline = time.monotonic() + 30
        while not _holds(proc.pid, lock) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # (waiting on the lock)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(fd)
    assert proc.returncode == 130, err
    [line] = err.strip().splitlines()
    assert line.startswith("warm: interrupted: ") and "whole" in line, line
    assert "removed nothing" in line, line
    assert quoted_in_readme(line), line  # the README quotes it whole (docs41)
    assert warm.json("stats", bundle) == held  # every entry as it was
    assert warm("verify", bundle, "-q").returncode == 0


def test_ctrl_c_after_a_dask_runs_merge_says_what_the_bundle_holds(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    """Ctrl-C once `warm run --dask` had merged the shards into the bundle (here: as it
    printed its report) said a bare `interrupted`; now what this run stored, kept, as a
    local run says it. stdout is a pipe of one page this test does not read until the
    report fills it: the run is then blocked printing, after the merge, when SIGINT lands."""
    pytest.importorskip("distributed")
    bundle = tmp_path / "b.warm"
    args = ("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--no-verify", "--json")
    proc = warm.popen(*args, "--dask", dask_scheduler)
    assert proc.stdout is not None
    fcntl.fcntl(proc.stdout.fileno(), F_SETPIPE_SZ, PAGE)
    deadline = time.monotonic() + 60
    while _unread(proc.stdout.fileno()) < PAGE and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    last = err.strip().splitlines()[-1]
    assert last == "warm: interrupted: 6 kernel(s) and 3 tune(s) stored are kept", err
    held = warm.json("stats", bundle)
    assert (len(held["kernels"]), len(held["tunes"])) == (6, 3)


def test_one_elf_layout_serves_both_host_readers() -> None:
    """`binary` and `needed` each held a table of ELF's layout; now both read `elf`'s, whose
    entries are the sizes ELF gives them (a whole program header, section header, symbol,
    dynamic entry and ELF header of each word size)."""
    import struct

    from warmcli.backends.host import binary, elf, needed

    assert not hasattr(binary, "_LAYOUT") and not hasattr(binary, "_SECTIONS")
    assert not hasattr(needed, "_LAYOUT")
    whole = {64: (56, 64, 24, 16, 64), 32: (32, 40, 16, 8, 52)}
    for bits, (program, section, symbol, dynamic, header) in whole.items():
        layout = elf.LAYOUTS[bits]
        sizes = [struct.calcsize("<" + f) for f in (layout.mapped, layout.section)]
        sizes += [struct.calcsize("<" + f) for f in (layout.symbol, layout.dynamic)]
        assert (*sizes, layout.header) == (program, section, symbol, dynamic, header)
        assert layout.sizes == layout.shoff + struct.calcsize(layout.word) + 6  # e_flags, e_ehsize
