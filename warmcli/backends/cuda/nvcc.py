"""nvcc: finding it, checking architectures, and compiling many kernels in one process.

`locate_nvcc` looks in a fixed order (an explicit `--nvcc` path, `WARM_NVCC`,
`CUDA_HOME`/`CUDA_PATH`, `PATH`, then the `nvidia-cuda-nvcc` package inside site-packages), says
where it found it, and fails with one line saying what to install. `NvccCompiler` implements the
`Compiler` protocol: a group of units becomes ONE translation unit (each kernel in its own namespace
with its defines set and undone, its entry renamed to the unit's symbol and its signature probe
after it, `warmcli.backends.signature`; a kernel that needs a unit of its own,
`warmcli.backends.sharing`, is alone in it as written, in no namespace), compiled by one `nvcc
--cubin` in a temporary folder and killed with its children on timeout; with `--keep` the PTX it
made on the way is kept beside the cubin; its toolchain names the options and host compiler nvcc
reads from the environment, where set, and tells the key the folders nvcc and its host compiler
search after a kernel's (`own_folders`). The group checks (`group_target`, `check_options`,
`built_group`) serve NVRTC too. It owns no kernel cache (only which SMs each nvcc builds, asked once
a process and remembered across processes beside its version line) and never imports `pycuda`; the
toolkit's `nvcc.profile` gives the include path, so no `-I` is passed (another keys: `profile`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from warmcli import config
from warmcli.backends import processes, signature
from warmcli.backends.compiler import (
    CompiledGroup,
    CompileFailure,
    CompileUnit,
    Declared,
    declared,
    isolated_section,
    run_compiler,
)
from warmcli.backends.cuda.cubin import check_cubin, cubin_functions
from warmcli.backends.cuda.host_options import (
    host_compiler,
    host_refusal,
    options_file,
    refused_flags,
    runs,
)
from warmcli.backends.cuda.own_folders import know_cuda
from warmcli.backends.cuda.profile import profile_named
from warmcli.backends.cuda.ptx import kept_ptx_arch, not_ptx_of, ptx_in_program, ptx_not_kept
from warmcli.backends.scratch_reads import refuse_scratch_reads
from warmcli.backends.serving import cuda_release
from warmcli.backends.sharing import alone_in
from warmcli.backends.toolchain import (
    Toolchain,
    ToolchainError,
    environment_named,
    probe,
    remembered,
)
from warmcli.errors import ArchError, CubinError
from warmcli.scratch import scratch_folder
from warmcli.wrapper_script import host_compiler_script, host_compilers, nvcc_script

INSTALL_HINT = "pip install 'warmcli[nvcc]' or set WARM_NVCC=/path/to/nvcc"
_PACKAGE_LAYOUTS = ("cu13/bin/nvcc", "cu12/bin/nvcc", "cuda_nvcc/bin/nvcc")
_ARCH = re.compile(r"sm_([1-9][0-9]{1,2})([af]?)")  # whole (`fullmatch`), ASCII digits
_VIRTUAL = re.compile(r"compute_([1-9][0-9]{1,2})([af]?)")
# The first SM of each suffix: arch-specific (`sm_90a`) and family-specific (`sm_100f`).
_SUFFIX_FROM = {"a": 90, "f": 100}
# Options that would change what nvcc builds or where it writes it: warm sets them.
_RESERVED = (
    "-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code", "-o",
    "--output-file", "-cubin", "--cubin", "-ptx", "--ptx", "-fatbin", "--fatbin", "-c", "--compile",
    "-E", "--preprocess", "-M", "-lib", "--lib", "-odir", "-keep-dir", "--keep-dir",
)  # fmt: skip
# Options that read more options from a file, which no key covers: refused.
_OPTIONS_FILES = ("-optf", "--options-file")


def _package_roots() -> list[Path]:
    """The `nvidia` namespace package's folders in this interpreter's site-packages."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _executable(path: str | os.PathLike[str]) -> str | None:
    """`path` made absolute, where it is an executable file (a relative `./nvcc` stays the
    file it names: `str(Path(...))` dropped its `./`, and the bare name was looked up on
    PATH); None for any other, one the system cannot look at too (`CUDA_HOME` of a name over 255
    bytes: pathlib's `is_file` raised `File name too long`, `warm devices --compiler nvcc`'s
    only line, the 3,000-character path in it)."""
    return os.path.abspath(path) if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _candidates() -> Iterator[tuple[str, str | None]]:
    """(where, path-or-None) in search order; None means that place names no nvcc."""
    for home, value in config.cuda_homes().items():
        yield home, _executable(Path(value) / "bin" / "nvcc") if value else None
    yield "PATH", shutil.which("nvcc")
    for root in _package_roots():
        for layout in _PACKAGE_LAYOUTS:
            found = _executable(root / layout)
            if found:
                yield "nvidia-cuda-nvcc package", found


def locate_nvcc(explicit: str | None = None) -> tuple[str, str]:
    """(the nvcc to use, where it was found); an explicit path or WARM_NVCC that is not an
    executable is an error."""
    for where, value in (("--nvcc", explicit), ("WARM_NVCC", config.nvcc())):
        if value:
            found = shutil.which(value) if os.sep not in value else _executable(value)
            if not found:
                raise ToolchainError(f"nvcc from {where} ({value}) is not an executable file")
            return found, where
    for where, found in _candidates():
        if found:
            return found, where
    raise ToolchainError(f"nvcc not found (CUDA_HOME, PATH, nvidia-cuda-nvcc): {INSTALL_HINT}")


def find_nvcc(explicit: str | None = None) -> str:
    """The nvcc to use (see `locate_nvcc`)."""
    return locate_nvcc(explicit)[0]


def nvcc_candidates() -> list[tuple[str, str]]:
    """Every nvcc the search order finds, (where, path), first the one it picks."""
    return [(where, found) for where, found in _candidates() if found]


def parse_arch(arch: str) -> int:
    """The SM number of a real architecture (`sm_90a` → 90); one-line ArchError otherwise."""
    m = _ARCH.fullmatch(arch)
    if m:
        sm, suffix = int(m.group(1)), m.group(2)
        if suffix and sm < _SUFFIX_FROM[suffix]:
            raise ArchError(
                f"{arch!r} is no GPU's architecture: sm_XX{suffix} starts at "
                f"sm_{_SUFFIX_FROM[suffix]}{suffix}; use sm_{sm}"
            )
        return sm
    v = _VIRTUAL.fullmatch(arch)
    if v:  # its GPU's, with its suffix where a GPU has it (`compute_90a`: sm_90a)
        sm, suffix = int(v.group(1)), v.group(2)
        real = f"sm_{sm}{suffix if suffix and sm >= _SUFFIX_FROM[suffix] else ''}"
        raise ArchError(
            f"{arch} is a virtual (PTX) architecture, not a GPU's: use {real} "
            "(its PTX is kept too, unless told otherwise)"
        )
    raise ArchError(
        f"{arch!r} is not a CUDA architecture: expected sm_ and two or three digits, e.g. "
        "sm_90 or sm_100 (sm_90a, sm_100f: arch- or family-specific), one --arch each"
    )


@functools.cache
def supported_sms(nvcc: str) -> frozenset[int]:
    """SM numbers this nvcc builds cubins for (`--list-gpu-code`); empty if it cannot say.
    Remembered across processes as its version line is (`toolchain.remembered`, by the
    binary's stamp), so a hot start keying its kernels starts no nvcc."""
    try:  # (a script's by the binary it runs: `runs`)
        binary = runs(nvcc, config.path())
        listed = remembered(_LISTED, binary, os.stat(binary), _list_gpu_code).version
    except (OSError, ToolchainError):
        return frozenset()
    return frozenset(int(n) for n in re.findall(r"\bsm_(\d{1,9})(?!\d)", listed))  # (no SM else)


_LISTED = "nvcc --list-gpu-code"  # what `toolchains.json` remembers it under


def _list_gpu_code(name: str, nvcc: str) -> str:
    """The cubin architectures `nvcc --list-gpu-code` names, one line; ToolchainError when
    it names none (not remembered: asked again by the next process)."""
    try:
        out = processes.probe([nvcc, "--list-gpu-code"], 60)
    except OSError as exc:
        raise ToolchainError(f"{name}: {exc}") from exc
    listed = re.findall(r"\bsm_\d+", out.out) if not out.timed_out else []
    if not listed:
        raise ToolchainError(f"{name}: no architecture listed")
    return " ".join(listed)


def _release(toolchain: Toolchain) -> str:
    found = cuda_release(toolchain.version)
    return f"{found[0]}.{found[1]}" if found else toolchain.version


def check_options(
    options: Sequence[str], units: Sequence[CompileUnit], reserved: Sequence[str] = _RESERVED
) -> None:
    """A CompileFailure for an option that would change what is built or where it goes."""
    if (refused := host_refusal(options)) is not None:
        raise CompileFailure(refused, tuple(units))
    if (read := options_file(options, _OPTIONS_FILES)) is not None:
        raise CompileFailure(
            f"option {read!r} reads options from a file, which no kernel key covers "
            "(an edit there would be served the old build): give them in options",
            tuple(units),
        )
    for opt in options:
        name = opt.split("=", 1)[0]
        if name in reserved:
            raise CompileFailure(
                f"option {opt!r} is reserved: warm sets the architecture, the output kind "
                "(cubin, and PTX beside it) and the output file itself",
                tuple(units),
            )


def group_target(units: Sequence[CompileUnit], compiler: str) -> tuple[str, tuple[str, ...]]:
    """The one architecture and option set a group shares; ValueError when it does not."""
    if not units:
        raise ValueError("compile_group needs at least one unit")
    arch, options = units[0].arch, units[0].kernel.options
    if any(u.arch != arch or u.kernel.options != options for u in units):
        raise ValueError("a compile group must share one architecture and one option set")
    if any(u.kernel.language != "cuda" for u in units):
        raise ValueError(f"{compiler} compiles only language='cuda' kernels")
    return arch, options


def built_group(
    binary: bytes,
    arch: str,
    units: Sequence[CompileUnit],
    log: str,
    seconds: float,
    command: tuple[str, ...],
    ptx: tuple[str, bytes] | None = None,
) -> CompiledGroup:
    """A group's cubin checked (for `arch`, holding every unit's entry), its PTX (of its own
    arch), and wrapped."""
    try:
        check_cubin(binary, arch)
        if ptx and (wrong := not_ptx_of(ptx[1], ptx[0])):  # `NVCC_APPEND_FLAGS=-arch=sm_90a`
            raise CubinError(wrong)
    except CubinError as exc:  # an option made it write something else (`-dlto`: LTO IR)
        shown = " ".join(units[0].kernel.options) or "none"
        raise CompileFailure(f"the compiler wrote {exc} (options: {shown})", tuple(units)) from None
    missing = sorted({u.symbol for u in units} - cubin_functions(binary))
    if missing:
        entries = ", ".join(u.kernel.entry for u in units if u.symbol in missing)
        raise CompileFailure(
            f"entry {entries} is not in the cubin: declare it "
            f'extern "C" __global__ void <entry>(...)',
            tuple(units),
        )
    kept = {"ptx": ptx[1], "ptx_arch": ptx[0]} if ptx else {}
    return CompiledGroup.of(units, binary, log, seconds, command=command, **kept)


def _unique(units: Sequence[CompileUnit]) -> list[CompileUnit]:
    return list({u.key: u for u in units}.values())


def translation_unit(units: Sequence[CompileUnit]) -> str:
    """One .cu holding every unit, one namespace per kernel; a kernel that needs a unit of
    its own is alone in it as written: no namespace, no helper renamed, the signature
    helpers and probe after it (so they see the headers it includes)."""
    if alone_in(units):
        (unit,) = units
        section = isolated_section(unit, unit.kernel.source, rename_helpers=False)
        return "\n".join([section, signature.CUDA_HELPERS, signature.probe(unit)])
    sections: list[str] = []
    # Variants share one source: its names read once (a CUDA signature probe declares no
    # name and defines no macro, so they are its body's alone).
    parsed: dict[str, Declared] = {}
    for unit in _unique(units):
        source = unit.kernel.source
        parsed[source] = parsed.get(source) or declared(source)
        ns = f"warm_{unit.key[:16]}"
        section = isolated_section(
            unit, source + signature.probe(unit), names_in=parsed[source], rename_helpers=False
        )  # its names closed in its namespace, never renamed: a helper may overload a builtin
        sections.append(f"namespace {ns} {{\n{section}}} /* namespace {ns} */\n")
    return "\n".join([signature.CUDA_HELPERS, *sections])


def _written(
    folder: str, name: str, options: Sequence[str], units: Sequence[CompileUnit], log: str = ""
) -> bytes:
    """The file nvcc wrote in its scratch folder; a CompileFailure naming the options where
    it wrote none (`--dryrun`, `--version`: it exits 0 and builds nothing), or giving its
    `log` where this process ignores SIGCHLD (its failure's exit status then reads 0)."""
    try:
        return Path(folder, name).read_bytes()
    except FileNotFoundError:
        if log and processes.exit_status_lost():
            raise CompileFailure(log, tuple(units)) from None
        shown = " ".join(options) or "none"
        raise CompileFailure(f"nvcc wrote no {name} (options: {shown})", tuple(units)) from None


class NvccCompiler:
    """The `Compiler` for `language = "cuda"`: one nvcc process per group, cubin out.

    `ptx` is None (no PTX), `"auto"` (the PTX of each group's own architecture, kept
    from the same nvcc run with `--keep`: free) or a `compute_XX` (one more nvcc run).
    """

    language = "cuda"

    def __init__(self, nvcc: str | None = None, ptx: str | None = None) -> None:
        self.path, self.found_by = locate_nvcc(nvcc)
        self.ptx = ptx

    @property
    def toolchain(self) -> Toolchain:
        """nvcc and its version, the `gcc` it runs (`host_compiler`), a profile no toolkit ships
        (`profile_named`), a script adding to the nvcc it runs (`nvcc_script`), what it reads from
        the environment (options, its host compiler, a script's digest or a binary's version line
        after it: `host_compiler_script`) where set (`config.nvcc_flags`): all keyed."""
        found = probe("nvcc", runs(self.path, config.path()))  # a script's: the binary it runs
        flags, profile = config.nvcc_flags(), profile_named(found.path) + nvcc_script(self.path)
        found = Toolchain(name=found.name, path=self.path, version=found.version)
        host = "" if "NVCC_CCBIN" in flags else host_compiler(config.path(), self.path)
        if flags or host or profile:
            added = (
                host
                + profile
                + "".join(
                    f"; {name}={environment_named(v)}"
                    + "".join(  # `NVCC_CCBIN`'s or a `-ccbin`'s in the others
                        host_compiler_script(p)[len(p) :]
                        for p in ([v] if name == "NVCC_CCBIN" else host_compilers(v.split()))
                    )
                    for name, v in flags.items()
                )
            )
            found = Toolchain(name=found.name, path=found.path, version=found.version + added)
        know_cuda(found.identity, self.path)  # its folders, for the key (`own_folders`)
        return found

    def check_arch(self, arch: str) -> int:
        """Parse `arch` and check this nvcc builds it; returns the SM number."""
        sm = parse_arch(arch)
        known = supported_sms(self.toolchain.path)
        if known and sm not in known:
            raise ArchError(
                f"nvcc {_release(self.toolchain)} does not build {arch}; it builds "
                + ", ".join(f"sm_{n}" for n in sorted(known))
            )
        return sm

    def command(self, arch: str, options: Sequence[str], *, keep: bool = False) -> tuple[str, ...]:
        """The nvcc command line of one group, run in its temporary folder (`--keep` leaves
        the PTX it made on the way, `tu.ptx`)."""
        return (
            self.toolchain.path,
            "--cubin",
            f"-arch={arch}",
            *(("--keep",) if keep else ()),
            *options,
            "-o",
            "out.cubin",
            "tu.cu",
        )

    def compile_group(
        self, units: Sequence[CompileUnit], timeout: float | None = None
    ) -> CompiledGroup:
        arch, options = group_target(units, "NvccCompiler")
        self.check_arch(arch)
        check_options(options, units)
        if (refused := refused_flags(_OPTIONS_FILES, units[0].folder)) is not None:
            raise CompileFailure(refused, tuple(units))
        if units[0].kernel.reads_headers:  # nvcc runs in a scratch folder
            from warmcli.headers import absolute_include_options

            options = tuple(absolute_include_options(options, units[0].folder))
        ptx_arch = kept_ptx_arch(arch, self.ptx)
        same = ptx_in_program(arch, ptx_arch)
        command = self.command(arch, options, keep=bool(ptx_arch) and same)
        started = time.perf_counter()
        with scratch_folder("warm-nvcc-") as tmp:  # (a forked child's exit never removes it)
            Path(tmp, "tu.cu").write_text(translation_unit(units), encoding="utf-8")  # any locale
            refuse_scratch_reads(options, units, tmp, identity=self.toolchain.identity)  # tmp's ..
            try:
                log, _ = run_compiler(command, units, timeout, tmp)
            except CompileFailure as failure:
                raise signature.explain(failure) from None
            binary = _written(tmp, "out.cubin", options, units, log)
            if ptx_arch and not same:
                ptx_command = (self.toolchain.path, "--ptx", f"-arch={ptx_arch}", *options)
                try:
                    run_compiler((*ptx_command, "-o", "tu.ptx", "tu.cu"), units, timeout, tmp)
                except CompileFailure as failure:
                    log, ptx_arch = log + ptx_not_kept(failure, self.ptx, ptx_arch), None
            ptx = (ptx_arch, _written(tmp, "tu.ptx", options, units)) if ptx_arch else None
        return built_group(binary, arch, units, log, time.perf_counter() - started, command, ptx)
