"""Faults review54b found in stop 54's merged changes, each failing before its fix.

A kernel reading `-I.`'s header, launched in a folder the workload then removes (a
`tempfile.mkdtemp()` it cleans up): `warm run`'s first pass queued it with that folder
(readme54's `CompileUnit.folder`), and the second pass, launching it again in a new folder
whose header has the same content (the same key), found the stale unit on the queue and built
it in the removed folder: `local.h: No such file or directory`, `warm run` failed (exit 2)
where the workload alone computes 101. NVRTC given such a folder whole, in a folder whose name
is no UTF-8: UnicodeEncodeError. overhead54's `at_once`: Ctrl-C waited out the probe its thread
ran, and where no thread can start (`ulimit -s`) a host kernel's first miss was a traceback.
Real parts: the real cc and NVRTC, the real CLI (forked) warms, a real production process
serves, real children are killed, a real stack limit refuses the thread.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_readme54 import SERVE

# A kernel reading `local.h` from `-I.`, launched in a folder made for it and removed after;
# FIRST: a plain kernel launched before it, whose launch compiles the queue (its stale unit
# too), or none (its own launch finds its stale unit queued).
IN_TEMPORARY_FOLDERS = """
import os, shutil, tempfile
from warmcli import Kernel
DEVICE = "host"
SRC = '#include "local.h"\\nvoid %s(int *y) { y[0] = VAL + %d; }'
PLAIN = Kernel("void zero(int *y) { y[0] = 0; }", "zero", "P")
K1 = Kernel(SRC % ("one", 1), "one", "P", options=("-I.",))
def workload(rt):
    start, ys = os.getcwd(), [rt.buffer(1, "int32")]
    if FIRST:
        rt.launch(PLAIN, ys[0])
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "local.h"), "w") as header:
        header.write("#define VAL 100\\n")
    os.chdir(folder)
    ys.append(rt.buffer(1, "int32"))
    rt.launch(K1, ys[-1])
    os.chdir(start)
    shutil.rmtree(folder)
    return ys
"""


@pytest.mark.parametrize("first", [True, False])
def test_a_kernel_keyed_in_a_folder_removed_since_is_built_where_it_is_launched_again(
    warm: Warm, tmp_path: Path, workload_file, first: bool
) -> None:
    """Before: `warm run` exit 2, `local.h: No such file or directory` (the stale unit)."""
    source = f"FIRST = {first}\n" + IN_TEMPORARY_FOLDERS
    path, bundle = workload_file(source), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr
    assert warm.production(SERVE, path, bundle=bundle) == [0, 101]


def test_a_trigraph_spliced_include_in_a_folder_removed_since_is_built_where_launched_again(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """`#inc??/` + newline + `lude` under `-std=c11` (trigraphs read) from `CPATH=.`: no `-I`,
    no `include` and no backslash in the source. Before (stop 60): exit 2, the stale unit."""
    source = "FIRST = True\n" + IN_TEMPORARY_FOLDERS.replace(
        '#include "local.h"', '#inc??/\\nlude "local.h"'
    ).replace('options=("-I.",)', 'options=("-std=c11",)')
    assert "#inc??/" in source and "-std=c11" in source, source
    path, bundle = workload_file(source), tmp_path / "b.warm"
    here = warm.with_env(CPATH=".")
    done = here("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr
    assert here.production(SERVE, path, bundle=bundle) == [0, 101]


def test_an_interrupt_of_at_once_kills_the_probe_its_thread_runs() -> None:
    """Ctrl-C while overhead54's `at_once` asks `as --version` and `ld --version` (a host
    toolchain's identity, first asked in the caller's own thread, with no `Owner`): the
    caller's child was killed, but the join waited out the thread's (a toolchain on a cold
    mount: up to the probe's timeout, where asked alone it was killed at once)."""
    from warmcli.backends import processes

    slept: list[processes.Finished] = []

    def interrupted() -> None:
        while not processes._Live.groups:  # the thread's child started
            threading.Event().wait(0.01)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        processes.at_once(lambda: slept.append(processes.run(["sleep", "3"], 60)), interrupted)
    # killed, not ended (before: it slept its 3 s, exit 0)
    assert slept and slept[0].returncode < 0 and not slept[0].timed_out, slept


# A process whose threads cannot start (each thread's stack is `ulimit -s`'s size, refused
# here): whether a plain thread started, then what `at_once` gave.
NO_THREADS = """
import threading
from warmcli.backends import processes
try:
    threading.Thread(target=int).start()
    print("started")
except RuntimeError:
    print("refused")
print(processes.at_once(lambda: processes.run(["true"], 30).returncode, lambda: 2))
"""


def test_at_once_asks_one_by_one_where_no_thread_starts() -> None:
    """A serving process's first miss on a host kernel (its toolchain's identity asks `as`
    and `ld` through `at_once`) failed with a traceback, `RuntimeError: can't start new
    thread`, under a stack limit no thread's stack fits (`ulimit -s 500000000`), where it
    compiled before overhead54: it now asks them one after the other."""
    big = 500_000_000 * 1024

    def limited() -> None:  # (a lower hard limit: as much as it allows)
        hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        resource.setrlimit(resource.RLIMIT_STACK, (min(big, hard) if hard >= 0 else big, hard))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", NO_THREADS], capture_output=True, text=True, env=env,
        preexec_fn=limited, timeout=60,
    )  # fmt: skip
    if done.stdout.startswith("started"):
        pytest.skip("this machine starts a thread of that stack (memory overcommitted)")
    assert done.returncode == 0 and done.stdout == "refused\n(0, 2)\n", done.stderr


def test_nvrtc_builds_a_relative_include_folder_whose_path_is_no_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """readme54 gives NVRTC `-I.` as the folder its kernel was keyed in, whole: in a folder
    whose name holds a byte no UTF-8 has (`caf\\xff`, as `os.getcwd()` gives it: a surrogate),
    NVRTC's options were encoded as UTF-8 and the compile raised UnicodeEncodeError
    (`surrogates not allowed`) where `-I.` alone built; now the folder's own bytes."""
    from warmcli.backends.compiler import CompileUnit
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc
    from warmcli.kernel import Kernel

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)")
    folder = os.path.join(os.fsencode(tmp_path), b"caf\xff")
    os.mkdir(folder)
    with open(os.path.join(folder, b"local.h"), "w") as header:
        header.write("#define VAL 7\n")
    monkeypatch.chdir(folder)
    source = '#include "local.h"\nextern "C" __global__ void v(int *y) { y[0] = VAL; }'
    kernel = Kernel(source, "v", "P", language="cuda", options=("-I.",))
    unit = CompileUnit.queued("7" * 64, kernel, "sm_90")
    assert os.fsencode(unit.folder) == folder
    built = NvrtcCompiler().compile_group([unit])  # (before: UnicodeEncodeError)
    assert built.binary and unit.key in built.symbols
