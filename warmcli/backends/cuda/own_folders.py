"""A CUDA compiler's own include folders, told to the key: what a kernel's `-I` folder shadows.

nvcc hands its host compiler (`gcc -E -x c++`) a kernel's `-I` folders first, then its toolkit's
`include` and `include/cccl` (`host_options.toolkit_includes`), then that compiler's own C++
folders; and it reads `cuda_runtime.h` before the kernel (`-include`). A name those headers
include that the kernel's folders hold is read there (`stdlib.h`, `features.h`, `cuda_runtime.h`
itself): `warmcli.system_shadows` follows them through `nvcc_system`'s folders. The `gcc` is the one
nvcc runs (`host_options.gcc_of`: its toolkit's, else `PATH`'s, past a launcher) or the file
`NVCC_CCBIN` names, or a kernel's `-ccbin` (`compiler_includes.with_nvcc_flags` tells it); its
folders are asked of it once (`gcc -E -v -x c++`, `warmcli.backends.system_folders`, remembered in
warm's home, as nvcc's `--dryrun` is), where a key first asks. NVRTC is given its own folders before
a kernel's (`nvrtc.include_dirs`): a name its headers ask for that none of them holds is searched in
the kernel's (`nvrtc_system`: those folders, nothing to ask). `know_cuda` tells the key each by the
compiler's identity (`kernel.CC_SYSTEM`), and nvcc's toolkit folders where `CPATH` or
`CPLUS_INCLUDE_PATH` is set (`compiler_includes.NVCC_TOOLKITS`). Where the folders cannot be told
(no `gcc`, another nvcc's build: no identity told here) a kernel keys as before. State: the
per-process memos of each.
"""

from __future__ import annotations

import functools
import os

from warmcli import config
from warmcli.backends.cuda.host_options import gcc_of, toolkit_includes
from warmcli.compiler_includes import NVCC_TOOLKITS
from warmcli.kernel import CC_SYSTEM, env_includes


@functools.lru_cache(maxsize=8)
def nvcc_system(nvcc: str, search: str, ccbin: str = "") -> tuple[str, ...]:
    """The folders `nvcc`'s host compiler searches after a kernel's (the module doc), with
    `PATH` `search` and `ccbin` its host compiler (`NVCC_CCBIN`'s, a kernel's `-ccbin`: a file,
    a folder or a name on `search`); () where its toolkit's or its `gcc`'s are not told.
    The first, its `include`, is given as `-I`; gcc searches the rest as system folders (a
    kernel's `-I` naming one is dropped: `system_shadows.placed`)."""
    own = toolkit_includes(nvcc)
    if ccbin:  # (a folder: its `gcc`, as nvcc runs it)
        if os.sep not in ccbin:
            import shutil  # (a key's walk only)

            ccbin = shutil.which(ccbin, path=search) or ccbin
        gcc: str | None = os.path.join(ccbin, "gcc") if os.path.isdir(ccbin) else ccbin
        gcc = gcc if gcc and os.path.isfile(gcc) else None
    else:
        gcc = gcc_of(search, nvcc)
    if own is None or gcc is None:
        return ()
    from warmcli.backends.system_folders import system_folders  # (where a key first asks)

    folders = system_folders(gcc, "c++")
    return (*own, *folders) if folders else ()


def nvrtc_system() -> tuple[str, ...]:
    """The folders NVRTC is given before a kernel's: the toolkit packages', then the system
    toolkit's, as every key reads them (`kernel.env_includes`: once a process, at the first key
    or build), and as NVRTC is given them (`nvrtc.include_dirs`): a build reads what its key did."""
    import warmcli.backends.system_folders  # noqa: F401 (it lends `system_shadows` warm's home)

    homes, packages = env_includes("nvrtc")
    return tuple(f for text in (packages, homes) for f in text.split(os.pathsep) if f)


def know_cuda(identity: str, nvcc: str = "") -> None:
    """Tell the key the folders of the compiler of `identity`: `nvcc`'s (`nvcc_system`; its
    toolkit's where `CPATH` or its kin is set), else NVRTC's (`nvrtc_system`)."""
    if not nvcc:
        CC_SYSTEM.setdefault(identity, nvrtc_system)
        return
    if identity not in CC_SYSTEM:
        ccbin = config.nvcc_flags().get("NVCC_CCBIN", "")
        CC_SYSTEM[identity] = functools.partial(nvcc_system, nvcc, config.path(), ccbin=ccbin)
    if config.compiler_include_paths(cxx=True) == ("", ""):  # (`compiler_includes`)
        return
    if identity not in NVCC_TOOLKITS and (folders := toolkit_includes(nvcc)) is not None:
        NVCC_TOOLKITS[identity] = folders
