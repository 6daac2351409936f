"""Where a CUDA compiler searches for headers around a kernel's own include folders.

NVRTC is given the toolkit packages' include folders, then a system toolkit's (`CUDA_HOME`'s:
`headers.nvrtc_folders`), before a kernel's `-I` folders; nvcc gives its host compiler its own
toolkit's `include` (`-I`) and `include/cccl` (`-isystem`) after them, and gcc then searches
`CPATH` and `CPLUS_INCLUDE_PATH`. A header found in the packages' folders or in nvcc's own is
the toolchain identity's (not keyed); one found in another folder, or in one that
`NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS` name (`with_nvcc_flags`: nvcc adds them around a
kernel's options, before and after), is keyed by content
(`headers.headers_digest`). nvcc's folders are known only where its compiler told them, by its
identity (`NVCC_TOOLKITS`, filled by `NvccCompiler.toolchain`): for a build of another nvcc
(a bundle's, no nvcc here) every header found through those variables is keyed, so such a kernel
is a miss there, never another build served. State: that mapping, one entry per nvcc.
"""

from __future__ import annotations

import os

Around = tuple[tuple[str, ...], tuple[str, ...]]
# nvcc's own include folders (its `include`, `include/cccl`) by its toolchain identity.
NVCC_TOOLKITS: dict[str, tuple[str, str]] = {}


def nvrtc_includes() -> tuple[str, str]:
    """`kernel._env_includes("nvrtc")`, read anew: NVRTC's system toolkit's folders and its
    packages', each joined by `os.pathsep` (cc's and nvcc's gcc's are `CPATH`'s and its kin's:
    `config.compiler_include_paths`)."""
    from warmcli.config import cuda_homes, path
    from warmcli.headers import nvrtc_folders, toolkit_home

    packages, homes = nvrtc_folders(toolkit_home(cuda_homes().values(), path()))
    return os.pathsep.join(homes), os.pathsep.join(packages)


def compiler_search(
    compiler: str, env: tuple[str, str], toolchain: str
) -> tuple[tuple[str, str], Around, frozenset[str], bool]:
    """For `compiler` ("c", "nvrtc", "nvcc"; another: none) with `env` the folders it takes from
    the environment (`kernel._env_includes`): the `env`, the options around a kernel's and the
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


def with_nvcc_flags(options: tuple[str, ...]) -> tuple[str, ...]:
    """A CUDA kernel's `options` as nvcc reads them: `NVCC_PREPEND_FLAGS`' words before them,
    `NVCC_APPEND_FLAGS`' after (split at blanks, as nvcc splits them); `options` where neither
    is set (`config.nvcc_flags`)."""
    from warmcli.config import nvcc_flags

    flags = nvcc_flags()
    before, after = (flags.get(f"NVCC_{w}_FLAGS", "").split() for w in ("PREPEND", "APPEND"))
    return (*before, *options, *after) if before or after else options
