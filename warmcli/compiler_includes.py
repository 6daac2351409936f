"""Where a CUDA compiler searches for headers around a kernel's own include folders.

NVRTC is given the toolkit packages' include folders, then a system toolkit's (`CUDA_HOME`'s:
`nvrtc_folders`), before a kernel's `-I` folders; nvcc gives its host compiler its own
toolkit's `include` (`-I`) and `include/cccl` (`-isystem`) after them, and gcc then searches
`CPATH` and `CPLUS_INCLUDE_PATH`. A header found in the packages' folders or in nvcc's own is
the toolchain identity's (not keyed); one found in another folder, or in one that
`NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS` name (`with_nvcc_flags`: nvcc adds them around a
kernel's options, before and after), is keyed by content
(`headers.headers_digest`). nvcc's folders are known only where its compiler told them, by its
identity (`NVCC_TOOLKITS`, filled by `NvccCompiler.toolchain`): for a build of another nvcc
(a bundle's, no nvcc here) every header found through those variables is keyed, so such a kernel
is a miss there, never another build served. nvcc adds `NVCC_PREPEND_FLAGS`' options before a
kernel's and `NVCC_APPEND_FLAGS`' after them (`with_nvcc_flags`): the include folders and headers
read first named there are searched and keyed as the kernel's own, and the compiler a `-ccbin`
names is the one whose own folders a system header is followed through. State: that mapping, one
entry per nvcc, and a memo of the variables' options as last split.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Callable

Around = tuple[tuple[str, ...], tuple[str, ...]]
System = Callable[[], tuple[str, ...]]  # how a compiler's own folders are asked (`CC_SYSTEM`)
# nvcc's own include folders (its `include`, `include/cccl`) by its toolchain identity.
NVCC_TOOLKITS: dict[str, tuple[str, str]] = {}
# The include folders NVRTC is given: the `nvidia` packages', then a system toolkit's.
NVRTC_INCLUDES = ("cu13/include", "cu13/include/cccl", "cuda_runtime/include", "cuda_cccl/include")
TOOLKIT_INCLUDES = (("include",), ("include", "cccl"))


def with_nvcc_flags(
    options: tuple[str, ...], reads: bool, system: System | None = None
) -> tuple[tuple[str, ...], bool, System | None]:
    """A CUDA kernel's `options` as nvcc reads them: `NVCC_PREPEND_FLAGS`' before them,
    `NVCC_APPEND_FLAGS`' after (each parted as nvcc parts them: `nvcc_words`), whether
    its key reads headers: it does (`reads`), or those name an include folder or a header read
    first (`-I`, `-isystem`, `-include`...: read as the kernel's own options' are), and how its
    host compiler's own folders are asked (`system`, nvcc's: `own_folders.nvcc_system`): of the
    one the last `-ccbin` there names where one does (nvcc runs it), not of nvcc's default."""
    from warmcli.config import nvcc_flags

    flags = nvcc_flags()
    if "NVCC_PREPEND_FLAGS" in flags or "NVCC_APPEND_FLAGS" in flags:
        before, after, named = _split(
            flags.get("NVCC_PREPEND_FLAGS", ""), flags.get("NVCC_APPEND_FLAGS", "")
        )
        options, reads = (*before, *options, *after), reads or named
    if isinstance(system, functools.partial) and "ccbin" in system.keywords and options:
        from warmcli.wrapper_script import host_compilers, names_host_compiler

        if names_host_compiler(options) and (given := host_compilers(options)):
            system = functools.partial(system, ccbin=given[-1])  # (its memo: by the compiler)
    return options, reads, system


@functools.lru_cache(maxsize=8)
def _split(prepend: str, append: str) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """`with_nvcc_flags`' options of the two variables' values, once a process per pair."""
    from warmcli.include_options import include_folders, pre_included

    before, after = nvcc_words(prepend), nvcc_words(append)
    return before, after, bool(include_folders(before + after) or pre_included(before + after))


# A word of nvcc's variables: blanks outside double quotes part words (`-I"/opt/my inc"`).
_WORD = re.compile(r'(?:[^\s"]+|"[^"]*")+')


def nvcc_words(text: str) -> tuple[str, ...]:
    """`text`'s options as nvcc reads `NVCC_APPEND_FLAGS`: parted at blanks outside double
    quotes, an include folder's or a header's path with its quotes dropped (a macro's value,
    `-DS="a b"`, keeps them, as nvcc's does)."""
    from warmcli.include_options import named_folders, pre_included_at

    words = _WORD.findall(text)
    paths = [at for _, _, at, _ in named_folders(words)]
    for at in paths + [at for at, _, _ in pre_included_at(words)]:
        words[at] = words[at].replace('"', "")
    return tuple(words)


def nvrtc_folders(home: str | None) -> tuple[list[str], list[str]]:
    """The include folders NVRTC is given, in its order, those that exist: the toolkit packages'
    (keyed by NVRTC's identity), `home`'s `include` and `include/cccl` (`toolkit_home`'s)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    packages = [os.path.join(root, layout) for root in roots for layout in NVRTC_INCLUDES]
    packages = [f for f in dict.fromkeys(packages) if os.path.isdir(f)]
    own = [os.path.join(home, *layout) for layout in TOOLKIT_INCLUDES] if home else []
    return packages, [f for f in own if os.path.isdir(f) and f not in packages]


def nvrtc_includes() -> tuple[str, str]:
    """`kernel.env_includes("nvrtc")`, read anew: NVRTC's system toolkit's folders and its
    packages', each joined by `os.pathsep` (cc's and nvcc's gcc's are `CPATH`'s and its kin's:
    `config.compiler_include_paths`)."""
    from warmcli.config import cuda_homes, path
    from warmcli.headers import toolkit_home

    packages, homes = nvrtc_folders(toolkit_home(cuda_homes().values(), path()))
    return os.pathsep.join(homes), os.pathsep.join(packages)


def compiler_search(
    compiler: str, env: tuple[str, str], toolchain: str
) -> tuple[tuple[str, str], Around, frozenset[str], bool]:
    """For `compiler` ("c", "nvrtc", "nvcc"; another: none) with `env` the folders it takes from
    the environment (`kernel.env_includes`): the `env`, the options around a kernel's and the
    identity's folders `headers.headers_digest` takes, and whether a kernel naming no folder
    may reach a keyed header (NVRTC: where a system toolkit is; else where `env` is set)."""
    if compiler == "nvrtc":  # the packages', then the system toolkit's, then the kernel's
        homes, packages = (e.split(os.pathsep) if e else [] for e in env)
        before = tuple(f"-I{f}" for f in packages + homes)
        return ("", ""), (before, ()), frozenset(packages), bool(homes)
    if compiler not in ("c", "nvcc"):
        return ("", ""), ((), ()), frozenset(), False
    own = NVCC_TOOLKITS.get(toolchain) if compiler == "nvcc" and env != ("", "") else None
    if own is None:
        return env, ((), ()), frozenset(), env != ("", "")
    return env, ((), (f"-I{own[0]}", f"-isystem{own[1]}")), frozenset(own), True
