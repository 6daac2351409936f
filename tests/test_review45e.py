"""Review of cuda45 (the `gcc` nvcc runs in nvcc's identity), with real nvcc, compile-only.

nvcc puts its own folders (its `nvvm/bin` and the folder it was started from, `nvcc.profile`'s
`PATH +=`) before `PATH` when it runs `gcc`: a `gcc` in the toolkit's `bin` (NVIDIA's advice for
picking a host compiler: `ln -s /usr/bin/gcc-12 /usr/local/cuda/bin/gcc`) is the one it runs,
whatever `PATH` holds first. The identity named `PATH`'s.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from tests.conftest import nvcc_or_skip

SCALED = (
    "#ifndef SCALE\n#define SCALE 3.0f\n#endif\n"
    'extern "C" __global__ void sc(float *y) { y[0] = SCALE; }\n'
)
WORKLOAD = f"""\
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel({SCALED!r}, "sc", "P", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
"""
CLEARED = ("CPATH", "CPLUS_INCLUDE_PATH", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN")


def _toolkit_bin(nvcc: str) -> Path:
    """The folder of the nvcc binary `nvcc` runs (`_HERE_` in its `--dryrun`)."""
    import subprocess

    dryrun = [nvcc, "--dryrun", "-E", "-x", "cu", os.devnull]
    out = subprocess.run(dryrun, capture_output=True, text=True)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("#$ _HERE_="):
            return Path(line.partition("=")[2])
    pytest.skip("nvcc --dryrun names no _HERE_")


def _toolkit_copy(folder: Path, real_bin: Path, gcc: str | None) -> str:
    """A toolkit of links to the real one's files (`bin/nvcc` a link: nvcc takes its folder
    from the name it was started by), with `gcc` in its `bin` where given: its nvcc."""
    (folder / "bin").mkdir(parents=True)
    for entry in real_bin.parent.iterdir():
        if entry.name != "bin":
            (folder / entry.name).symlink_to(entry)
    for entry in real_bin.iterdir():
        (folder / "bin" / entry.name).symlink_to(entry)
    if gcc is not None:
        (folder / "bin" / "gcc").write_text(gcc)
        (folder / "bin" / "gcc").chmod(0o755)
    return str(folder / "bin" / "nvcc")


def test_a_gcc_in_the_toolkits_bin_is_the_one_nvcc_runs_and_keys(warm, tmp_path: Path) -> None:
    """Warmed by a toolkit with no `gcc` of its own, verified by the same nvcc release whose
    `bin` holds a `gcc` that defines SCALE (nvcc runs it, before `PATH`'s): a `toolchain`
    miss. Before: one identity (`PATH`'s gcc named for both), the SCALE 3 cubin served where
    nvcc builds SCALE 5."""
    real_bin = _toolkit_bin(nvcc_or_skip())
    system_gcc = shutil.which("gcc") or pytest.skip("no gcc")
    plain = _toolkit_copy(tmp_path / "plain", real_bin, None)
    scaled = _toolkit_copy(
        tmp_path / "scaled", real_bin, f'#!/bin/sh\nexec {system_gcc} -DSCALE=5.0f "$@"\n'
    )
    (tmp_path / "w.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    for name in CLEARED:
        warm.env.pop(name, None)
    args = ("--arch", "sm_90", "--compiler", "nvcc")
    run = warm("run", tmp_path / "w.py", *args, "--nvcc", plain, "-b", bundle, "-q")
    assert run.returncode == 0, run.stderr + run.stdout
    verify = ("verify", bundle, "--workload", tmp_path / "w.py", *args, "--json")
    other = warm(*verify, "--nvcc", scaled, "--explain-misses")
    report = json.loads(other.stdout)
    assert not report["verified"] and report["compilation"]["queued"] == 1, other.stdout
    (explained,) = report["explanations"]
    assert explained["reason"] == "toolchain" and "wrapper script" in str(explained), explained
    same = warm(*verify, "--nvcc", plain)
    assert json.loads(same.stdout)["compilation"]["compiled"] == 0, same.stdout


def test_the_toolkit_path_is_read_once_and_remembered(tmp_path: Path) -> None:
    """nvcc's own folders come from its `--dryrun` once per nvcc, remembered in warm's home as
    its version line is: a second process (the memo cleared) runs no nvcc for them."""
    from warmcli.backends.cuda import host_options

    nvcc = nvcc_or_skip()
    first = host_options.toolkit_path(nvcc)
    assert first and all(os.path.isabs(f) for f in first.split(os.pathsep)), first
    host_options.toolkit_path.cache_clear()
    from warmcli.backends import processes

    ran: list[object] = []
    real_run = processes.run
    try:  # a fake only to count: any subprocess here would be a hot path's cost
        processes.run = lambda *a, **k: ran.append(a) or real_run(*a, **k)  # type: ignore[assignment]
        assert host_options.toolkit_path(nvcc) == first
    finally:
        processes.run = real_run  # type: ignore[assignment]
    assert ran == []


def test_an_nvcc_with_no_gcc_to_run_is_served_the_bundles_build(warm, tmp_path: Path) -> None:
    """A production machine whose nvcc finds no `gcc` (a slim image: the toolkit, no host
    compiler) can build nothing: the bundle's nvcc build is served there, as where no compiler
    is. Before: refused (`built by nvcc with host compiler gcc ..., this compiler with none
    named`), then rebuilt by an nvcc that cannot run: every kernel failed to compile."""
    nvcc = nvcc_or_skip()
    (tmp_path / "w.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    for name in CLEARED:
        warm.env.pop(name, None)
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc)
    run = warm("run", tmp_path / "w.py", *args, "-b", bundle, "-q")
    assert run.returncode == 0, run.stderr + run.stdout
    (tmp_path / "no-gcc").mkdir()
    warm.env["PATH"] = str(tmp_path / "no-gcc")
    verify = warm("verify", bundle, "--workload", tmp_path / "w.py", *args, "--json")
    report = json.loads(verify.stdout)
    assert report["verified"] and report["compilation"]["compiled"] == 0, verify.stdout


LAUNCHER = """#include <unistd.h>
int main(int argc, char **argv) { (void)argc; argv[0] = "gcc"; execv(REAL, argv); return 127; }
"""


def test_a_ccache_gcc_keys_the_compiler_it_runs_not_its_own_stamp(tmp_path: Path) -> None:
    """`/usr/lib/ccache/gcc` (a link to the `ccache` binary, first on `PATH`) runs the next
    `gcc` on `PATH`. Before: nvcc's identity read the version line through it and remembered
    it by ccache's stamp, so a gcc upgraded behind it (ccache untouched) kept the old line:
    the new gcc's builds keyed, and served, as the old one's. Now ccache is looked through:
    the compiler it runs is probed (and keys as it does without ccache)."""
    import subprocess
    import time

    from warmcli.backends import toolchain
    from warmcli.backends.cuda import host_options

    system_gcc = shutil.which("gcc") or pytest.skip("no gcc")
    for name in ("launch", "launch-bin", "real"):
        (tmp_path / name).mkdir()
    real = tmp_path / "real" / "gcc"
    (tmp_path / "ccache.c").write_text(LAUNCHER)
    build = [system_gcc, f'-DREAL="{real}"', "-o", str(tmp_path / "launch-bin" / "ccache")]
    subprocess.run([*build, str(tmp_path / "ccache.c")], check=True)
    (tmp_path / "launch" / "gcc").symlink_to(tmp_path / "launch-bin" / "ccache")
    real.symlink_to(system_gcc)
    time.sleep(toolchain.RACY_SECONDS)  # the launcher's stamp settled: remembered

    def named(search: str) -> str:
        toolchain.probe.cache_clear()  # as a new process: only warm's home remembers
        host_options.host_compiler.cache_clear()
        return host_options.host_compiler(search)

    search = f"{tmp_path / 'launch'}{os.pathsep}{tmp_path / 'real'}"
    before = named(search)
    assert before and before == named(str(tmp_path / "real")), before
    real.unlink()  # gcc upgraded in place: ccache's file untouched
    real.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "gcc (Upgraded) 13.1.0"; exit 0; }\n'
        f'exec {system_gcc} -DSCALE=5.0f "$@"\n'
    )
    real.chmod(0o755)
    after = named(search)
    assert "(Upgraded) 13.1.0" in after, (before, after)


HALF = '#include <cuda_fp16.h>\nextern "C" __global__ void h(__half *x) { x[0] = 1; }\n'


@pytest.mark.parametrize("variable", ["CPATH", "CPLUS_INCLUDE_PATH"])
def test_the_toolkit_include_by_another_name_in_either_variable_keys_as_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """`CPLUS_INCLUDE_PATH` (or `CPATH`) at nvcc's own `include` by another spelling
    (`$CUDA_HOME/include`; nvcc names it `.../bin/../targets/x86_64-linux/include`): gcc keeps
    that folder once, in the variable's place (a system folder's, for `CPLUS_INCLUDE_PATH`),
    and it is still the toolkit's. Before: keyed by its headers' content there (a miss beside
    a machine where it is unset)."""
    from warmcli import kernel as kernel_module
    from warmcli.backends.cuda.host_options import toolkit_includes
    from warmcli.backends.cuda.nvcc import NvccCompiler
    from warmcli.kernel import Kernel, kernel_key

    compiler = NvccCompiler(nvcc_or_skip(), ptx="auto")
    own = toolkit_includes(compiler.path) or pytest.skip("nvcc names no include folders")
    (tmp_path / "alias").symlink_to(own[0])
    kernel = Kernel(HALF, "h", "P", language="cuda")

    def key(value: str | None) -> str:
        for name in CLEARED:
            monkeypatch.delenv(name, raising=False)
        if value is not None:
            monkeypatch.setenv(variable, value)
        monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})
        return kernel_key(kernel, "sm_90", compiler.toolchain.identity)

    plain = key(None)
    for alias in (os.path.realpath(own[0]), str(tmp_path / "alias")):
        assert key(alias) == plain, alias


def test_an_nvcc_build_by_a_gcc_wrapper_script_is_not_served_to_nvrtc(warm, tmp_path: Path) -> None:
    """Warmed by nvcc whose `gcc` on `PATH` is a script adding `-DSCALE=5.0f` (which may add
    options, as `NVCC_APPEND_FLAGS` may, whose builds NVRTC is not served), verified by NVRTC:
    a `toolchain` miss. Before: served, NVRTC's process given the SCALE 5 cubin where it builds
    SCALE 3 (NVRTC names no host compiler: only nvcc's were compared)."""
    nvcc_or_skip()
    pytest.importorskip("warmcli.backends.cuda.nvrtc")
    system_gcc = shutil.which("gcc") or pytest.skip("no gcc")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "gcc").write_text(f'#!/bin/sh\nexec {system_gcc} -DSCALE=5.0f "$@"\n')
    (tmp_path / "bin" / "gcc").chmod(0o755)
    (tmp_path / "w.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    for name in CLEARED:
        warm.env.pop(name, None)
    path = warm.env.get("PATH", "")
    warm.env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{path}"
    run = warm("run", tmp_path / "w.py", "--arch", "sm_90", "--compiler", "nvcc", "-b", bundle)
    assert run.returncode == 0, run.stderr + run.stdout
    warm.env["PATH"] = path
    verify = ("verify", bundle, "--workload", tmp_path / "w.py", "--arch", "sm_90", "--json")
    nvrtc = warm(*verify, "--compiler", "nvrtc", "--explain-misses")
    report = json.loads(nvrtc.stdout)
    assert not report["verified"] and report["compilation"]["queued"] == 1, nvrtc.stdout
    (explained,) = report["explanations"]
    assert explained["reason"] == "toolchain" and "wrapper script" in str(explained), explained
