"""nvcc's host compiler named by a kernel (`-ccbin`) or `NVCC_CCBIN` where it is a binary.

nvcc preprocesses device code with that compiler, so its predefined macros (`__GNUC__`...)
and its C++ headers reach the cubin. It was keyed by its path alone: a link `g++` repointed at
another compiler (`update-alternatives`, an upgrade in place) built another cubin, and `warm
verify` called the old bundle complete. Its version line is keyed now (remembered by the
binary's stamp: a hot start runs no compiler), a folder's `gcc` (the one nvcc runs there)
alike; a kernel naming none keys as before.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_tool_env import forked_tool_warm

from warmcli import Kernel
from warmcli.backends.toolchain import RACY_SECONDS
from warmcli.kernel import kernel_key
from warmcli.kernel_parts import HOST_VERSION
from warmcli.wrapper_script import SCRIPT_MARK, UNREAD, VERSION_MARK, host_compiler_script

pytestmark = pytest.mark.nvcc
ARGS = ("--arch", "sm_90", "--compiler", "nvcc")

# A compiler unlike the system's: prints another version line, and defines `__FAKE` (as
# another gcc's `__GNUC__` would differ), logging each start to `LOG`.
FAKE = r"""
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    FILE *log = fopen(LOG, "a");
    if (log) { fprintf(log, "%s\n", argc > 1 ? argv[1] : ""); fclose(log); }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) { puts("g++ (Fake) 13.1.0"); return 0; }
    char **args = calloc(argc + 4, sizeof *args);
    args[0] = "/usr/bin/g++";
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    args[argc] = "-D__FAKE=1";
#ifdef INC
    args[argc + 1] = "-isystem";  /* its own system folder, as another gcc's C++ headers */
    args[argc + 2] = INC;
#endif
    execv(args[0], args);
    return 127;
}
"""

WORKLOAD = """
from warmcli import Kernel

DEVICE = "cuda"
K = Kernel(
    '#ifdef __FAKE\\n#define SCALE 3.0f\\n#else\\n#define SCALE 1.0f\\n#endif\\n'
    'extern "C" __global__ void f(float *o, int n) '
    '{ int i = threadIdx.x; if (i < n) o[i] = i * SCALE; }',
    "f", "Pi", language="cuda", options=OPTIONS,
)

def workload(rt):
    b = rt.buffer(4, "float32")
    rt.launch(K, b, 4, grid=(1,), block=(4,))
"""


# conftest's `warm`, each command a fork of a process that imported the CLI once, one
# whatever NVCC_CCBIN a test names (`tests/forked_tool_env.py`)
tool_servers, warm = forked_tool_warm()


def _fake(tmp_path: Path, own: Path | None = None) -> tuple[Path, Path]:
    """The fake compiler (built by the system's `cc`; `own` its own system folder) and the
    log of its starts."""
    log, source, binary = tmp_path / "log", tmp_path / "fake.c", tmp_path / "fake-g++"
    source.write_text(FAKE)
    inc = [f'-DINC="{own}"'] if own else []
    subprocess.run(["cc", f'-DLOG="{log}"', *inc, "-o", binary, source], check=True)
    return binary, log


def _settled(path: Path) -> None:
    """Wait until `path` is older than `toolchain.RACY_SECONDS`: its version line remembered
    by its stamp from the next probe on (one changed just now has no stamp)."""
    age = time.time() - os.stat(path).st_ctime
    time.sleep(max(0.0, RACY_SECONDS + 0.1 - age))


def _system_gxx() -> str:
    if not os.path.isfile("/usr/bin/g++"):
        pytest.skip("no /usr/bin/g++")
    return os.path.realpath("/usr/bin/g++")


def _ptx(bundle: Path) -> list[bytes]:
    with sqlite3.connect(bundle) as db:
        return [bytes(d) for (d,) in db.execute("select data from blobs") if bytes(d)[:2] == b"//"]


def _link(link: Path, target: str | Path) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target)


@pytest.mark.parametrize("spelling", ["-ccbin|{p}", "--compiler-bindir={p}", "folder"])
def test_a_host_compiler_link_repointed_is_a_miss_and_a_hot_start_runs_none(
    warm: Warm, tmp_path: Path, spelling: str
) -> None:
    """The link starts at the system g++; a hot `verify` runs no compiler and finds the bundle
    complete; repointed at the fake (whose build multiplies by 3), it is an `options` miss
    naming both version lines, and the next run stores the fake's build."""
    nvcc_or_skip()
    real = _system_gxx()
    fake, log = _fake(tmp_path)
    (tmp_path / "bin").mkdir()
    link = tmp_path / "bin" / ("gcc" if spelling == "folder" else "g++")
    _link(link, real)
    named = str(link.parent) if spelling == "folder" else str(link)
    options = ("-ccbin", named) if spelling == "folder" else spelling.format(p=named).split("|")
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(tuple(options))))
    bundle = tmp_path / "b.warm"
    first = warm("run", workload, "-b", bundle, *ARGS, "-q")
    assert first.returncode == 0, first.stdout + first.stderr
    hot = warm("verify", bundle, "--workload", workload, *ARGS)
    assert hot.returncode == 0, hot.stdout + hot.stderr
    _link(link, fake)
    log.unlink(missing_ok=True)
    _settled(fake)
    moved = warm("verify", bundle, "--workload", workload, *ARGS)
    out = moved.stdout + moved.stderr
    assert moved.returncode == 1, out
    assert "miss: kernel f: options:" in out and "(Fake) 13.1.0" in out, out
    assert "Traceback" not in out, out
    again = warm("run", workload, "-b", bundle, *ARGS, "-q")
    assert again.returncode == 0, again.stdout + again.stderr
    assert any(b"0f40400000" in p for p in _ptx(bundle)), "the fake's build (3.0f) not stored"
    log.unlink()
    hot = warm("verify", bundle, "--workload", workload, *ARGS)
    assert hot.returncode == 0, hot.stdout + hot.stderr
    assert not log.exists(), f"a hot start ran the host compiler: {log.read_text()!r}"


def test_an_nvcc_ccbin_binary_repointed_is_a_toolchain_miss(warm: Warm, tmp_path: Path) -> None:
    """`NVCC_CCBIN=link`: its version line is in nvcc's identity (it was its path alone)."""
    nvcc_or_skip()
    real = _system_gxx()
    fake, _ = _fake(tmp_path)
    link = tmp_path / "g++"
    _link(link, real)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", "()"))
    bundle = tmp_path / "b.warm"
    warm.env = {**warm.env, "NVCC_CCBIN": str(link)}
    first = warm("run", workload, "-b", bundle, *ARGS, "-q")
    assert first.returncode == 0, first.stdout + first.stderr
    _link(link, fake)
    moved = warm("verify", bundle, "--workload", workload, *ARGS)
    out = moved.stdout + moved.stderr
    assert moved.returncode == 1 and "miss: kernel f: toolchain" in out, out
    assert "(Fake) 13.1.0" in out, out


def test_a_header_of_the_ccbin_compilers_own_shadowed_by_a_kernel_folder_is_keyed(
    warm: Warm, tmp_path: Path
) -> None:
    """The kernel includes `<fakesys.h>`, found in the `-ccbin` compiler's own folder (not the
    default gcc's), which includes `<shadow.h>`, held by the kernel's `-I` folder: an edit
    there is a `headers` miss (its own folders were the default gcc's: the walk stopped at
    `fakesys.h`, and the old build was served)."""
    nvcc_or_skip()
    own, inc = tmp_path / "own", tmp_path / "inc"
    own.mkdir(), inc.mkdir()
    (own / "fakesys.h").write_text("#pragma once\n#include <shadow.h>\n")
    (inc / "shadow.h").write_text("#define SCALE 2.0f\n")
    fake, _ = _fake(tmp_path, own)
    workload = tmp_path / "w.py"
    chosen = "#ifdef __FAKE\\n#define SCALE 3.0f\\n#else\\n#define SCALE 1.0f\\n#endif\\n"
    source = WORKLOAD.replace(chosen, "#include <fakesys.h>\\n")
    assert source != WORKLOAD
    workload.write_text(source.replace("OPTIONS", repr(("-ccbin", str(fake), f"-I{inc}"))))
    bundle = tmp_path / "b.warm"
    first = warm("run", workload, "-b", bundle, *ARGS, "-q")
    assert first.returncode == 0, first.stdout + first.stderr
    (inc / "shadow.h").write_text("#define SCALE 5.0f\n")
    edited = warm("verify", bundle, "--workload", workload, *ARGS)
    out = edited.stdout + edited.stderr
    assert edited.returncode == 1 and "miss: kernel f: headers:" in out, out
    assert "shadow.h" in out and "Traceback" not in out, out


def test_a_binary_or_folder_host_compiler_names_its_version(tmp_path: Path) -> None:
    """Pure logic, with a fake version reader: a binary (or a folder's `gcc`) is its path and
    `VERSION_MARK` and its line; a script keeps its digest; a folder with no `gcc`, no file,
    their path alone; no reader told, `UNREAD`."""
    binary = tmp_path / "g++"
    binary.write_bytes(b"\x7fELF....")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "gcc").symlink_to(binary)
    script = tmp_path / "s"
    script.write_text('#!/bin/sh\nexec gcc "$@"\n')
    told = HOST_VERSION[:]
    try:
        HOST_VERSION[:] = [lambda where: f"fake of {os.path.basename(where)}"]
        assert host_compiler_script(str(binary)) == f"{binary}{VERSION_MARK}fake of g++>"
        assert host_compiler_script(str(tmp_path / "d")).endswith(f"{VERSION_MARK}fake of gcc>")
        assert SCRIPT_MARK in host_compiler_script(str(script))
        for plain in (tmp_path, tmp_path / "none"):
            assert host_compiler_script(str(plain)) == str(plain)
        HOST_VERSION[:] = []  # never its path alone (review47e): a miss
        assert host_compiler_script(str(binary)) == f"{binary}{VERSION_MARK}{UNREAD}>"
    finally:
        HOST_VERSION[:] = told


def test_a_kernel_naming_no_host_compiler_keeps_its_key() -> None:
    """A CUDA kernel without `-ccbin` keys as main's did (the digest main computed)."""
    kernel = Kernel(
        'extern "C" __global__ void f(float *o) { o[0] = 1.0f; }',
        "f",
        "P",
        language="cuda",
        options=("-O3", "--use_fast_math"),
    )
    key = kernel_key(kernel, "sm_90", "nvcc:Cuda compilation tools, release 13.0, V13.0.88")
    assert key == "dc70c051987068474eb2788315db09ecafc03538d01a9d0e9c0c346ea79158f3"
