"""NVRTC: CUDA compiled in process, with no nvcc, no host C++ compiler and no driver.

`find_nvrtc` says where the NVRTC library is (the `nvidia-cuda-nvrtc` package in site-packages,
found without importing anything, else where `cuda-bindings` loads it from) or None when
`cuda-bindings` or the library is missing. `NvrtcCompiler` implements the `Compiler` protocol: a
group of units becomes ONE program (the very translation unit nvcc gets: one namespace per
kernel, its defines set and undone, its entry renamed), its source built and compiled
(`nvrtcCompileProgram`) in the thread that compiles the group (NVRTC releases the GIL, so
`compile_batch`'s thread pool runs `--jobs` programs at once, each source built beside the
others' compiles). A program whose units pass `warmcli.backends.cuda.minimal`'s gate gets
`-minimal` where this NVRTC knows it (`takes_minimal`): the same bytes, a fifth less fixed cost;
if it fails with it, it is compiled again without, and only that result (log, error) is kept.
Each program (that retry, a PTX program of another arch) has the whole `--compile-timeout`.
Headers come from the toolkit packages' include folders, then `CUDA_HOME`'s (`include_dirs`),
and the kernel's `-I` folders, never the working folder (`PROGRAM`); a compile error is NVRTC's
log, with each kernel's file and line (and `nvrtc_log`'s hint). The PTX of the same program is
kept beside the cubin for free (another arch's, failing unasked, is left out: `ptx_not_kept`).
The toolchain identity is NVRTC's release and build, read from the banner of an empty program's
PTX (`-minimal` where NVRTC knows it, and `-G`: 11 ms instead of 28) once per library file
(remembered in warm's home, and per process: `identity`; whether NVRTC knows `-minimal` and
which SMs it builds are asked once per process). It owns no kernel cache and never loads what it
builds; `cuda.bindings` is imported only to compile or to read.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from warmcli.backends import signature
from warmcli.backends.compiler import CompiledGroup, CompileFailure, CompileUnit
from warmcli.backends.cuda.minimal import MINIMAL, knows_minimal, minimal_safe
from warmcli.backends.cuda.nvcc import (
    ArchError,
    _package_roots,
    _release,
    built_group,
    check_options,
    group_target,
    parse_arch,
    translation_unit,
)
from warmcli.backends.cuda.nvrtc_log import hint
from warmcli.backends.cuda.own_folders import know_cuda, nvrtc_system
from warmcli.backends.cuda.ptx import kept_ptx_arch, ptx_in_program, ptx_not_kept
from warmcli.backends.kept_output import kept_text
from warmcli.backends.toolchain import Toolchain, ToolchainError, remembered
from warmcli.headers import absolute_include_options
from warmcli.once import once
from warmcli.stamped import stamp as stamp_of

INSTALL_HINT = "pip install 'warmcli[nvrtc]' (cuda-bindings and nvidia-cuda-nvrtc)"
_LIBRARIES = ("cu13/lib/libnvrtc.so.13", "cu12/lib/libnvrtc.so.12", "cuda_nvrtc/lib/libnvrtc.so.12")
# A program's name: NVRTC looks for a quoted `#include` first in its folder (for a bare
# name the working folder, which no key covers); in one that cannot exist it looks only
# where nvcc does (the `-I` folders, keyed). Its log says `warm.cu`.
PROGRAM = "/proc/self/warm-no-folder/warm.cu"


def bindings_installed() -> bool:
    """Whether `cuda.bindings` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        return False


def find_nvrtc() -> str | None:
    """The NVRTC library `cuda.bindings` will load, or None when NVRTC is not installed."""
    if not bindings_installed():
        return None
    for root in _package_roots():
        for layout in _LIBRARIES:
            if (root / layout).is_file():
                return str(root / layout)
    try:  # elsewhere (a system toolkit): as cuda-bindings finds it, slower
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return str(load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:  # any failure to find it means: no NVRTC here
        return None


def include_dirs() -> list[str]:
    """The toolkit headers NVRTC is pointed at (it has no default include path): the packages',
    then the system toolkit's (whose headers the key covers: `compiler_includes.nvrtc_folders`),
    read as the key reads them (`own_folders.nvrtc_system`: a workload setting `CUDA_HOME`
    before its first launch is built with that toolkit's, as keyed)."""
    return list(nvrtc_system())


def _nvrtc() -> Any:
    try:
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
        nvrtc.nvrtcVersion()  # (loads it: its loader may miss the library `find_nvrtc` found)
    except (ImportError, OSError, RuntimeError) as exc:  # (its text on one line)
        said = " ".join(str(exc).split())
        raise ToolchainError(f"NVRTC cannot be loaded ({said}): {INSTALL_HINT}") from exc
    return nvrtc


class _Program:
    """One NVRTC program: created, compiled, read, always destroyed."""

    def __init__(self, nvrtc: Any, source: str, name: str) -> None:
        self.nvrtc = nvrtc
        err, self.handle = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
        self._ok(err, "nvrtcCreateProgram")

    def _ok(self, err: Any, what: str) -> None:
        if err != self.nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, text = self.nvrtc.nvrtcGetErrorString(err)
            raise CompileFailure(f"{what}: {text.decode(errors='replace')}")

    def compile(self, options: Sequence[str]) -> tuple[bool, str]:
        """(succeeded, NVRTC's log)."""
        (err,) = self.nvrtc.nvrtcCompileProgram(  # (a folder's path: the bytes it names)
            self.handle, len(options), [os.fsencode(o) for o in options]
        )
        text = self.output("ProgramLog").rstrip(b"\0").decode(errors="replace").strip()
        text = kept_text(text.replace(PROGRAM, "warm.cu"))  # bounded as a compiler process's
        if err == self.nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
            return False, text
        if err != self.nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, what = self.nvrtc.nvrtcGetErrorString(err)
            return False, f"{what.decode(errors='replace')}\n{text}".strip()
        return True, text

    def output(self, kind: str) -> bytes:
        """`CUBIN`, `PTX` (PTX without its trailing NUL) or `ProgramLog` (NVRTC's log)."""
        size_err, size = getattr(self.nvrtc, f"nvrtcGet{kind}Size")(self.handle)
        self._ok(size_err, f"nvrtcGet{kind}Size")
        # A fresh writable buffer NVRTC fills: never a bytes object (`b" " * 1` is the
        # interpreter's shared one-byte object, which a write would change process-wide).
        buffer = bytearray(size)
        self._ok(getattr(self.nvrtc, f"nvrtcGet{kind}")(self.handle, buffer)[0], f"nvrtcGet{kind}")
        data = bytes(buffer)
        return data.rstrip(b"\0") if kind == "PTX" else data

    def close(self) -> None:
        self.nvrtc.nvrtcDestroyProgram(self.handle)


@functools.cache
def takes_minimal() -> bool:
    """Whether this NVRTC knows `-minimal` (12.4 on: `warmcli.backends.cuda.minimal`)."""
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    return err == nvrtc.nvrtcResult.NVRTC_SUCCESS and knows_minimal((major, minor))


@functools.cache
def supported_sms() -> frozenset[int]:
    """SM numbers this NVRTC builds (`nvrtcGetSupportedArchs`); empty if it cannot say."""
    nvrtc = _nvrtc()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    return frozenset(archs) if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else frozenset()


# The version probe's options: `-minimal` (NVRTC 12.4 on) leaves out the runtime
# declarations every program otherwise parses, a third of an empty program's time, and
# `-G` (no device optimisation: the banner is the same) a third of what is left (17 ms
# to 11 ms here, on the critical path of a cold process's first compile); an NVRTC that
# does not know `-minimal` is asked again without.
_VERSION_OPTIONS = (
    ("--gpu-architecture=compute_75", "-minimal", "-G"),
    ("--gpu-architecture=compute_75", "-G"),
)


def _empty_ptx(nvrtc: Any, options: Sequence[str]) -> tuple[bool, str]:
    """(compiled, the first KiB of an empty program's PTX or NVRTC's log)."""
    program = _Program(nvrtc, 'extern "C" __global__ void warm_version() {}\n', "version.cu")
    try:
        ok, log = program.compile(options)
        return (True, program.output("PTX")[:1024].decode(errors="replace")) if ok else (ok, log)
    finally:
        program.close()


def _read_version(name: str, where: str) -> str:
    """NVRTC's release and build, from the banner of an empty program's PTX."""
    nvrtc = _nvrtc()
    try:
        for options in _VERSION_OPTIONS:
            ok, banner = _empty_ptx(nvrtc, options)
            if ok:
                break
        else:
            raise ToolchainError(f"nvrtc: {where} cannot compile an empty kernel: {banner[:200]}")
    except CompileFailure as exc:
        raise ToolchainError(f"nvrtc: {where}: {exc.log}") from None
    release = re.search(r"release [\d.]+, V[\d.]+", banner)
    build = re.search(r"Build ID: (\S+)", banner)
    if release is None:
        _, major, minor = nvrtc.nvrtcVersion()
        return f"NVRTC {major}.{minor}"
    return f"NVRTC {release.group(0)}" + (f"; Build {build.group(1)}" if build else "")


class _Identity:
    """`identity(path)`: NVRTC's toolchain, once per library file (its stamp: size, inode,
    mtime, ctime, from the one stat made here, unless given as `identity(path, *stamp)`)
    per process: every device's compiler in a process shares it (the first reads it or
    finds it remembered in warm's home). Kept under the stamp only if the file still has
    it once read (a file swapped meanwhile is read again next time)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, tuple[int, ...]], Toolchain] = {}

    def __call__(self, path: str, *stamp: int) -> Toolchain:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ToolchainError(f"nvrtc: {path}: {exc}") from None
        stamp = stamp or stamp_of(st)
        known = self._known.get((path, stamp))
        if known is not None:
            return known
        found = remembered("nvrtc", path, st, _read_version)
        with contextlib.suppress(OSError):
            if stamp_of(os.stat(path)) == stamp:  # unchanged while it was read
                self._known[(path, stamp)] = found
        return found

    def cache_clear(self) -> None:
        self._known.clear()


identity = _Identity()


def _run(
    compile: Callable[[Callable[[], None]], CompiledGroup],
    timeout: float | None,
    units: Sequence[CompileUnit],
) -> CompiledGroup:
    """`compile(begins)` in this thread, or in a daemon thread that is abandoned (an
    in-process compile cannot be stopped) when one NVRTC program takes longer than
    `timeout` seconds: `compile` calls `begins()` as each program begins, and each has
    the whole budget (as each nvcc process has), the plain retry of a program that
    failed with `-minimal` and a PTX program of another arch included."""
    if timeout is None:
        return compile(lambda: None)
    box: list[Any] = []
    began = [time.monotonic()]  # when the program compiling now began

    def begins() -> None:
        began[0] = time.monotonic()

    def target() -> None:
        try:
            box.append(compile(begins))
        except BaseException as exc:  # handed to the waiting thread
            box.append(exc)

    thread = threading.Thread(target=target, name="warm-nvrtc", daemon=True)
    thread.start()
    while not box:
        left = began[0] + timeout - time.monotonic()
        if left <= 0:
            break
        thread.join(left)
    if not box:
        raise CompileFailure(
            f"NVRTC did not finish within {timeout:g} s; its compile was abandoned "
            "(it runs in this process and cannot be stopped)",
            tuple(units),
            True,
        )
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


class NvrtcCompiler:
    """The `Compiler` for `language = "cuda"` through NVRTC; see the module doc.

    `ptx`: None (no PTX), `"auto"` (the PTX of each group's architecture, from the same
    program) or a `compute_XX` (one more program for it).
    """

    language = "cuda"

    def __init__(self, ptx: str | None = None) -> None:
        path = find_nvrtc()
        if path is None:
            raise ToolchainError(f"NVRTC not installed: {INSTALL_HINT}")
        self.path = path
        self.found_by = "site-packages" if "site-packages" in path else "cuda-bindings"
        self.ptx = ptx

    @once
    def toolchain(self) -> Toolchain:
        """NVRTC's identity; read once per compiler (a hot start keys every kernel by it), its
        folders told the key (`own_folders`)."""
        found = identity(self.path)
        know_cuda(found.identity)
        return found

    def check_arch(self, arch: str) -> int:
        """Parse `arch` (which NVRTC builds is asked at the first compile: asking needs
        `cuda.bindings` imported, which a hot start that compiles nothing never does)."""
        return parse_arch(arch)

    def options(self, arch: str, options: Sequence[str]) -> list[str]:
        return [f"--gpu-architecture={arch}", *(f"-I{d}" for d in include_dirs()), *options]

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup:
        arch, options = group_target(units, "NvrtcCompiler")
        if units[0].kernel.reads_headers:  # `-I.`: the folder its key read headers in
            options = tuple(absolute_include_options(options, units[0].folder))
        ptx_arch = kept_ptx_arch(arch, self.ptx)
        # Everything else, the source built included, in the thread that compiles it: the
        # first program starts at once and the next group's source is built beside it.
        return _run(
            lambda begins: self._compile(units, arch, options, ptx_arch, begins), timeout, units
        )

    def _compile(
        self,
        units: Sequence[CompileUnit],
        arch: str,
        options: Sequence[str],
        ptx_arch: str | None,
        begins: Callable[[], None],
    ) -> CompiledGroup:
        sm = parse_arch(arch)
        known = supported_sms()
        if known and sm not in known:
            raise ArchError(
                f"NVRTC {_release(self.toolchain)} does not build {arch}; it builds "
                + ", ".join(f"sm_{n}" for n in sorted(known))
            )
        check_options(options, units)  # nvcc's reserved: --compiler nvcc refuses them too
        nvrtc = _nvrtc()
        source = translation_unit(units)
        minimal = takes_minimal() and minimal_safe(units)
        started = time.perf_counter()
        outputs: dict[str, bytes] = {}
        log, used = "", ()  # NVRTC's log and the options added, of the cubin's program
        same = ptx_in_program(arch, ptx_arch)  # the PTX comes with the cubin's program
        for target in [arch, *([ptx_arch] if ptx_arch and not same else [])]:
            program, ok, text, extra = _compiled(
                nvrtc, source, self.options(target, options), minimal, begins
            )
            minimal = bool(extra)  # it failed once: not again for the PTX
            try:
                if not ok:  # (hinted: the kernels' options as they name them, in their folder)
                    text += hint(text, units[0].kernel.options, units[0].folder)
                    failure = CompileFailure(text or f"NVRTC failed for {target}", tuple(units))
                    if target == arch:
                        raise signature.explain(failure)
                    log += ptx_not_kept(signature.explain(failure), self.ptx, target)
                elif target == arch:
                    log, used = text, extra
                    outputs["cubin"] = program.output("CUBIN")
                if ok and ptx_arch and (target != arch or same):
                    outputs["ptx"] = program.output("PTX")
            finally:
                program.close()
        ptx = (ptx_arch, outputs["ptx"]) if "ptx" in outputs else None
        seconds = time.perf_counter() - started
        command = ("nvrtc", *self.options(arch, options), *used, f"<{len(units)} kernel(s)>")
        return built_group(outputs["cubin"], arch, units, log, seconds, command, ptx)


def _compiled(
    nvrtc: Any, source: str, options: Sequence[str], minimal: bool, begins: Callable[[], None]
) -> tuple[_Program, bool, str, tuple[str, ...]]:
    """(the program, compiled?, NVRTC's log, the options added): with `-minimal` first where
    `minimal`; a program that fails with it is compiled again without it, and only that
    second result is kept: `-minimal` never shows. `begins()` as each compile begins."""
    tries: tuple[tuple[str, ...], ...] = ((MINIMAL,), ()) if minimal else ((),)
    for extra in tries:
        program = _Program(nvrtc, source, PROGRAM)
        try:
            begins()
            ok, text = program.compile([*options, *extra])
        except CompileFailure:
            if not extra:
                program.close()
                raise
            ok, text = False, ""
        except BaseException:
            program.close()
            raise
        if ok or not extra:
            return program, ok, text, extra
        program.close()
    raise AssertionError("unreachable: the last try is returned")
