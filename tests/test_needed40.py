"""`warm check` names a host blob whose needed library this machine's loader does not find.

A host kernel whose options link a library (`-lhelper`) is built into a blob with
`DT_NEEDED libhelper.so`. Where the loader does not find that library, a production
process's `dlopen` fails ("libhelper.so: cannot open shared object file") and it compiles
the kernel, yet `warm check` said "every entry is servable here" (exit 0). It now reads the
blob's dynamic section (`warmcli.backends.host.needed`) and looks each name up as the
loader does, never loading the blob. Real cc, real libraries, the real CLI in a
subprocess (the loader reads `LD_LIBRARY_PATH` as a process starts); the hostile ELFs are
bytes made by hand (no fake of anything).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from counted_calls import counted
from elf_blobs import SERVE, shared_object

from warmcli.backends.host.needed import MAX_NEEDED, missing_library

WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('''
#include <fcntl.h>
float helper_scale(float x);
__attribute__((constructor)) static void ran(void) { creat("MARKER", 0600); }
void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = helper_scale(x[i]); }
''', "scale", "Pi", options=("-LLIBDIR", "-Wl,--no-as-needed", "-lhelper"))
def workload(rt):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(K, x, 8)
    return x
"""


def _helper(folder: Path) -> Path:
    """A real `libhelper.so` in `folder`, built by cc."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "helper.c"
    source.write_text("float helper_scale(float x) { return 2.0f * x; }\n")
    library = folder / "libhelper.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def test_a_needed_library_the_loader_lacks_is_not_servable(warm: Warm, tmp_path: Path) -> None:
    library = _helper(tmp_path / "lib")
    marker = tmp_path / "constructor-ran"
    workload = tmp_path / "wl.py"
    workload.write_text(
        WORKLOAD.replace("LIBDIR", str(library.parent)).replace("MARKER", str(marker))
    )
    bundle = tmp_path / "b.warm"
    found = Warm(dict(warm.env, LD_LIBRARY_PATH=str(library.parent)))
    made = found("run", workload, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr + made.stdout
    with sqlite3.connect(bundle) as conn:
        (key,) = conn.execute("SELECT key FROM kernels").fetchone()
    marker.unlink()  # the run loaded it; check must not
    lacking = Warm({k: v for k, v in warm.env.items() if k != "LD_LIBRARY_PATH"})
    proc = lacking("check", bundle, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (miss,) = json.loads(proc.stdout)["unservable"]
    assert (miss["kind"], miss["key"], miss["reason"]) == ("kernel", key, "binary")
    assert "needs libhelper.so" in miss["detail"]
    text = lacking("check", bundle)
    assert text.returncode == 1 and "libhelper.so" in text.stdout
    assert "1 not servable here" in text.stdout
    assert found("check", bundle).returncode == 0  # where the loader finds it: servable
    assert not marker.exists()  # check never loaded the blob (its constructor never ran)
    # Production, as check foretold: the strict miss names the library.
    env = dict(lacking.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    served = subprocess.run(
        [sys.executable, "-c", SERVE, workload], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert served.returncode != 0 and "libhelper.so: cannot open shared object" in served.stderr
    library.unlink()  # gone from the folder LD_LIBRARY_PATH names too
    gone = found("check", bundle, "--json")
    assert gone.returncode == 1 and "needs libhelper.so" in gone.stdout


def _linked(tmp_path: Path, name: str, *options: str) -> bytes:
    """A shared object built by cc with `options` (a host blob's shape), its bytes."""
    source, out = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
    source.write_text("float helper_scale(float);\nfloat k(float x) { return helper_scale(x); }\n")
    cc = ["cc", "-shared", "-fPIC", "-o", out, source, "-Wl,--no-as-needed", *options]
    subprocess.run(cc, check=True)
    return out.read_bytes()


def test_runpath_rpath_the_cache_and_usual_libraries_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    library = _helper(tmp_path / "lib")
    folder = str(library.parent)
    runpath = _linked(tmp_path, "runpath", f"-L{folder}", "-lhelper", f"-Wl,-rpath,{folder}")
    assert b"libhelper.so" in runpath and missing_library(runpath) == ""
    rpath = _linked(
        tmp_path,
        "rpath",
        f"-L{folder}",
        "-lhelper",
        "-Wl,--disable-new-dtags",
        f"-Wl,-rpath,{folder}",
    )
    assert missing_library(rpath) == ""
    origin = _linked(tmp_path, "origin", f"-L{folder}", "-lhelper", "-Wl,-rpath,$ORIGIN")
    assert "needs libhelper.so" in missing_library(origin)  # warm loads it from /proc/self/fd
    usual = _linked(tmp_path, "usual", "-lhelper", f"-L{folder}", "-lm", "-lstdc++", "-lgcc_s")
    usual = usual.replace(b"libhelper.so\0", b"libc.so.6\0\0\0\0")  # only the system's left
    assert missing_library(usual) == ""  # the loader cache and the default folders
    library.write_text("not an ELF\n")  # the loader passes over a file that is no library
    assert "needs libhelper.so" in missing_library(runpath)


def test_what_a_found_library_needs_is_found_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libhelper.so, found by the blob's RUNPATH, needs libinner.so: found by libhelper's own
    RUNPATH (`$ORIGIN`: beside it), the blob is servable; gone, its chain is named."""
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (inner / "inner.c").write_text("float inner_scale(float x) { return 3.0f * x; }\n")
    (outer / "helper.c").write_text(
        "float inner_scale(float);\nfloat helper_scale(float x) { return inner_scale(x); }\n"
    )
    cc = ["cc", "-shared", "-fPIC", "-o"]
    subprocess.run([*cc, inner / "libinner.so", inner / "inner.c"], check=True)
    linked = ("-Wl,--no-as-needed", f"-L{inner}", "-linner", "-Wl,-rpath,$ORIGIN/inner")
    subprocess.run([*cc, outer / "libhelper.so", outer / "helper.c", *linked], check=True)
    blob = _linked(tmp_path, "blob", f"-L{outer}", "-lhelper", f"-Wl,-rpath,{outer}")
    assert missing_library(blob) == ""
    (inner / "libinner.so").unlink()
    why = missing_library(blob)
    assert f"needs libhelper.so ({outer / 'libhelper.so'}), which needs libinner.so" in why


def test_hostile_dynamic_sections_are_bounded(tmp_path: Path) -> None:
    assert missing_library(shared_object([b"libc.so.6", b"linux-vdso.so.1", b"libm.so.6"])) == ""
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)  # opened, it would block: only regular files are opened
    for path in (bytes(fifo), b"/dev/zero", b"/proc/kcore"):  # no shared object, none opened
        assert f"needs {path.decode()}, which" in missing_library(shared_object([path]))
    assert "needs libnowhere.so.9" in missing_library(
        shared_object([b"libc.so.6", b"libnowhere.so.9"])
    )
    for said, blob in (  # each refused at once, from the blob alone: counted, not timed
        (f"over {MAX_NEEDED} libraries", shared_object([b"libc.so.6"], count=1000)),
        ("over 256 folders", shared_object([b"libc.so.6"], runpath=b":".join([b"/x"] * 300))),
        ("over 4096 bytes", shared_object([b"libc.so.6"], runpath=b":".join([b"/x"] * 100_000))),
        ("over 4096 bytes", shared_object([b"lib" + b"a" * 100_000 + b".so"])),
    ):
        with counted() as calls:
            assert said in missing_library(blob)
        entries, looked = calls["Struct.unpack_from"], calls["stat"] + calls["open"]
        assert entries <= MAX_NEEDED + 8 and looked == 0, (said, entries, looked)
    blob = shared_object([b"libc.so.6", b"libnowhere.so.9"], runpath=b"/opt/x")
    for at in range(len(blob)):  # any byte overwritten: a verdict, never an exception
        for value in (0, 0xFF):
            assert isinstance(missing_library(blob[:at] + bytes([value]) + blob[at + 1 :]), str)
        assert isinstance(missing_library(blob[:at]), str)
