"""Where a build may be served: the one rule production, `warm check`, `warm clean`
and `warm explain` share.

A kernel's key holds the toolchain that built it, so warming (`warm run`) with a new compiler
builds afresh. Serving is looser: a build is served wherever its binary runs. A cubin runs on a
device of its SM architecture whose driver supports the CUDA major release that built it (CUDA's
minor version compatibility: a cubin by CUDA 13.5 loads on a driver for CUDA 13.0; one the
driver still refuses is a `binary` miss, rebuilt), whichever nvcc (or none) that machine has,
unless the nvcc of either read options or a host compiler from the environment
(`NVCC_APPEND_FLAGS`...) that the other did not, or ran another host compiler (`nvcc_host`: its
toolkit's `gcc`, else `PATH`'s; an nvcc that finds none builds nothing: served, as where no
compiler is; one that is a script, which may add options, not for NVRTC's either); a host object
runs (whichever C compiler that machine has, unless either is a wrapper script, which may add
options, and not the other's same script, or either ran the programs of
`GCC_EXEC_PREFIX`/`COMPILER_PATH` the other did not) on a CPU of its architecture (one of
another OS fails to load, and is a `binary` miss, rebuilt), and one tuned for its building CPU
(`-march=native`) on that CPU only (`warmcli.backends.native`). PTX (arch `compute_XX`) runs on
a GPU whose SM is at least XX, by the driver's JIT (`virtual_sm` reads XX; whether that driver
knows its ISA is read from the PTX itself: `warmcli.backends.cuda.ptx.check_ptx`). A build is a
kernel's only when its key, recomputed, says so, and PTX only when its symbol is that of the
kernel's own cubin too (`of_kernel`). Among a kernel's builds that run on a device, a cubin for
its arch is preferred to PTX, the device's own toolchain's build to another's, and a cubin of a
CUDA release the driver supports to a newer one's. It tells the key how the version line of a
binary a CUDA kernel names nvcc's host compiler (`-ccbin`) is read (`kernel_parts.HOST_VERSION`:
`toolchain.probe`, remembered by its stamp), as every process that keys one imports this module.
It holds no other state; it never opens a bundle, compiles, loads or prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from warmcli.backends import toolchain
from warmcli.backends.toolchain import NATIVE, RECIPE_MARK, WRAPPER_MARK, recipe_of, wrapper_named
from warmcli.config import COMPILER_PROGRAMS
from warmcli.errors import ToolchainError
from warmcli.kernel import Kernel, kernel_key
from warmcli.kernel_parts import HOST_VERSION, cubin_archs, cuda_release, virtual_sm
from warmcli.printable import Pattern
from warmcli.records import KernelRecord, Record

_VERSION = Pattern(r"([0-9]+)\.([0-9]+)\Z")
SAME_PARTS = ("source", "options", "defines", "headers")  # what one kernel's builds share
_SM = Pattern(r"sm_([0-9]{2,3})")
# Where an nvcc identity names what nvcc read from the environment (`config.NVCC_FLAGS`) or a
# profile no toolkit ships (`cuda.profile.PROFILE_MARK`).
NVCC_ENVIRONMENT = "; NVCC_"
# Where an nvcc identity names the `gcc` nvcc runs (its toolkit's, else `PATH`'s): its version line.
NVCC_HOST = "; host compiler "
# Where a cc identity names the folders cc runs its programs from (`HostCompiler.toolchain`).
HOST_PROGRAMS = tuple(f"; {name}=" for name in COMPILER_PROGRAMS)


def _host_version(where: str) -> str:
    """The version line of the binary `where` a kernel names nvcc's host compiler (`-ccbin`),
    as `host_options.host_compiler` reads the default `gcc`'s; "" where it gives none."""
    try:
        return toolchain.probe("gcc", where).version
    except ToolchainError:
        return ""


HOST_VERSION[:] = [_host_version]  # (`wrapper_script.host_compiler_script` reads it)


class Target(Record):
    """A device a build would be served on: its backend, arch, driver (a CUDA version
    such as `13.0`; anything else is not judged) and its own compiler's identity (`own`
    False: the toolchain of the build served there, which has no compiler)."""

    backend: str
    arch: str
    driver: str = ""
    toolchain: str | None = None  # None: no compiler there
    own: bool = True


def of_kernel(kernel: Kernel) -> Callable[[KernelRecord], bool]:
    """Whether a record is truly `kernel`'s build (its key recomputed, not trusted; PTX's
    symbol too, `_ptx_symbol_fits`)."""
    return lambda record: (
        record.key == kernel_key(kernel, record.arch, record.toolchain)
        and (record.arch[:8] != "compute_" or _ptx_symbol_fits(kernel, record))
    )


def _ptx_symbol_fits(kernel: Kernel, record: KernelRecord) -> bool:
    """Whether a PTX row's symbol is `kernel`'s: PTX keeps its cubin's symbol
    (`warm_<key[:16]>_<entry>`, the key of the kernel built for an `sm_XX`, the PTX's XX
    first, then any other (`--arch sm_80 --ptx compute_90`), `a` or `f` after it or not:
    `warmcli.kernel_parts.cubin_archs`),
    which its own key does not tie (another build's PTX moved under this one's key would be
    JIT-compiled and its symbol found there)."""
    tag = record.symbol[5:21]
    return any(
        kernel_key(kernel, arch, record.toolchain)[:16] == tag for arch in cubin_archs(record.arch)
    )


def jits_on(record: KernelRecord, arch: str) -> bool:
    """Whether `record` is CUDA PTX a GPU of `arch` can JIT (`compute_XX`, XX at most its SM)."""
    v, sm = virtual_sm(record.arch), _SM.match(arch)
    return record.backend == "cuda" and v is not None and sm is not None and v <= int(sm.group(1))


def other_recipe(theirs: int, ours: int) -> str:
    """Why a build of warm's build recipe `theirs` is not served by this warm (of `ours`),
    and what makes the bundle serve here: an older warm's is built again by `warm run`."""
    if 0 < theirs < ours:
        return (
            f"built by an older warm (build recipe {theirs}), this warm builds with recipe "
            f"{ours} and never serves it: re-warm with `warm run`"
        )
    if theirs > ours:
        return (
            f"built by a newer warm (build recipe {theirs}), this warm builds with recipe "
            f"{ours} and never serves it: upgrade warm, or re-warm with this one's `warm run`"
        )
    return (
        f"its toolchain names a build recipe no warm writes, this warm builds with recipe "
        f"{ours} and never serves it: re-warm with `warm run`"
    )


def recipe_differs(identity: str) -> str | None:
    """Why this warm serves no build of the toolchain `identity` on any device (another
    warm's build recipe built it: `other_recipe`), else None."""
    ours = toolchain.BUILD_RECIPE  # (read here; no call where the identity ends naming it)
    named = RECIPE_MARK in identity
    if (
        (named or ours != 1)
        and not (named and identity.endswith(f"{RECIPE_MARK}{ours}]"))
        and recipe_of(identity) != ours
    ):
        return other_recipe(recipe_of(identity), ours)
    return None


# What a row names that its components name too (its key's): `corrupt` where they differ.
_KEYED = ("toolchain", "arch", "entry")


def unkeyed(record: KernelRecord) -> str | None:
    """What `record`'s row names that its components (its key) do not, a changed row's
    (README: `corrupt`; production skips the key's check, keying the row from its own kernel),
    else None."""
    for name in _KEYED:
        keyed, named = record.components.get(name), getattr(record, name)
        if keyed is not None and keyed != named:
            return f"row names {name} {named!r}, its key {keyed!r}"
    return None


def why_not(record: KernelRecord, target: Target) -> tuple[str, str] | None:
    """None when `record`'s binary runs on `target`, else (component, reason)."""
    if record.backend != target.backend:
        return "backend", f"built for a {record.backend} device, not {target.backend}"
    changed = unkeyed(record)
    if changed is not None:
        return "corrupt", changed
    if record.arch != target.arch and not jits_on(record, target.arch):
        return "arch", f"built for {record.arch}, the device is {target.arch}"
    if NATIVE in record.toolchain and record.backend == "host":  # -march=native: its CPU's
        from warmcli.backends.native import foreign_cpu  # (imported for such a build only)

        why = foreign_cpu(record.toolchain)
        if why:
            return "toolchain", why
    elif record.backend == "host" and NATIVE in (target.toolchain or ""):  # a wrapper's, here
        return "toolchain", (
            "built for no one CPU (an older warm's, through a wrapper script tuning for its "
            "building CPU?), this C compiler tunes for this CPU (-march=native)"
        )
    served = record.toolchain.endswith(f"{RECIPE_MARK}{toolchain.BUILD_RECIPE}]")  # no call
    recipe = None if served else recipe_differs(record.toolchain)
    if recipe is not None:
        return "toolchain", recipe
    if (  # another cc1, as or ld (tested without a call where the toolchains are one)
        record.backend == "host"
        and target.toolchain is not None
        and record.toolchain != target.toolchain
        and any(m in record.toolchain or m in target.toolchain for m in HOST_PROGRAMS)
    ):
        theirs, ours = host_programs(record.toolchain), host_programs(target.toolchain)
        if theirs != ours:
            here = "this compiler" if target.own else "the build served here by cc"
            return "toolchain", (
                f"built by cc with {theirs or 'its own programs'}, {here} with "
                f"{ours or 'its own programs'}"
            )
    if (  # a wrapper's options; tested without a call where neither is one (every launch)
        record.backend == "host"
        and target.toolchain is not None
        and record.toolchain != target.toolchain
        and (WRAPPER_MARK in record.toolchain or WRAPPER_MARK in target.toolchain)
    ):
        theirs, ours = wrapper_named(record.toolchain), wrapper_named(target.toolchain)
        if theirs != ours:
            here = "this C compiler" if target.own else "the build served here"
            return "toolchain", (
                f"built through {theirs or 'no wrapper script'}, {here} through "
                f"{ours or 'no wrapper script'}: a wrapper may add options"
            )
    if record.backend == "cuda":
        theirs, ours = nvcc_environment(record.toolchain), nvcc_environment(target.toolchain or "")
        if target.toolchain is not None and theirs != ours:  # options: another kernel
            here = "this compiler" if target.own else "the build served here by nvcc"
            return "toolchain", (
                f"built by nvcc with {theirs[2:] or 'nothing'} from the environment (or its "
                f"profile), {here} with {ours[2:] or 'nothing'}"
            )
        theirs, ours = nvcc_host(record.toolchain), nvcc_host(target.toolchain or "")
        # Another gcc: another kernel. Where this nvcc finds none (and `NVCC_CCBIN` names none,
        # `nvcc_environment`), it builds nothing: served, as where no compiler is.
        if theirs != ours and (ours or not target.own) and _both_nvcc(record, target):
            here = "this compiler" if target.own else "the build served here by nvcc"
            return "toolchain", (
                f"built by nvcc with {theirs or 'no host compiler named (an older warm)'}, "
                f"{here} with {ours or 'none named'}"
            )
        if (  # a gcc that is a script may add options (as `NVCC_APPEND_FLAGS`): not NVRTC's
            target.toolchain is not None
            and (WRAPPER_MARK in theirs or WRAPPER_MARK in ours)
            and not _both_nvcc(record, target)
        ):
            return "toolchain", (
                f"built by {record.toolchain.partition(':')[0]} with "
                f"{theirs or 'no host compiler'}, served here to "
                f"{target.toolchain.partition(':')[0]} with {ours or 'none'}"
            )
        built, driver = cuda_release(record.toolchain), driver_release(target.driver)
        ptx = virtual_sm(record.arch) is not None  # JIT: the driver must know its ISA
        if built and driver and (built > driver if ptx else built[0] > driver[0]):
            return "toolchain", (
                f"built by CUDA {built[0]}.{built[1]}, the driver supports CUDA "
                f"{driver[0]}.{driver[1]}: pre-build with CUDA "
                f"{driver[0]}.{driver[1] if ptx else 'x'} or older (--compiler nvcc of "
                "that release, or its NVRTC)"
            )
    return None


def driver_release(driver: str) -> tuple[int, int] | None:
    """A driver's CUDA version (`"12.8"` → (12, 8)); None when unknown (no GPU here)."""
    found = _VERSION.match(driver)
    return (int(found.group(1)), int(found.group(2))) if found else None


def within_driver(record: KernelRecord, target: Target) -> bool:
    """Whether a CUDA build's release is no newer than `target`'s driver (or either is
    unknown): False for a cubin served by minor version compatibility alone."""
    built, driver = cuda_release(record.toolchain), driver_release(target.driver)
    return built is None or driver is None or built <= driver


def nvcc_environment(identity: str) -> str:
    """What an nvcc identity says nvcc read from the environment (options, host compiler:
    they change what it builds), "" for none."""
    at = identity.find(NVCC_ENVIRONMENT)
    return identity[at:] if at >= 0 else ""


def nvcc_host(identity: str) -> str:
    """The host compiler an nvcc identity says nvcc ran (`gcc ...`),
    "" for none named (another compiler's, an older warm's, or one `NVCC_CCBIN` named)."""
    at = identity.find(NVCC_HOST)
    if at < 0:
        return ""
    ends = [i for m in (NVCC_ENVIRONMENT, RECIPE_MARK) if (i := identity.find(m, at + 2)) >= 0]
    return identity[at + 2 : min(ends, default=len(identity))]


def _both_nvcc(record: KernelRecord, target: Target) -> bool:
    """Whether a build and the compiler it would be served to are both nvcc's (NVRTC names
    no host compiler: its builds and nvcc's are served for each other as before)."""
    return record.toolchain.startswith("nvcc:") and (target.toolchain or "").startswith("nvcc:")


def host_programs(identity: str) -> str:
    """Where a cc identity says cc found its programs (`config.COMPILER_PROGRAMS`: another
    `cc1`, `as` or `ld`), "" for its own."""
    at = min((i for m in HOST_PROGRAMS if (i := identity.find(m)) >= 0), default=-1)
    if at < 0:
        return ""
    end = identity.find(RECIPE_MARK, at)
    return identity[at + 2 : end if end >= 0 else None]


def same_kernel(record: KernelRecord) -> tuple[str, ...]:
    """What makes builds one kernel, whatever arch and toolchain built them."""
    c = record.components
    if not c:
        return (record.backend, record.entry, record.label)
    return (record.backend, record.entry, record.label, *(c.get(p, "") for p in SAME_PARTS))


def choose(
    records: Iterable[KernelRecord], target: Target, same: Callable[[KernelRecord], bool]
) -> KernelRecord | None:
    """The build to serve on `target` among the `records` that `same` accepts as builds
    of the kernel wanted: one for the target's arch (its own toolchain's first, else any
    that runs there), else PTX its driver JITs (its own toolchain's first, the highest
    `compute_XX`); among other toolchains' cubins, the first of a release within the
    driver's."""
    fallback = None
    ptx: tuple[tuple[bool, int], KernelRecord] | None = None
    for record in records:
        if why_not(record, target) is not None or not same(record):
            continue
        if record.arch != target.arch:  # PTX, JIT-compiled by the driver
            rank = (record.toolchain == target.toolchain, virtual_sm(record.arch) or 0)
            if ptx is None or rank > ptx[0]:
                ptx = (rank, record)
            continue
        if record.toolchain == target.toolchain:
            return record
        if fallback is None or (within_driver(record, target) > within_driver(fallback, target)):
            fallback = record
    return fallback or (ptx[1] if ptx else None)
