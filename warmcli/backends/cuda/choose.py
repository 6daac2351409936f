"""Which CUDA compiler a device uses, and why: NVRTC where installed, else nvcc.

The order: `--compiler nvrtc|nvcc` (the `compiler` argument), else
`WARM_CUDA_COMPILER` (each named with spaces around it as without; `auto`, or none named:
what follows), else nvcc when one
is named (`--nvcc` or `WARM_NVCC`), else NVRTC when `cuda-bindings` and the NVRTC
library are installed (in process, fastest), else nvcc (found as
`warmcli.backends.cuda.nvcc` says). A `CompilerChoice` keeps the reason in words, for
`warm devices` and `warm run --verbose`. This module decides and builds the compiler,
and checks up front that it builds the architecture (`check_builds`) and the PTX asked
for (`check_ptx_target`); it keeps no state and compiles nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmcli import config
from warmcli.backends.cuda.nvcc import NvccCompiler, _release, nvcc_candidates, parse_arch
from warmcli.backends.cuda.nvcc import supported_sms as nvcc_sms
from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc
from warmcli.backends.cuda.nvrtc import supported_sms as nvrtc_sms
from warmcli.backends.serving import virtual_sm
from warmcli.backends.toolchain import ToolchainError
from warmcli.errors import ArchError
from warmcli.printable import printable

CudaCompiler = NvccCompiler | NvrtcCompiler
NAMES = ("nvrtc", "nvcc")
CHOICES = (*NAMES, "auto")  # what `--compiler` and `WARM_CUDA_COMPILER` take


@dataclass(frozen=True)
class CompilerChoice:
    """The CUDA compiler picked (`nvrtc` or `nvcc`) and why, in words."""

    name: str
    why: str


def named(value: str | None) -> str:
    """A compiler name as given, spaces around it stripped (`--compiler "nvrtc "` is
    nvrtc, as `WARM_CUDA_COMPILER` is read); "" for none."""
    return (value or "").strip()


def check_name(requested: str | None) -> None:
    """ToolchainError at once for a compiler name (argument or variable) that is none of
    `CHOICES`."""
    for source, value in (
        ("--compiler", named(requested)),
        ("WARM_CUDA_COMPILER", config.cuda_compiler()),
    ):
        if value and value not in CHOICES:
            raise ToolchainError(
                f"{source} {value!r} is not a CUDA compiler: use nvrtc, nvcc or auto"
            )
        if value:
            return


def choose(requested: str | None = None, nvcc: str | None = None) -> CompilerChoice:
    """The compiler by the order in the module doc; ToolchainError for an unknown name."""
    check_name(requested)
    requested, env = named(requested), config.cuda_compiler()
    value, source = (requested, "--compiler") if requested else (env, "WARM_CUDA_COMPILER")
    if value and value != "auto":
        return CompilerChoice(value, f"{source} {value}")
    if nvcc or config.nvcc():
        return CompilerChoice(
            "nvcc", "an nvcc is named (" + ("--nvcc" if nvcc else "WARM_NVCC") + ")"
        )
    if find_nvrtc() is not None:
        return CompilerChoice("nvrtc", "preferred: cuda-bindings and NVRTC are installed")
    return CompilerChoice("nvcc", "fallback: NVRTC is not installed (pip install 'warmcli[nvrtc]')")


def make_compiler(choice: CompilerChoice, nvcc: str | None, ptx: str | None) -> CudaCompiler:
    """The chosen compiler, keeping PTX as `ptx` says (None, `auto` or a `compute_XX`)."""
    if choice.name == "nvrtc":
        return NvrtcCompiler(ptx=ptx)
    return NvccCompiler(nvcc, ptx=ptx)


def why_this_nvcc(compiler: NvccCompiler) -> str:
    """Where the search order found this nvcc, any other nvcc it passed over, and a
    `CUDA_HOME`/`CUDA_PATH` set to a folder with no `bin/nvcc`, which it passed over too."""
    others = [f"{path} ({where})" for where, path in nvcc_candidates() if path != compiler.path]
    found = f"found by {compiler.found_by}"
    found += f"; also here: {', '.join(dict.fromkeys(others))}" if others else ""
    named = {home for home, _ in nvcc_candidates()}
    for home, folder in config.cuda_homes().items():
        if folder and home not in named:  # set, but no nvcc there
            found += f"; {home}={printable(folder)} holds no bin/nvcc"
    return found


def check_ptx_target(compiler: CudaCompiler, ptx: str) -> None:
    """ArchError in one line when `compiler` cannot build `ptx` (`compute_XX`), naming what
    it can: else every candidate of every tune fails to compile, one by one. `auto`, and
    a compiler that cannot say what it builds, pass."""
    sm = virtual_sm(ptx)
    if sm is None:
        return
    nvrtc = isinstance(compiler, NvrtcCompiler)
    known = nvrtc_sms() if nvrtc else nvcc_sms(compiler.toolchain.path)
    if known and sm not in known:
        name = f"{'NVRTC' if nvrtc else 'nvcc'} {_release(compiler.toolchain)}"
        raise ArchError(
            f"--ptx {ptx}: the installed {name} does not build it; it builds "
            + ", ".join(f"compute_{n}" for n in sorted(known))
        )


def check_builds(compiler: CudaCompiler, arch: str) -> None:
    """ArchError in one line when `compiler` does not build `arch` (`sm_XX`), naming what it
    does, asked of NVRTC too (its `check_arch` leaves that to its first compile, so that a
    hot start never loads its bindings): what a compile-only device checks at first use."""
    if not isinstance(compiler, NvrtcCompiler):
        compiler.check_arch(arch)
        return
    known = nvrtc_sms()
    if known and parse_arch(arch) not in known:
        raise ArchError(
            f"NVRTC {_release(compiler.toolchain)} does not build {arch}; it builds "
            + ", ".join(f"sm_{n}" for n in sorted(known))
        )
