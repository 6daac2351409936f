"""What hostile47 found in warm's home (`warmcli.home`): the files warm trusts besides the
bundle, attacked by another user who may write the home, and corrupted by hand. Each case is
the real CLI (each command a fork of a process that imported it once, `tests/forked_cli.py`;
each production process a fork of one that imported numpy and warmcli once) over a real
bundle, a real home and the real C compiler."""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """\
from warmcli import Kernel

SRC = ('#include <stdlib.h>\\n#include "loc.h"\\n'
       "void fill(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 2.0f + LOC; }")
FILL = Kernel(SRC, "fill", "Pi", options=["-I{inc}"])

def workload(rt):
    x = rt.buffer(16)
    rt.launch(FILL, x, 16)
"""

SERVE = """\
import json, sys, warmcli
sys.path.insert(0, sys.argv[1])
import w
rt = warmcli.runtime("host")
x = rt.buffer(16)
rt.launch(w.FILL, x, 16)
print(json.dumps({"x": rt.read(x).tolist(), "misses": len(warmcli.report().misses)}))
"""


def _warmed(warm: Warm, tmp_path: Path) -> tuple[Path, Path]:
    """The workload `w.py` (a host kernel with an include folder, reaching `<stdlib.h>`)
    warmed into `b.warm`, and warm's home as that left it."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "loc.h").write_text("#define LOC 1.0f\n")
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("{inc}", str(inc)))
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    return workload, Path(warm.env["WARM_HOME"])


def _edited(home: Path, starts: str, edit: object) -> str:
    """`toolchains.json` with the value of its entry starting `starts` edited (`edit` of the
    value), written back 0600 as warm writes it; the value warm had remembered. cc's whole
    identity remembered (`host.identity`, believed while its places keep their stamps) is
    dropped, so that the next process reads the entry edited, as one finding cc anew does."""
    path = home / "toolchains.json"
    lines = json.loads(path.read_text())
    lines = {k: v for k, v in lines.items() if not k.startswith("cc identity|")}
    (stamp,) = (k for k in lines if k.startswith(starts + "|"))
    real = lines[stamp]
    lines[stamp] = edit(real)  # type: ignore[operator]
    path.write_text(json.dumps(lines))
    path.chmod(0o600)
    return real


def _remembered(home: Path, starts: str) -> str:
    lines = json.loads((home / "toolchains.json").read_text())
    return next(v for k, v in lines.items() if k.startswith(starts + "|"))


def test_a_nul_in_a_remembered_program_folder_is_no_traceback(warm: Warm, tmp_path: Path) -> None:
    """cc's program folders remembered with a NUL in one (a corrupted home): a production
    process raised `ValueError: embedded null byte` from `os.access`, and `warm run` failed
    (exit 2); such a line is not believed: cc is asked again, and the build served."""
    workload, home = _warmed(warm, tmp_path)
    real = _edited(home, "cc programs ()", lambda v: v + ":/usr/bin\0")
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert "stored 0 new kernel(s)" in done.stdout
    assert _remembered(home, "cc programs ()") == real  # asked again, remembered over
    _edited(home, "cc programs ()", lambda v: v + ":/usr/bin\0")
    served = warm.production(SERVE, tmp_path, bundle=tmp_path / "b.warm")
    assert served == {"x": [3.0] * 16, "misses": 0}


def test_a_forged_list_of_many_folders_is_not_believed(warm: Warm, tmp_path: Path) -> None:
    """cc's own include folders (`cc -E -v`) and its program folders remembered as 90,000
    folders each (the user's own file, 0600, under its 1 MiB cap): each process keying a
    kernel with include folders stat'ed them all, per system header's include (3.6 s a
    process, where 0.3 s is the norm). A list past `MAX_FOLDERS` is not believed: cc is asked
    again, and its answer remembered over it."""
    workload, home = _warmed(warm, tmp_path)
    many = [f"/nx/{i}" for i in range(45_000)]
    includes = _edited(home, "cc -E -v includes", lambda v: "\n".join([*many, v]))
    programs = _edited(home, "cc programs ()", lambda v: ":".join([*many, v]))
    assert (home / "toolchains.json").stat().st_size < 1 << 20  # (read: under the cap)
    started = time.monotonic()
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "-q")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "stored 0 new kernel(s)" in done.stdout
    assert _remembered(home, "cc -E -v includes") == includes, took
    assert _remembered(home, "cc programs ()") == programs, took


def test_a_host_library_folder_linked_by_another_user_is_not_pruned(
    warm: Warm, tmp_path: Path
) -> None:
    """A home others may write (0777: `WARM_HOME` named a shared folder), where another user
    put `host-libraries` as a link to a folder of this user's (0755, its own: `private`):
    warm wrote its libraries there and pruned it, removing the user's own `*.so` past 512
    and a `*.tmp` over an hour old (217 of 601 files). Such a folder is not used (a private
    temporary one is, as where the home cannot be written); the kernel still serves."""
    workload, home = _warmed(warm, tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for name in ("toolchains.json", "system-headers"):
        os.rename(home / name, shared / name)
    victim = tmp_path / "mine"
    victim.mkdir()
    old = time.time() - 2 * 86400
    for i in range(600):
        (victim / f"lib{i}.so").write_text(f"lib {i}\n")
    (victim / "notes.tmp").write_text("precious\n")
    for each in victim.iterdir():
        os.utime(each, (old, old))
    (shared / "host-libraries").symlink_to(victim)
    there = warm.with_env(WARM_HOME=str(shared))
    done = there("run", workload, "--bundle", tmp_path / "b2.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in victim.iterdir()) == sorted(
        [*(f"lib{i}.so" for i in range(600)), "notes.tmp"]
    )
    served = there.production(SERVE, tmp_path, bundle=tmp_path / "b2.warm")
    assert served == {"x": [3.0] * 16, "misses": 0}
    if os.geteuid() == 0:  # a sticky home (`/tmp`): the link is another user's own
        shared.chmod(0o1777)
        os.lchown(shared / "host-libraries", 12345, 12345)
        done = there("run", workload, "--bundle", tmp_path / "b3.warm", "-q")
        assert done.returncode == 0, done.stderr
        assert len(list(victim.iterdir())) == 601


CUDA_WORKLOAD = """\
from warmcli import Kernel

K = Kernel('extern "C" __global__ void k(float *x) { x[threadIdx.x] = 1.0f; }', "k", "P",
           language="cuda")

def workload(rt):
    x = rt.buffer(32)
    rt.launch(K, x, grid=1, block=32)
"""


def test_a_remembered_nvcc_arch_list_of_a_huge_number_is_no_traceback(
    warm: Warm, tmp_path: Path
) -> None:
    """nvcc's `--list-gpu-code` remembered naming `sm_` and 5,000 digits (a corrupted
    home): `int()` past Python's 4,300 digits raised `ValueError` out of `warm run` (its
    traceback, exit 1); such a number is no SM: the others are read, the kernel built."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    workload = tmp_path / "cw.py"
    workload.write_text(CUDA_WORKLOAD)
    nvcc = warm.with_env(WARM_CUDA_COMPILER="nvcc")
    done = nvcc("run", workload, "--bundle", tmp_path / "b.warm", "--arch", "sm_90", "-q")
    assert done.returncode == 0, done.stderr
    home = Path(warm.env["WARM_HOME"])
    _edited(home, "nvcc --list-gpu-code", lambda v: f"sm_{'9' * 5000} {v}")
    done = nvcc("run", workload, "--bundle", tmp_path / "b.warm", "--arch", "sm_90", "-q")
    assert done.returncode == 0, done.stderr
    assert "stored 0 new kernel(s)" in done.stdout


def test_a_remembered_etag_no_header_may_hold_is_not_sent(warm: Warm, tmp_path: Path) -> None:
    """`remote/<url>/meta.json` (warm's own, 0600) whose ETag holds a line break, or a
    character latin-1 has not (a corrupted home): `http.client` refused it as
    `If-None-Match` with `ValueError`, a traceback out of `warm pull` and of a production
    process over the URL; such an ETag is not sent: the bundle is downloaded afresh."""
    _, home = _warmed(warm, tmp_path)
    served = tmp_path / "served"
    served.mkdir()
    os.rename(tmp_path / "b.warm", served / "app.warm")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/app.warm"
        assert warm("pull", url, tmp_path / "got.warm").returncode == 0
        (meta,) = home.glob("remote/*/meta.json")
        for bad in ("\r\nX-Evil: 1", "\u20ac"):
            memo = json.loads(meta.read_text())
            meta.write_text(json.dumps({**memo, "etag": memo["etag"] + bad}))
            meta.chmod(0o600)
            done = warm("pull", url, tmp_path / "got.warm")
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr
        meta.write_text(json.dumps({**memo, "etag": memo["etag"] + "\n"}))
        assert warm.production(SERVE, tmp_path, bundle=url) == {"x": [3.0] * 16, "misses": 0}
    finally:
        server.shutdown()
        server.server_close()


def test_a_compiler_with_a_version_line_of_5000_characters_stores_what_warm_reads(
    warm: Warm, tmp_path: Path
) -> None:
    """A C compiler (a binary, its version line remembered in warm's home) whose `--version`
    line is 5,000 characters long: `warm run` stored a kernel row and a fingerprint whose
    toolchain was over the 4,096 characters a bundle holds, which its own readers call
    corrupt (`verify`: 2 problems; the run's check: a miss, exit 1). A line over 1,024
    characters is named by its length and digest, as a long environment value is."""
    from conftest import cc_binary

    workload, _ = _warmed(warm, tmp_path)
    cc = cc_binary(tmp_path / "longcc", "longcc (X) 1.0 " + "y" * 5000)
    time.sleep(2.1)  # (a binary changed this lately has no stamp: its line is not remembered)
    other = warm.with_env(WARM_CC=str(cc))
    bundle = tmp_path / "long.warm"
    for _ in range(2):  # its line read, then remembered
        done = other("run", workload, "--bundle", bundle, "-q")
        assert done.returncode == 0, done.stderr + done.stdout
    checked = other("verify", bundle)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "corrupt" not in checked.stdout + checked.stderr


def test_a_toolchains_file_of_more_lines_than_warm_keeps_is_not_believed(
    warm: Warm, tmp_path: Path
) -> None:
    """A `toolchains.json` of 60,000 lines (the user's own, under its 1 MiB cap; warm keeps
    64): each hot process parsed them all, twice (+0.1 s and 10 MB a start), for good, since
    a process that finds its lines remembered writes nothing. It is not believed: the lines
    are read again and the file written anew, of warm's own."""
    workload, home = _warmed(warm, tmp_path)
    path = home / "toolchains.json"
    lines = json.loads(path.read_text())
    path.write_text(json.dumps({**{f"k{i}": "v" for i in range(60_000)}, **lines}))
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert "stored 0 new kernel(s)" in done.stdout
    assert json.loads(path.read_text()) == lines


def test_a_forged_list_of_nvcc_gcc_folders_is_not_believed(warm: Warm, tmp_path: Path) -> None:
    """The C++ folders of the `gcc` nvcc runs (`cc -E -v includes -x c++`, since warm 47
    followed for a CUDA kernel with include folders) remembered as 45,000 folders: `warm run`
    of one such kernel took 53 s (80,000: 0.5 s with the list cc said). Not believed: cc is
    asked again, and its answer remembered over it."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "loc.h").write_text("#define LOC 1.0f\n")
    workload = tmp_path / "cw.py"
    source = '#include <stdint.h>\\n#include "loc.h"\\n' + CUDA_WORKLOAD.split("'")[1]
    text = CUDA_WORKLOAD.replace(CUDA_WORKLOAD.split("'")[1], source)
    workload.write_text(text.replace('language="cuda"', f'language="cuda", options=["-I{inc}"]'))
    nvcc = warm.with_env(WARM_CUDA_COMPILER="nvcc")
    args = ("run", workload, "--bundle", tmp_path / "b.warm", "--arch", "sm_90", "-q")
    assert nvcc(*args).returncode == 0
    home = Path(warm.env["WARM_HOME"])
    many = [f"/nx/{i}" for i in range(45_000)]
    said = _edited(home, "cc -E -v includes -x c++", lambda v: "\n".join([*many, v]))
    done = nvcc(*args)
    assert done.returncode == 0, done.stderr
    assert "stored 0 new kernel(s)" in done.stdout
    assert _remembered(home, "cc -E -v includes -x c++") == said
