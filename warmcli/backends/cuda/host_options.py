"""What nvcc hands its host compiler (`-Xcompiler`, its variables): what the key sees, or refuses.

nvcc preprocesses a kernel's device code with its host compiler and the options given it by
`-Xcompiler` (`--compiler-options`), so a header read there (`-Xcompiler -include,h`, or a folder
`-Xcompiler=-Idir`) changes what the device code is. The key reads include folders and headers from
the kernel's own options only (`warmcli.headers`): one option given alone after `-Xcompiler`
(`-Xcompiler`, `-I/opt/inc`) is read there as it is, any other spelling (joined by `=`, several by
commas or blanks, which nvcc splits at too, a flag whose value is the next option) is not, and an
edit there was served the old build. `hidden_include` finds those, for nvcc to refuse, and
`unkeyed_host_option` an option there that makes gcc read a file or run a program no key covers
(`-Xcompiler @file`, `-specs=`, `--sysroot=`, `-B`: `warmcli.backends.unkeyed_options`, as a host
kernel's are), refused alike (`host_refusal` says why); `options_file` an options file, nvcc's or
ptxas's (`-Xptxas -optf,f`); `relative_host_compiler` a `-ccbin ..`, read by nvcc from its scratch
folder; `refused_flags` those in `NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS` (a relative path there
too), and `COMPILER_PATH`/`GCC_EXEC_PREFIX` set (nvcc's gcc runs the `cc1plus` there).
`toolkit_includes` reads the include folders nvcc itself gives its host compiler (its
`nvcc.profile`'s, printed by `nvcc --dryrun`), remembered across processes as its version line is
(`toolchain.remembered`) and once per process: a header found there is its identity's
(`warmcli.compiler_includes`); `host_compiler` names the `gcc` nvcc runs (`gcc_of`) by its version
line (`toolchain.probe`: remembered by its stamp, a script's by its digest), once per process per
`PATH`: the first on nvcc's own folders (`toolkit_path`: its `nvcc.profile`'s `PATH +=`, its
`nvvm/bin` and the folder it was started from, where NVIDIA's advice links a `gcc`), then on
`PATH`, as nvcc searches (a launcher, `ccache`, by the `gcc` it runs: `toolchain.LAUNCHERS`). One
`nvcc --dryrun` per process tells both, remembered as they are. Each is remembered by the stamp of
the nvcc binary that answers and its `nvcc.profile`'s digest (`profile.digest`: an edit there,
`PATH +=` another gcc's folder, is read again): an `nvcc` that is a script (`exec
/usr/local/cuda/bin/nvcc "$@"`) by that of the binary it runs (`runs`: its `--dryrun`'s `_HERE_`,
remembered by the script's stamp, its digest with the values of the variables it names, and
`PATH`), so a toolkit upgraded behind an unchanged script (`/usr/local/cuda` repointed) is read
again.
Nothing else is kept or read.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shlex
from collections.abc import Iterator, Sequence

from warmcli import config
from warmcli.backends import processes
from warmcli.backends.cuda import profile
from warmcli.backends.serving import NVCC_HOST
from warmcli.backends.toolchain import ToolchainError, past_launchers, probe, remembered
from warmcli.include_options import HOST_OPTION_FLAGS
from warmcli.kernel_parts import PASSED_INCLUDE_PREFIXES
from warmcli.wrapper_script import script_digest

# A flag that takes its value from the next option, given alone (`-Xcompiler -include`).
_BARE = ("I", "isystem", "iquote", "idirafter", "include", "imacros", "include-path")


def _handed(
    options: Sequence[str], flags: Sequence[str] = HOST_OPTION_FLAGS
) -> Iterator[tuple[str, list[str], bool]]:
    """Each of `options` handing a tool options by one of `flags` (nvcc's host compiler's by
    default), as shown in a message, the pieces it hands (split at commas and blanks, as nvcc
    splits them) and whether it was given alone after the flag (`-Xcompiler`, `-I/opt/inc`)."""
    for before, option in zip(("", *options), options, strict=False):
        name, joined, value = option.partition("=")
        if before in flags:
            yield f"{before} {option}", option.replace(",", " ").split() or [""], True
        elif name in flags and joined:
            yield option, value.replace(",", " ").split() or [""], False


def hidden_include(options: Sequence[str]) -> str | None:
    """The first of `options` that hands nvcc's host compiler an include folder or header in
    a spelling the key does not read (the module doc), or None."""
    for shown, pieces, alone in _handed(options):
        if not any(p.startswith(PASSED_INCLUDE_PREFIXES) for p in pieces):
            continue
        if not alone or len(pieces) > 1 or pieces[0].lstrip("-") in _BARE:
            return shown
    return None


def unkeyed_host_option(options: Sequence[str]) -> str | None:
    """The first of `options` that hands nvcc's host compiler an option reading a file or
    running a program no key covers (`@file`, `-specs=`, `--sysroot=`, `-B folder/`:
    `unkeyed_options.unkeyed_file`), which the device code's preprocessing reads too, or None."""
    from warmcli.backends.unkeyed_options import unkeyed_file  # (what compiles: first use)

    return next(
        (shown for shown, pieces, _ in _handed(options) if any(map(unkeyed_file, pieces))), None
    )


def host_refusal(options: Sequence[str], given: str = "") -> str | None:
    """Why `options` (a kernel's, or `given`, the variable they came from) are refused for what
    they hand nvcc's host compiler (`hidden_include`, `unkeyed_host_option`) or how they name it
    (`relative_host_compiler`), or None."""
    where = f"{given}'s option" if given else "option"
    if (hidden := hidden_include(options)) is not None:
        return (
            f"{where} {hidden!r} hands nvcc's host compiler an include folder or header no "
            "kernel key covers (an edit there would be served the old build): give it in "
            f"{given or 'options'} alone (-I folder, -include header)"
        )
    if (reads := unkeyed_host_option(options)) is not None:
        return (
            f"{where} {reads!r} hands nvcc's host compiler an option reading a file no kernel "
            "key covers (more options, a specs file, a system root, compiler programs; an edit "
            "there would be served the old build): give them in "
            f"{given or 'options'} (-D..., -I folder, -include header)"
        )
    return relative_host_compiler(options, given)


_PTXAS_OPTIONS = ("-Xptxas", "--ptxas-options")  # ptxas reads `-optf` too


def options_file(options: Sequence[str], files: Sequence[str]) -> str | None:
    """The first of `options` that reads options from a file (`files`: nvcc's `-optf`, and
    ptxas's, handed it by `-Xptxas -optf,f` or `--ptxas-options=--options-file=f`), or None."""
    for before, option in zip(("", *options), options, strict=False):
        if option.split("=", 1)[0] in files and before not in _PTXAS_OPTIONS:
            return option
    handed = _handed(options, _PTXAS_OPTIONS)
    return next(
        (s for s, pieces, _ in handed if any(p.split("=")[0] in files for p in pieces)), None
    )


def refused_flags(files: Sequence[str], folder: str = "") -> str | None:
    """Why nvcc's options from the environment are refused, or None: a variable its profile adds to
    (`INCLUDES`, `PTXAS_FLAGS`: `profile.FROM_ENVIRONMENT`) or one it hands cicc or ptxas
    (`OCG_FLAGS`: `profile.PASSED_ON`) is set; or, from `NVCC_PREPEND_FLAGS` or
    `NVCC_APPEND_FLAGS`, one hands its host compiler an include folder or header in a spelling the
    key does not read (`hidden_include`: the key reads those variables' own as a kernel's options),
    or reads options from a file (`files`, nvcc's flags for it), which no key covers either, or
    names an include folder or header by a relative path (`_relative_path`: `folder` the unit's);
    or `COMPILER_PATH`/`GCC_EXEC_PREFIX` is set: nvcc's gcc runs the `cc1plus` found there."""
    from warmcli.compiler_includes import nvcc_words

    named = (*profile.FROM_ENVIRONMENT, *profile.PASSED_ON)
    for name, value in config.named_variables(named).items():
        if value.strip():  # (its profile's `INCLUDES +=` adds to it; nvcc hands on `OCG_FLAGS`)
            tool = profile.PASSED_ON.get(name)
            how = f"to {tool[2:]}'s options" if tool else f"its nvcc.profile's {name} +="
            return (
                f"{name} is set in the environment, and nvcc adds it to every compile ({how}), "
                "which no kernel key covers (a change would be served the old build): unset it, "
                f"and give its options in NVCC_APPEND_FLAGS{f' after {tool}' if tool else ''}"
            )
    for name in config.compiler_programs():  # gcc runs its `cc1plus` there (a host cc keys it)
        return (
            f"{name} is set in the environment, and the gcc nvcc preprocesses device code with "
            "runs the programs it finds there (cc1plus), which no CUDA kernel key covers (a "
            "change would be served the old build): unset it where nvcc compiles, or use NVRTC"
        )
    for name, value in config.nvcc_flags().items():  # (`NVCC_CCBIN`'s value is a path)
        added = [w.replace('"', "") for w in nvcc_words(value)] if name != "NVCC_CCBIN" else []
        if (hidden := host_refusal(added or [value], name)) is not None:
            return hidden
        if (relative := _relative_path(added, folder)) is not None:
            return (
                f"{name}'s option {relative!r} names a relative path, which nvcc reads from its "
                "scratch folder in the temporary folder, not where the key read it (an edit "
                "there would be served the old build): name it by its absolute path"
            )
        if (read := options_file(added, files)) is not None:
            return (
                f"{name}'s option {read!r} reads options from a file, which no kernel key "
                f"covers (an edit there would be served the old build): give them in {name}"
            )
    return None


def relative_host_compiler(options: Sequence[str], given: str = "") -> str | None:
    """Why `options` (a kernel's, or `given`, the variable they came from; `NVCC_CCBIN`'s value
    alone) are refused for naming nvcc's host compiler by a relative path (`-ccbin ..`,
    `--compiler-bindir=bin/gcc`), which nvcc reads from its scratch folder in the temporary
    folder, the key from the working folder; or None (a bare name nvcc finds on `PATH` passes)."""
    from warmcli.wrapper_script import host_compilers

    found = options if given == "NVCC_CCBIN" else host_compilers(options)
    relative = (p for p in found if not os.path.isabs(p) and (os.sep in p or p in (".", "..")))
    if (path := next(relative, None)) is None:
        return None
    where = given if given == "NVCC_CCBIN" else f"{given}'s -ccbin" if given else "-ccbin"
    return (
        f"{where} {path!r} names nvcc's host compiler by a relative path, which nvcc reads from "
        "its scratch folder in the temporary folder, not where the key read it (an edit there "
        "would be served the old build): name it by its absolute path, or a name on PATH"
    )


def _relative_path(words: Sequence[str], folder: str) -> str | None:
    """The first of `words` (nvcc's variables') naming an include folder by a relative path, or a
    header read first that nvcc reads otherwise than the key (climbing, `..` or `./..`: from its
    scratch folder, the temporary folder; one in `folder`, the working folder, the key's alone),
    or None."""
    from warmcli.include_options import named_folders, pre_included_at, working_folder
    from warmcli.scratch import climbs

    for _, named, at, _ in named_folders(words):
        if not os.path.isabs(named):
            return " ".join(words[at - 1 : at + 1]) if words[at] == named else words[at]
    for at, before, name in pre_included_at(words):
        with contextlib.suppress(OSError):  # (a working folder removed holds none)
            folder = folder or working_folder()
        local = bool(folder) and os.path.isfile(os.path.join(folder, name))
        if not os.path.isabs(name) and (climbs(name) or local):  # (`./../cfg.h` too)
            return words[at] if before else " ".join(words[at - 1 : at + 1])
    return None


_DRYRUN = "nvcc --dryrun includes"  # what `toolchains.json` remembers them under


@functools.cache
def toolkit_includes(nvcc: str) -> tuple[str, str] | None:
    """The folders nvcc gives its host compiler after a kernel's: `-I` its `include`, `-isystem`
    its `include/cccl`; None where it does not say (a kernel reaching `CPATH` is then a miss
    where served, never another build: `warmcli.compiler_includes`)."""
    try:
        binary = runs(nvcc, config.path())
        named = f"{_DRYRUN} {profile.digest(binary)}"  # (what it prints: its profile's too)
        said = remembered(named, binary, os.stat(binary), _dryrun_includes).version
    except (OSError, ToolchainError):
        return None
    include, _, cccl = said.partition("\n")
    return include, cccl


@functools.cache
def _dryrun(name: str, nvcc: str) -> tuple[str, bool]:
    """What `nvcc --dryrun` prints (and whether it timed out), once per process per nvcc."""
    try:
        out = processes.probe([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], 60)
    except OSError as exc:
        raise ToolchainError(f"{name}: {exc}") from exc
    return out.out + "\n" + out.err, out.timed_out


def _dryrun_includes(name: str, nvcc: str) -> str:
    """`INCLUDES`' `-I` folder and `SYSTEM_INCLUDES`' `-isystem` one, as `nvcc --dryrun`
    prints them, joined by a line break; ToolchainError where it prints no such pair."""
    printed, timed_out = _dryrun(name, nvcc)
    found: dict[str, list[str]] = {}
    for line in printed.splitlines():
        variable, equals, value = line.removeprefix("#$ ").partition("=")
        if equals and variable in ("INCLUDES", "SYSTEM_INCLUDES") and variable not in found:
            try:
                found[variable] = shlex.split(value)
            except ValueError:
                break
    include = [w[2:] for w in found.get("INCLUDES", []) if w.startswith("-I") and w[2:]]
    cccl = found.get("SYSTEM_INCLUDES", [])[1:2]
    if timed_out or len(include) != 1 or len(cccl) != 1 or "\n" in include[0] + cccl[0]:
        raise ToolchainError(f"{name}: no include folders in its --dryrun")
    return f"{include[0]}\n{cccl[0]}"


_DRYRUN_PATH = "nvcc --dryrun PATH"  # what `toolchains.json` remembers them under


@functools.cache
def toolkit_path(nvcc: str) -> str:
    """The folders nvcc puts before `PATH` where it runs its host compiler, joined by
    `os.pathsep`, as its `--dryrun` prints them; "" where it does not say (`PATH` alone)."""
    try:
        binary = runs(nvcc, config.path())
        named = f"{_DRYRUN_PATH} {profile.digest(binary)}"
        return remembered(named, binary, os.stat(binary), _dryrun_path).version
    except (OSError, ToolchainError):
        return ""


def _dryrun_path(name: str, nvcc: str) -> str:
    """The `PATH` `nvcc --dryrun` prints, less this process's `PATH` after it (the folders it
    adds: they do not depend on it); ToolchainError where it prints none so made."""
    printed, timed_out = _dryrun(name, nvcc)
    ours = config.path()  # as the dryrun inherits it
    for line in printed.splitlines():
        variable, equals, value = line.removeprefix("#$ ").partition("=")
        if equals and variable == "PATH" and not timed_out and value.endswith(ours):
            added = value[: len(value) - len(ours)].split(os.pathsep)
            return os.pathsep.join(f for f in added if f and "\n" not in f)
    raise ToolchainError(f"{name}: no PATH in its --dryrun")


@functools.lru_cache(maxsize=8)
def runs(nvcc: str, search: str) -> str:
    """The nvcc binary the file `nvcc` runs: itself, or where it is a script (a wrapper that
    only finds the real one) the `nvcc` in the folder its `--dryrun` names `_HERE_` (as the
    script names it: a link there repointed is another file's stamp), remembered by the
    script's stamp, digest and `search` (`PATH`); the script itself where that is none."""
    digest = script_digest(nvcc)
    if not digest:
        return nvcc
    moved = hashlib.sha256(search.encode(errors="surrogateescape")).hexdigest()[:16]
    try:
        here = remembered(f"{_RUNS} {digest} {moved}", nvcc, os.stat(nvcc), _here).version
    except (OSError, ToolchainError):
        return nvcc
    binary = os.path.join(here, "nvcc")
    return binary if here and os.path.isfile(binary) and not script_digest(binary) else nvcc


_RUNS = "nvcc script runs"  # what `toolchains.json` remembers it under


def _here(name: str, nvcc: str) -> str:
    """The folder `nvcc --dryrun` names `_HERE_` (absolute), "" where it names none (a script
    that is no nvcc's: remembered so too); ToolchainError where it timed out."""
    printed, timed_out = _dryrun(name, nvcc)
    if timed_out:
        raise ToolchainError(f"{name}: --dryrun timed out")
    for line in printed.splitlines():
        variable, equals, value = line.removeprefix("#$ ").partition("=")
        if equals and variable == "_HERE_" and value:
            return os.path.abspath(value)
    return ""


def gcc_of(search: str, nvcc: str = "") -> str | None:
    """The `gcc` `nvcc` runs where no `-ccbin` names one: the first on its own folders
    (`toolkit_path`), then on `search`, past a launcher (`host_compiler`); None where none is."""
    own = toolkit_path(nvcc) if nvcc else ""
    return past_launchers("gcc", f"{own}{os.pathsep}{search}" if own else search)


@functools.lru_cache(maxsize=8)
def host_compiler(search: str, nvcc: str = "") -> str:
    """What an nvcc identity says of the host compiler `nvcc` runs to preprocess device code
    where no `-ccbin`/`NVCC_CCBIN` names one: the first `gcc` on its own folders
    (`toolkit_path`), then on `search` (`PATH`), its version line (a wrapper script's digest
    after it), after `NVCC_HOST`; "" where none is. A compiler launcher (`/usr/lib/ccache/gcc`,
    a link to `ccache`) runs the next `gcc` on the search: that one is named (ccache's own
    stamp would remember the line of a gcc since upgraded behind it)."""
    found = gcc_of(search, nvcc)
    try:
        return f"{NVCC_HOST}{probe('gcc', found).version}" if found else ""
    except ToolchainError:
        return ""
