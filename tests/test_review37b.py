"""review37b: an adversary's review of overhead37 (the run record joining the last store),
upgrade37 and hostile37, through the real CLI (subprocesses, the system cc, SQLite files)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Each call of `workload` is one pass; in the second (CompileAndAutotune), the workload says
# it reached its end (`<name>.ready`) and waits for `go`, then builds a kernel the first pass
# never saw: what the pass stores last, which the run's record joins.
GATED = """
import os, time
from pathlib import Path
import numpy as np
from warmcli import Kernel

NAME = {name!r}
HERE = Path({here!r})
FIRST = Kernel("void first_%s(float *x) {{ x[0] = 1.0f; }}" % NAME, "first_%s" % NAME, "P")
LAST = Kernel("void last_%s(float *x) {{ x[0] = 2.0f; }}" % NAME, "last_%s" % NAME, "P")
CALLS = []


def workload(rt):
    CALLS.append(1)
    x = rt.upload(np.zeros(1, dtype=np.float32))
    rt.launch(FIRST, x)
    if len(CALLS) == 2:
        (HERE / (NAME + ".ready")).write_text("")
        deadline = time.monotonic() + 120
        while not (HERE / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        rt.launch(LAST, x)
    rt.synchronize()
"""


def _waiters(lock: Path) -> int:
    """How many flocks of `lock` wait (/proc/locks' '->' lines on its inode)."""
    st = os.stat(lock)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and line.split()[-3] == dev)


def _wait_for(done: object, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _run_record(bundle: Path) -> str | None:
    with sqlite3.connect(bundle) as conn:
        row = conn.execute("SELECT value FROM manifest WHERE key = 'run'").fetchone()
    return None if row is None else str(row[0])


def test_two_runs_into_one_bundle_at_once_record_no_run(warm: Warm, tmp_path: Path) -> None:
    """Two `warm run`s of different workloads into one new bundle, their last stores waiting
    for each other's lock: the bundle holds both runs' entries, so it records no run (the
    second run's record, read before it waited, said its run alone was the bundle, whole:
    `warm merge` would then call nothing missing of a bundle holding another run)."""
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(b"")  # an empty file (mktemp's): new to both runs
    procs = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.py"
        path.write_text(GATED.format(name=name, here=str(tmp_path)))
        procs.append(warm.popen("run", path, "-b", bundle, "-q"))
    try:
        ready = [tmp_path / "a.ready", tmp_path / "b.ready"]
        _wait_for(lambda: all(p.exists() for p in ready), "both workloads reach their end")
        lock = Path(f"{os.path.realpath(bundle)}.lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            (tmp_path / "go").write_text("")
            _wait_for(lambda: _waiters(lock) == 2, "both runs wait for the lock")
        finally:
            os.close(fd)
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and "Traceback" not in err, out + err
    with sqlite3.connect(bundle) as conn:
        names = {r[0] for r in conn.execute("SELECT entry FROM kernels")}
    assert {"first_a", "last_a", "first_b", "last_b"} <= names, names
    assert _run_record(bundle) is None


NEW_KERNEL = """
import numpy as np
from warmcli import Kernel
K = Kernel("void newk(float *x) { x[0] = 3.0f; }", "newk", "P")
def workload(rt):
    x = rt.upload(np.zeros(1, dtype=np.float32))
    rt.launch(K, x)
    rt.synchronize()
"""


def _missed_beside_tunes_of(
    warm: Warm, tmp_path: Path, devices: list[str], host_bundle: Callable[[Path], Path]
) -> str:
    """What a run with one new kernel says over the example's bundle (`host_bundle`'s: as
    `warm run examples/matmul_host.py -q` makes it) given one more tune measured on each of
    `devices` (a copy of one of its own, keyed apart)."""
    bundle = host_bundle(tmp_path / "b.warm")
    with sqlite3.connect(bundle) as conn:
        row = list(conn.execute("SELECT * FROM tunes LIMIT 1").fetchone())
        marks = ", ".join("?" * len(row))
        for i, device in enumerate(devices):
            row[0], row[3] = bytes([i]) * 32, device
            conn.execute(f"INSERT INTO tunes VALUES ({marks})", row)
    (tmp_path / "miss.py").write_text(NEW_KERNEL)
    done = warm("run", tmp_path / "miss.py", "-b", bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_another_cpus_tunes_are_noted_beside_many_gpus_tunes(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A bundle of this machine's host tunes, 64 GPUs' (a fleet's fingerprints) and another
    CPU's: a host run's first miss notes the other CPU's tunes. `grouped` kept the first 64
    distinct devices of every backend, this machine's own first, so the GPUs took every
    place and the other CPU's tunes were never said (a GROUP BY said them)."""
    devices = [f"cuda|forged GPU {i}|sm_90|none" for i in range(64)] + ["host|other CPU"]
    out = _missed_beside_tunes_of(warm, tmp_path, devices, host_bundle)
    assert "tune(s) measured on 'host|other CPU'" in out, out
    assert "forged GPU" not in out, out  # not this backend's: never said to a host run


def test_past_64_other_devices_the_rest_of_their_tunes_are_counted(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """70 other CPUs' tunes: the first 64 devices are noted one by one and the tunes of the
    other 6 counted together (`grouped` dropped them: the notes said 6 tunes fewer than the
    bundle holds, with nothing saying more were left out)."""
    others = [f"host|other CPU {i}" for i in range(70)]
    out = _missed_beside_tunes_of(warm, tmp_path, others, host_bundle)
    assert out.count("bundle holds 1 tune(s) measured on 'host|other CPU") == 64, out
    assert "bundle holds 6 more tune(s) measured on other devices" in out, out


def test_a_run_another_run_stored_beside_records_no_run(warm: Warm, tmp_path: Path) -> None:
    """A run (b) opens a new bundle; while its workload runs, another run (a) stores its own
    kernel in it and ends: b then records no run (it recorded its own whole, over a's
    entries: the bundle was new when b opened it)."""
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(b"")
    (tmp_path / "b.py").write_text(GATED.format(name="b", here=str(tmp_path)))
    (tmp_path / "a.py").write_text(NEW_KERNEL)
    gated = warm.popen("run", tmp_path / "b.py", "-b", bundle, "-q")
    try:
        _wait_for((tmp_path / "b.ready").exists, "b's workload reaches its end")
        done = warm("run", tmp_path / "a.py", "-b", bundle, "-q")
        assert done.returncode == 0, done.stdout + done.stderr
        (tmp_path / "go").write_text("")
        out, err = gated.communicate(timeout=120)
    finally:
        if gated.poll() is None:
            gated.kill()
    assert gated.returncode == 0 and "Traceback" not in err, out + err
    with sqlite3.connect(bundle) as conn:
        names = {r[0] for r in conn.execute("SELECT entry FROM kernels")}
    assert {"newk", "first_b", "last_b"} <= names, names
    assert _run_record(bundle) is None
