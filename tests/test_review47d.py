"""Review of gch47's merge: the files a key reads, remembered by their stat stamp (review47d).

A header's memo (`headers._read`) believed a file by its mtime and size alone: a `val.h`
rewritten in place with its size and mtime kept (`touch -r`, `cp -p`, a tree whose mtimes are
fixed, as Nix or a reproducible build leave them) was keyed as the old one for the rest of the
process, so a server reloading its bundle (`warmcli.use_bundle`) served the old build where a
cold compile gave the new value. Each memo (headers, `.gch`s, linked files) now stamps a file by
size, inode, mtime and ctime, and believes it only once both times are 2 s old. A linked
file's reading stat its path then opened it: a path swapped meanwhile for a FIFO hung the key,
and one swapped for another file was remembered under the first one's stamp; it now stamps what
it opened (`warmcli.stamped.opened`). Real files, processes and the system C compiler; no fakes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import Warm
from host_keys import archive, served_and_cold, settle

from warmcli import headers, linked, once_copies, precompiled

_OLD = 1_000_000_000  # an mtime long settled (2001)

RELOADED = """
import os
import warmcli
from warmcli import Kernel
SRC = '#include "val.h"\\nfloat helper(void);\\nvoid f(float *x) {{ x[0] = VAL + helper(); }}\\n'
K = lambda: Kernel(SRC, "f", "P", options=("-I{inc}", "-L{lib}", "-Wl,-u,helper", "-lX"))
def workload(rt):
    rt.launch(K(), rt.buffer(1, "float32"))
def value():
    try:
        rt = warmcli.runtime()
        b = rt.buffer(1, "float32")
        rt.launch(K(), b)
        return str(rt.read(b)[0])
    except warmcli.StrictMissError:
        return "miss"
def kept(path, data):  # rewritten in place: its size and mtime kept, its inode too
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
if __name__ == "__main__":
    header, lib = "{inc}/val.h", "{lib}/libX.a"
    old_lib, new_lib = open(lib, "rb").read(), open("{new}", "rb").read()
    seen = [value()]
    kept(header, b"#define VAL 2\\n")
    warmcli.use_bundle(os.environ.get("WARM_BUNDLE") or None)  # a server reloading
    seen.append(value())
    kept(header, b"#define VAL 1\\n")
    kept(lib, new_lib)
    warmcli.use_bundle(os.environ.get("WARM_BUNDLE") or None)
    seen.append(value())
    kept(lib, old_lib)
    print(" ".join(seen))
"""


def test_a_reloading_server_never_serves_a_header_or_library_kept_in_size_and_mtime(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run` of a kernel including `val.h` (VAL 1) and linking `-lX` (helper: 4); in one
    strict production process: a launch, then `val.h` rewritten as VAL 2 with its size and
    mtime kept, the bundle reloaded, a launch; then `libX.a` likewise (helper: 8). Each launch
    gives what a cold process computes, or misses: never the old build (the header was served
    VAL 1 + 4 again, its memo believing its mtime and size)."""
    inc, lib, new = tmp_path / "inc", tmp_path / "lib", tmp_path / "new"
    inc.mkdir()
    (inc / "val.h").write_bytes(b"#define VAL 1\n")
    archive(lib, 4)
    archive(new, 8)
    assert (lib / "libX.a").stat().st_size == (new / "libX.a").stat().st_size
    for path in (inc / "val.h", lib / "libX.a"):
        os.utime(path, (_OLD, _OLD))
    script = tmp_path / "w.py"
    script.write_text(RELOADED.format(inc=inc, lib=lib, new=new / "libX.a"))
    made = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    settle(inc / "val.h", lib / "libX.a")  # (after `warm run`'s seconds): remembered
    served, cold = served_and_cold(warm, tmp_path, script)
    assert cold == "5.0 6.0 9.0", cold
    first, *later = served.split(" ")
    assert first == "5.0", served
    for got, want in zip(later, ["6.0", "9.0"], strict=True):
        assert got in (want, "miss"), f"served the old build: {served} (cold: {cold})"


def test_a_file_changed_lately_by_its_ctime_is_not_remembered(tmp_path: Path) -> None:
    """A file whose mtime is old but whose ctime is now (`touch -r`, `cp -p`: just rewritten)
    may be rewritten again within the same clock tick keeping its whole stamp (on a kernel
    whose ctime is coarse): none of the three memos keeps it (each kept it by its mtime)."""
    path = tmp_path / "val.h.gch"
    path.write_bytes(b"#define VAL 1\n")
    os.utime(path, (_OLD, _OLD))
    assert time.time_ns() - path.stat().st_ctime_ns < 1_000_000_000
    assert precompiled.sha256_of(str(path)) == hashlib.sha256(b"#define VAL 1\n").hexdigest()
    assert str(path) not in precompiled._memo
    assert headers._read(str(path)) is not None
    assert str(path) not in headers._memo
    assert linked.file_digest(str(path)) is not None
    assert not [s for s in linked._memo if s[0] == str(path)]


FLIP = """
import os, sys, time
folder, names, end = sys.argv[1], sys.argv[2].split(","), time.time() + float(sys.argv[3])
i = 0
while time.time() < end:
    os.symlink(names[i % len(names)], f"{folder}/t{i}")
    os.replace(f"{folder}/t{i}", f"{folder}/p")  # the path now names another file
    i += 1
"""

KEYS = """
import hashlib, os, sys, time
from warmcli import linked
folder, end = sys.argv[1], time.time() + float(sys.argv[2])
by_inode = {}
for name in ("a.ld", "b.ld"):
    data = open(os.path.join(folder, name), "rb").read()
    by_inode[os.stat(os.path.join(folder, name)).st_ino] = hashlib.sha256(data).hexdigest()
wrong = keys = 0
while time.time() < end:  # each key fills the memo anew: a stale entry, one digest apart
    linked.linked_digest((folder + "/p",))
    wrong += sum(by_inode[stamp[1][1]] != digest for stamp, digest in linked._memo.items())
    linked._memo.clear()
    keys += 1
print("stale" if wrong else "ok", wrong, keys)
"""


def test_a_linked_path_swapped_for_a_fifo_or_another_file_never_hangs_nor_goes_stale(
    tmp_path: Path,
) -> None:
    """`/p`, a link a second process points again and again at a linker script `a.ld`, a FIFO
    and another script `b.ld` (each settled), keyed over and over for 3 s: a key stat the path,
    then opened it: a FIFO come between blocked the process for good (a production start
    hung), and another file come between was remembered under the first one's stamp (its
    digest served for the first file later). Now what was opened is stamped, a FIFO never."""
    (tmp_path / "a.ld").write_bytes(b"INPUT(/nowhere/a.o)\n")
    (tmp_path / "b.ld").write_bytes(b"INPUT(/nowhere/b.o)\n")
    os.mkfifo(tmp_path / "fifo")
    for name in ("a.ld", "b.ld"):
        os.utime(tmp_path / name, (_OLD, _OLD))
    settle(tmp_path / "a.ld", tmp_path / "b.ld")
    os.symlink("a.ld", tmp_path / "p")
    root = str(Path(__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": root}
    flip = [sys.executable, "-c", FLIP, str(tmp_path), "a.ld,fifo,b.ld", "3.5"]
    flipper = subprocess.Popen(flip)
    try:
        keys = subprocess.run(
            [sys.executable, "-c", KEYS, str(tmp_path), "3"],
            env=env, capture_output=True, text=True, timeout=15,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AssertionError("a key hung on a linked path swapped for a FIFO") from None
    finally:
        flipper.wait(timeout=15)
    assert keys.returncode == 0, keys.stderr[-800:]
    assert keys.stdout.startswith("ok"), keys.stdout


READERS = """
import sys
from warmcli import computed_includes, once_copies, system_shadows
fifo = sys.argv[1]
print(computed_includes.file_head(fifo), once_copies._marks(fifo))
try:
    system_shadows._includes(fifo)
except OSError:
    print("unread")
"""


def test_the_other_readers_of_a_key_never_wait_on_a_fifo(tmp_path: Path) -> None:
    """The readers a key calls on a header it found a regular file (a computed include's
    header, a once-only header's marks, a system header's includes) opened its path plainly:
    a FIFO come in its place since blocked the key for good. Now each reads nothing there."""
    os.mkfifo(tmp_path / "h.h")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    try:
        read = subprocess.run(
            [sys.executable, "-c", READERS, str(tmp_path / "h.h")],
            env=env, capture_output=True, text=True, timeout=15,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AssertionError("a key's reader waited on a FIFO") from None
    assert read.stdout.split("\n")[:2] == ["b'' ()", "unread"], read.stdout + read.stderr[-800:]


def test_a_once_only_headers_marks_are_read_anew_after_an_edit_keeping_size_and_mtime(
    tmp_path: Path,
) -> None:
    """`once_copies`' memo of a header's marks (`#pragma once`) believed it by mtime and size
    alone, as the headers' did: rewritten in place keeping both, its old marks were kept."""
    path = tmp_path / "c.h"
    path.write_bytes(b"#pragma once\n")
    os.utime(path, (_OLD, _OLD))
    settle(path)
    assert once_copies._marks(str(path)) != ()
    assert str(path) in once_copies._memo
    with open(path, "r+b") as f:
        f.write(b"#pragma xxxx\n")
    os.utime(path, (_OLD, _OLD))
    assert once_copies._marks(str(path)) == ()
