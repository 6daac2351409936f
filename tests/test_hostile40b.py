"""Hostile bundles against today's new code: `warm check`'s reading of a host blob's needs.

A blob's `DT_NEEDED` may name, by path, any file of the victim's machine: `warm check`
then reads that library's own dynamic section. It mapped the file (`mmap`), and a file
cut short while mapped (a library `cp` rewrites in place, as an install does) killed
warm with SIGBUS, no line said. Real files, a real second process truncating, the
hostile ELFs bytes made by hand (no fake of anything).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from elf_blobs import shared_object

from warmcli.backends.host.needed import MAX_PROBES


def _many_headers(phnum: int = 65535) -> bytes:
    """A shared object of `phnum` program headers (empty ones, then a `PT_LOAD` and its
    `PT_DYNAMIC`, needing libc.so.6): 3.6 MB whose headers take a while to read."""
    names = b"\0libc.so.6\0"
    dynamic_at = 64 + phnum * 56
    strtab_at = dynamic_at + 4 * 16
    size = strtab_at + len(names)
    header = b"\x7fELF\x02\x01\x01" + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, phnum, 64, 0, 0)
    empty = struct.pack("<IIQQQQQQ", 0, 0, 0, 0, 0, 0, 0, 0) * (phnum - 2)
    load = struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, size, size, 4096)
    dyn = struct.pack("<IIQQQQQQ", 2, 6, dynamic_at, dynamic_at, 0, 64, 64, 8)
    entries = [(1, 1), (5, strtab_at), (10, len(names)), (0, 0)]
    return header + empty + load + dyn + b"".join(struct.pack("<qQ", *e) for e in entries) + names


_CHECKS = """
import sys
from warmcli.backends.host.needed import missing_library
blob = bytes.fromhex(sys.argv[1])
for _ in range(int(sys.argv[2])):  # the library's header (its first 4 KB) stays whole
    assert missing_library(blob) == "", missing_library(blob)
print("done")
"""
_REWRITES = """
import os, sys, time
path, data = sys.argv[1], open(sys.argv[1], "rb").read()
fd = os.open(path, os.O_WRONLY)
print("ready", flush=True)
while True:  # rewritten in place, as cp over an installed library does
    os.ftruncate(fd, 4096)
    time.sleep(0.002)
    os.pwrite(fd, data, 0)
    time.sleep(0.002)
"""


def test_a_library_cut_short_while_read_is_no_sigbus(tmp_path: Path) -> None:
    library = tmp_path / "libbig.so"
    library.write_bytes(_many_headers())
    blob = shared_object([str(library).encode()])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rewriter = subprocess.Popen(
        [sys.executable, "-c", _REWRITES, library], stdout=subprocess.PIPE, text=True
    )
    try:
        assert rewriter.stdout is not None and rewriter.stdout.readline() == "ready\n"
        checks = subprocess.run(
            [sys.executable, "-c", _CHECKS, blob.hex(), "150"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
    finally:
        rewriter.kill()
        rewriter.wait()
    assert checks.returncode == 0, (checks.returncode, checks.stderr[-2000:])
    assert checks.stdout == "done\n"


_COUNTED = """
import glob, os, sys, sysconfig
from elf_blobs import shared_object

from warmcli.backends.host.needed import MAX_PROBES
from warmcli.backends.host.needed import _fits, missing_library
ident = bytes.fromhex(sys.argv[1])
triplet = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
here = sorted({os.path.basename(p) for p in glob.glob(f"/usr/lib/{triplet}/*.so*")})
names = [n.encode() for n in here if _fits(f"/usr/lib/{triplet}/{n}", ident)][:255]
if len(names) < 255:
    print("skip")
    sys.exit()
folders = b":".join(b"d%d" % i for i in range(255))  # relative: from the working folder
blobs = [shared_object(names, runpath=folders + b":z%d" % i) for i in range(20)]  # each its own
stat, calls, most, said = os.stat, [0], 0, set()
def counted(*args, **kwargs):  # each file or folder the search looks at (`needed._Probes`)
    calls[0] += 1
    return stat(*args, **kwargs)
os.stat = counted
for blob in blobs:
    calls[0] = 0
    said.add(missing_library(blob))
    most = max(most, calls[0])
os.stat = stat
print(most, said)
"""


def test_a_blobs_search_is_bounded_in_files_looked_at(tmp_path: Path) -> None:
    """255 needed names each found only in the system's folders, after a RUNPATH of 255
    folders that exist (a machine has many: here made, as `/proc/<pid>` or `/sys` give
    them): 65,000 files looked for per blob, 0.13 s, and 10,000 such blobs (70 MB) held
    `warm check` over 20 minutes. The files and folders looked at for one blob are bounded."""
    for i in range(255):
        (tmp_path / f"d{i}").mkdir()
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests'}")
    ident = shared_object([])[4:6].hex() + "3e00"  # 64-bit little-endian x86-64
    counted = subprocess.run(
        [sys.executable, "-c", _COUNTED, ident],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert counted.returncode == 0, counted.stderr[-2000:]
    if counted.stdout.strip() == "skip":
        return  # fewer than 255 libraries in this machine's folders (or not x86-64)
    most, said = counted.stdout.split(" ", 1)
    # files and folders looked at for one blob: 65,000 before (2.6 s for 20 blobs), now
    # MAX_PROBES and the few stats outside the search (4,097 here): a count, not a time (stop 60)
    assert int(most) <= MAX_PROBES + 8, counted.stdout
    assert said.strip() == "{''}"  # no verdict: never a false "not servable"


_PREPARED = "__global__ void k(float *x, int n, float a) { if (threadIdx.x < n) x[0] = a; }"


def test_prepared_timed_call_takes_a_block_of_fewer_sizes_as_pycuda_does() -> None:
    """PyCUDA's `prepared_timed_call` hands its block to `_launch_kernel(py::tuple grid,
    py::tuple block, ...)` as it is, never through `_set_block_shape(int, int, int)` (as
    `f(...)`, `prepared_call` and `prepared_async_call` do): a tuple of up to three ints,
    `()` one thread. warm refused `(32,)` and `(32, 1)` there, a script PyCUDA runs."""
    import numpy as np

    from warmcli import ProcessMode, ProcessModeOverride
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.errors import DiscardedReadError
    from warmcli.pycuda import PyCudaError, SourceModule, bound_runtime
    from warmcli.pycuda.standins import GPUArray
    from warmcli.runtime.runtime import Runtime

    p = SourceModule(_PREPARED).get_function("k").prepare("Pif")
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        x = GPUArray(1, np.float32).gpudata
        for block in [(32,), (32, 1), (), (32, 1, 1)]:  # launched (discarded: no time read)
            with pytest.raises(DiscardedReadError, match="read of the time of k"):
                p.prepared_timed_call((2, 1), block, x, 1, 1.0)
        for bad in [[32, 1, 1], (32, 1, 1, 1), (np.int64(32),)]:  # PyCUDA's binding refuses
            try:
                p.prepared_timed_call((2, 1), bad, x, 1, 1.0)
            except PyCudaError as exc:
                assert "prepared_timed_call: its block" in str(exc)
            else:
                raise AssertionError(f"{bad!r} taken")
        try:  # prepared_call sets the block shape first: three sizes, as PyCUDA
            p.prepared_call((2, 1), (32,), x, 1, 1.0)
        except PyCudaError as exc:
            assert "prepared_call: its block" in str(exc)
        else:
            raise AssertionError("(32,) taken by prepared_call")


def test_a_file_smaller_than_an_elf_header_is_never_opened(tmp_path: Path) -> None:
    """A blob may name any file by path. A procfs or tracing file reports 0 bytes and is
    "regular": `/proc/kmsg`, whose read takes the kernel's log from its reader (rsyslog's),
    was opened and read by `warm check` as root. A file of fewer bytes than an ELF header
    holds no library: never opened. Watched by the kernel's inotify, no fake."""
    import ctypes

    from warmcli.backends.host.needed import missing_library

    empty = tmp_path / "libempty.so"
    empty.write_bytes(b"")
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert watch >= 0
    try:
        assert libc.inotify_add_watch(watch, bytes(tmp_path), 0x20) >= 0  # IN_OPEN
        said = missing_library(shared_object([bytes(empty)]))
        assert f"needs {empty}, which this machine's loader does not find" in said
        try:
            events = os.read(watch, 4096)
        except BlockingIOError:
            events = b""
        assert b"libempty.so" not in events
    finally:
        os.close(watch)


def test_gpu_less_stand_ins_take_pycudas_positional_forms() -> None:
    """PyCUDA's `gpuarray.empty` is `GPUArray(shape, dtype, allocator, base, gpudata,
    strides, order)`, `zeros(shape, dtype, allocator, order)`, `empty_like(a, dtype, order)`,
    `to_gpu_async(a, allocator, stream)`; its `GPUArray` takes a 0-d array as a shape (its
    own comment: "handle dim-0 ndarrays") and its `set` a numpy scalar for one element
    (reshaped). The GPU-less stand-ins put `order` third (an allocator there, as with a
    memory pool's `pool.allocate`, raised AttributeError: 'function' object has no
    attribute 'upper'), took no more positional arguments, iterated a 0-d shape (numpy's
    TypeError) and refused a scalar to `set`: a pre-build failed a script PyCUDA runs."""
    import numpy as np

    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.pycuda import bound_runtime
    from warmcli.pycuda.standins import modules
    from warmcli.runtime.runtime import Runtime

    found = modules()
    gpuarray, drv = found["pycuda.gpuarray"], found["pycuda.driver"]
    pool = drv.mem_alloc  # what a DeviceMemoryPool's allocate stands for
    assert gpuarray.empty((4,), np.float32, pool).shape == (4,)
    assert gpuarray.empty((4, 2), np.float32, pool, None, None, None, "F").strides == (4, 16)
    assert gpuarray.zeros((4,), np.float32, pool).nbytes == 16
    assert gpuarray.zeros((4, 2), np.float32, pool, "F").strides == (4, 16)
    assert gpuarray.empty(np.array(5), np.float32).shape == (5,)
    with bound_runtime(Runtime(ArchDevice("sm_90"))):
        x = gpuarray.to_gpu_async(np.zeros(3, np.float32), pool, drv.Stream())
    assert gpuarray.empty_like(x, np.float64, "C").dtype == np.float64
    one = gpuarray.empty((1,), np.float32)
    one.set(np.float32(2))  # PyCUDA's reshapes it to (1,)
    with pytest.raises(Exception, match="float64 into float32"):
        one.set(np.float64(2))


def test_a_needed_name_not_utf8_is_said_in_text_a_json_reader_takes(tmp_path: Path) -> None:
    """A blob's `DT_NEEDED` of bytes that are no UTF-8 (`lib\\x9b.so`) was said with a lone
    surrogate (`\\udc9b`), which `warm check --json` wrote as such: strict JSON readers
    (serde_json's "lone leading surrogate") refuse the whole report. Its bytes are said
    escaped (`\\x9b`), the name still looked up as its bytes."""
    from warmcli.backends.host.needed import missing_library
    from warmcli.printable import lone_surrogate

    said = missing_library(shared_object([b"libc.so.6", b"lib\x9bnowhere.so"]))
    assert "needs lib\\x9bnowhere.so, which" in said
    assert lone_surrogate(said) is None
    found = tmp_path / "lib\udc9bhere.so"  # (the file's name: the byte 0x9b)
    found.write_bytes(shared_object([]))
    assert missing_library(shared_object([os.fsencode(found)])) == ""
