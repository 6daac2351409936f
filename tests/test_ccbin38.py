"""nvcc's host compiler (`-ccbin`, `--compiler-bindir`, `NVCC_CCBIN`) where it is a script.

nvcc preprocesses device code with its host compiler, so a wrapper script there that adds
`-DSCALE=3.0f` builds another cubin once edited to `4.0f`; the key held only its path, and
`warm verify` called the old bundle complete. Its digest is keyed now, as a `WARM_CC`
wrapper script's is; a binary is keyed by its version line (`test_ccbin47`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm, nvcc_or_skip
from forked_cli import ForkedWarm
from forked_tool_env import ToolEnvServers
from test_keyprop38 import CUDA_WORKLOAD as WORKLOAD

from warmcli import Kernel
from warmcli.wrapper_script import SCRIPT_MARK, keyed_host_compiler

ARGS = ("--arch", "sm_90", "--compiler", "nvcc")


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


@pytest.fixture(scope="module")
def ccbin_servers() -> Iterator[ToolEnvServers]:
    """Forking servers of commands whatever `NVCC_CCBIN` they set (`tests/forked_tool_env.py`)."""
    servers = ToolEnvServers(ROOT)
    yield servers
    servers.close()


def _wrapper(folder: Path, scale: str) -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / "gcc"
    script.write_text(f'#!/bin/sh\nexec gcc -DSCALE={scale} "$@"\n')
    script.chmod(0o755)
    return script


def _keys(bundle: Path) -> set[str]:
    with sqlite3.connect(bundle) as db:
        return {key for (key,) in db.execute("select key from kernels")}


@pytest.mark.parametrize("spelling", ["-ccbin|{w}", "--compiler-bindir={w}"])
def test_an_edited_host_compiler_script_is_a_miss_an_unchanged_one_a_hit(
    warm: Warm, tmp_path: Path, spelling: str
) -> None:
    """The review's stale hit: the wrapper edited from 3.0f to 4.0f is a miss (`options`,
    naming the script's digest); unchanged, a second run compiles nothing."""
    nvcc_or_skip()
    script = _wrapper(tmp_path / "wrap", "3.0f")
    options = tuple(spelling.format(w=script).split("|"))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(options)))
    bundle = tmp_path / "b.warm"
    first = warm("run", workload, "-b", bundle, *ARGS, "-q")
    assert first.returncode == 0, first.stdout + first.stderr
    again = warm("run", workload, "-b", bundle, *ARGS, "-q")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "stored 0 new kernel(s)" in again.stdout, again.stdout
    _wrapper(tmp_path / "wrap", "4.0f")
    verify = warm("verify", bundle, "--workload", workload, *ARGS)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    out = verify.stdout + verify.stderr
    assert "not in the bundle" in out and "miss: kernel f: options:" in out, out
    assert "wrapper script sha256:" in out and "Traceback" not in out, out


def test_an_nvcc_ccbin_script_is_keyed_by_its_digest(
    warm: Warm, tmp_path: Path, ccbin_servers: ToolEnvServers
) -> None:
    """`NVCC_CCBIN=wrap/gcc`: its digest is in nvcc's identity, so an edit is a `toolchain`
    miss; unchanged, the bundle is complete."""
    nvcc_or_skip()
    script = _wrapper(tmp_path / "wrap", "3.0f")
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", "()"))
    bundle = tmp_path / "b.warm"
    env = ForkedWarm(Warm({**warm.env, "NVCC_CCBIN": str(script)}), ccbin_servers)
    first = env("run", workload, "-b", bundle, *ARGS, "-q")
    assert first.returncode == 0, first.stdout + first.stderr
    same = env("verify", bundle, "--workload", workload, *ARGS)
    assert same.returncode == 0, same.stdout + same.stderr
    _wrapper(tmp_path / "wrap", "4.0f")
    edited = env("verify", bundle, "--workload", workload, *ARGS)
    assert edited.returncode == 1, edited.stdout + edited.stderr
    assert "miss: kernel f: toolchain" in edited.stdout + edited.stderr, edited.stdout


def test_a_folder_or_binary_host_compiler_keys_by_its_path(tmp_path: Path) -> None:
    """Every spelling names a script by its digest, so does a folder whose `gcc` it is; a
    folder without one, a binary that prints no version line and no file keep their path."""
    script = _wrapper(tmp_path / "wrap", "3.0f")
    binary = tmp_path / "bin-gcc"
    binary.write_bytes(b"\x7fELF....")
    for given, keyed in [
        (["-ccbin", str(script)], 1),
        ([f"-ccbin={script}"], 0),
        (["--compiler-bindir", str(script)], 1),
        ([f"--compiler-bindir={script}"], 0),
    ]:
        assert SCRIPT_MARK in keyed_host_compiler(["-O3", *given])[1 + keyed], given
    for path in (tmp_path, binary, tmp_path / "none"):  # (since warm 47: a folder's `gcc`
        options = ("-ccbin", str(path), f"--compiler-bindir={path}")  # and a binary's version
        assert keyed_host_compiler(options) == options  # line: tests/test_ccbin47.py)
    folder = keyed_host_compiler(["-ccbin", str(tmp_path / "wrap")])  # its `gcc` is the script
    assert SCRIPT_MARK in folder[1], folder


def test_a_kernel_without_ccbin_keeps_its_key() -> None:
    """A CUDA kernel naming no host compiler hashes as it did before (the digest a bundle
    made before this change holds), so no bundle misses for it."""
    kernel = Kernel(
        "#ifndef SCALE\n#define SCALE 1.0f\n#endif\n"
        'extern "C" __global__ void f(float *o, int n) '
        "{ int i = threadIdx.x; if (i < n) o[i] = i * SCALE; }",
        "f",
        "Pi",
        language="cuda",
        options=("-O3",),
    )
    assert kernel.content_hash == "9753b1173600101d79214891980abfa3508d801743691f9e096cd5555dd85d53"


SHARED = """
from warmcli import Kernel

DEVICE = "cuda"
SRC = ('#ifndef SCALE\\n#define SCALE 1.0f\\n#endif\\n'
    'extern "C" __global__ void f(float *o, int n) '
    '{ int i = threadIdx.x; if (i < n) o[i] = i * SCALE; }')
OPT = OPTIONS
A = Kernel(SRC, "f", "Pi", language="cuda", options=OPT, defines={"SCALE": "5.0f"})
B = Kernel(SRC.replace(" f(", " g("), "g", "Pi", language="cuda", options=OPT)

def workload(rt):
    b = rt.buffer(4, "float32")
    rt.launch(A, b, 4, grid=(1,), block=(4,))
    rt.launch(B, b, 4, grid=(1,), block=(4,))
"""


@pytest.mark.parametrize("given", ["option", "NVCC_CCBIN"])
def test_a_macro_a_host_compiler_script_adds_is_not_undone_by_a_neighbour(
    warm: Warm, tmp_path: Path, given: str, ccbin_servers: ToolEnvServers
) -> None:
    """The wrapper adds `-DSCALE=3.0f`; kernel f defines SCALE itself and its section undoes
    it, so g after f in one unit computed `i * 1.0f` (alone, as a cold start builds it:
    `i * 3.0f`). As with `WARM_CC`'s words, f is compiled alone: g's PTX multiplies by 3."""
    nvcc_or_skip()
    script = _wrapper(tmp_path / "wrap", "3.0f")
    options = ("-ccbin", str(script)) if given == "option" else ()
    workload = tmp_path / "w.py"
    workload.write_text(SHARED.replace("OPTIONS", repr(options)))
    bundle = tmp_path / "b.warm"
    named = {"NVCC_CCBIN": str(script)} if given != "option" else {}
    env = ForkedWarm(Warm({**warm.env, **named}), ccbin_servers)
    run = env("run", workload, "-b", bundle, *ARGS, "-q", "-j", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    with sqlite3.connect(bundle) as db:
        ptx = [bytes(d) for (d,) in db.execute("select data from blobs") if bytes(d)[:2] == b"//"]
    (of_g,) = [p for p in ptx if b"_g(" in p]
    assert b"0f40400000" in of_g, of_g.decode(errors="replace")  # 3.0f
