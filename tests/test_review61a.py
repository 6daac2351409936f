"""Review of stop 61's merges (trial61b's PyCUDA device choice and event timing).

Real files, FIFOs and devices for `~/.cuda_device`; the PyCUDA side is the fake four-GPU
`pycuda` package (`FAKE_FOUR_GPUS`) and the `FakeDriver` of tests/test_trial61b, named as
fakes there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_signals42 import _holder, warmed_bundle, warmed_once  # noqa: F401 (fixtures)
from test_trial61b import _gpu_check_bare, _with_fake_gpus

CHOICE = "from warmcli.pycuda.context import pycuda_device\nprint(pycuda_device())\n"


def _choice(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    """`pycuda_device()` in a process of its own, home `tmp_path` (the fake four-GPU pycuda
    first on its path), `variables` set."""
    try:
        return _with_fake_gpus(tmp_path, CHOICE, HOME=str(tmp_path), **variables)
    except subprocess.TimeoutExpired as exc:  # (the guard of a hang: no speed asserted)
        raise AssertionError(f"pycuda_device() never returned: {exc}") from None


def test_a_cuda_device_file_that_is_a_fifo_is_never_waited_on(tmp_path: Path) -> None:
    """PyCUDA's GPU choice read `~/.cuda_device` with `read_text`: a FIFO there (or a
    socket's, a device's path) was opened for reading and waited on for a writer, so
    `import warmcli.pycuda.autoinit`, and the first PyCUDA-style launch of a production
    process, hung for ever. Failed before (the 120 s guard ran out); a FIFO is no number now,
    as an unreadable file is none: the first GPU."""
    os.mkfifo(tmp_path / ".cuda_device")
    proc = _choice(tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "cuda\n"), proc.stderr


def test_a_cuda_device_file_is_read_bounded(tmp_path: Path) -> None:
    """`~/.cuda_device` was read whole: a link to /dev/zero filled memory until a MemoryError
    traceback (failed before, under a 1 GiB address space), and a large regular file was read
    whole and shown whole in the error (64 MiB of '\\x00' in one message). A device is none
    now (the first GPU), and a regular file of over 64 bytes is refused in a short line (its
    first bytes never taken for the number: PyCUDA reads them all)."""
    zero = tmp_path / "zero"
    zero.mkdir()
    (zero / ".cuda_device").symlink_to("/dev/zero")
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    proc = _with_fake_gpus(zero, limit + CHOICE, HOME=str(zero))
    assert (proc.returncode, proc.stdout) == (0, "cuda\n"), proc.stderr[-2000:]
    big = tmp_path / "big"
    big.mkdir()
    with open(big / ".cuda_device", "wb") as file:
        file.truncate(64 << 20)  # sparse: no disk
    proc = _choice(big)
    assert proc.returncode != 0
    last = proc.stderr.splitlines()[-1]
    assert last.endswith(
        "DeviceError: ~/.cuda_device holds over 64 bytes: PyCUDA takes the number of a GPU"
    ), proc.stderr[-2000:]
    assert len(proc.stderr) < 4000
    padded = tmp_path / "padded"
    padded.mkdir()
    (padded / ".cuda_device").write_text("1" + " " * 64 + "2\n")  # PyCUDA's int() refuses it
    proc = _choice(padded)  # (its first 65 bytes alone would read 1)
    assert proc.returncode != 0 and "holds over 64 bytes" in proc.stderr, proc.stdout


def test_a_long_cuda_device_variable_is_named_in_a_short_line(tmp_path: Path) -> None:
    """A `CUDA_DEVICE` of 100,000 characters was shown whole in its DeviceError (failed
    before: the message held it all); its start alone is named now."""
    proc = _choice(tmp_path, CUDA_DEVICE="7" * 50_000 + "x" * 50_000)
    assert proc.returncode != 0
    assert "DeviceError: CUDA_DEVICE" in proc.stderr and len(proc.stderr) < 4000


def test_a_gpu_number_of_thousands_of_digits_is_one_line(tmp_path: Path) -> None:
    """`int` refuses more than 4,300 digits with a ValueError: a `CUDA_DEVICE` of 5,000
    digits, and (on a machine with pycuda) `warm run --device cuda:` and as many, ended in that
    traceback. Failed before (ValueError, both); one DeviceError line now, the number's start
    alone named."""
    digits = "7" * 5000
    told = _choice(tmp_path, CUDA_DEVICE=digits)
    assert told.returncode != 0
    assert told.stderr.splitlines()[-1].startswith("warmcli.errors.DeviceError: CUDA_DEVICE")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "w.py").write_text("DEVICE = 'host'\n\n\ndef workload(rt):\n    pass\n")
    run = (
        "import runpy, sys\n"
        f"sys.argv = ['warm', 'run', 'w.py', '--bundle', 'b.warm', '--device', 'cuda:{digits}']\n"
        "runpy.run_module('warmcli', run_name='__main__')\n"
    )
    ran = _with_fake_gpus(tmp_path / "cli", run)
    assert ran.returncode == 2, ran.stderr[-2000:]
    [line] = ran.stderr.splitlines()
    assert "is not a CUDA device" in line and len(line) < 200, line[:300]


def test_the_lock_probe_reads_with_no_wait_in_sqlite(warmed: Path) -> None:
    """counts61 turned test_signals42's lock-probe check (answered under 0.5 s) into a count of
    Python calls (`busy` once, `sleep` never), which cannot see SQLite's own wait: its busy
    handler sleeps in C. With the probe's `PRAGMA busy_timeout = 0` made 3000, that test
    passes after a 3 s wait; this one fails. What SQLite ran (its trace, no clock): the busy
    timeout set to 0 for the probe's read, then set back (50 ms, a `Waiting` slice)."""
    from warmcli.bundle.file import _connect
    from warmcli.bundle.lock_probe import free

    conn = _connect(warmed)
    ran: list[str] = []
    holder = _holder(warmed)
    try:
        conn.set_trace_callback(ran.append)
        assert not free(conn)
        conn.set_trace_callback(None)
    finally:
        holder.kill()
        holder.wait()
        conn.close()
    # (the read itself fails at its prepare, in the trace or not: the schema needs the lock)
    timeouts = [sql for sql in ran if sql.startswith("PRAGMA busy_timeout =")]
    assert timeouts == ["PRAGMA busy_timeout = 0", "PRAGMA busy_timeout = 50"], ran


def test_gpu_check_installs_the_newest_carried_wheel_of_its_python(tmp_path: Path) -> None:
    """gpu-check took `ls | head -n 1` of this Python's carried pycuda wheels: where an older
    build is still carried beside a newer one (fetch-gpu-carry downloads the newest sdist,
    and a call's build is carried back beside the last), the first by name, the older one
    (`2024.1.2` sorts before `2025.1`). Failed before (the 2024.1.2 wheel); the newest by
    version now, another Python's (cp27) never."""
    tag = "cp{}{}".format(*sys.version_info[:2])
    carried = [f"pycuda-{v}-{tag}-{tag}-linux_x86_64.whl" for v in ("2024.1.2", "2025.1")]
    out, _ = _gpu_check_bare(tmp_path, "pycuda-2026.1-cp27-cp27mu-linux_x86_64.whl", *carried)
    listed = [line for line in out.splitlines() if line.endswith("linux_x86_64.whl")]
    assert listed and listed[0].endswith(carried[1]), out[-2000:]
