"""nvcc's `nvcc.profile`: what of it keys nvcc's builds, and the digest its `--dryrun`s are
remembered by. nvcc reads `nvcc.profile` beside the binary it is started as, before every compile:
the options it gives its host compiler (`INCLUDES`, where a `-DNAME=1` defines a macro in every
kernel's device code), cudafe++'s and ptxas' (`CUDAFE_FLAGS`, `PTXAS_FLAGS`), and the folders it
runs cicc, ptxas and its host compiler from (`PATH`, `CICC_PATH`). None of it shows in nvcc's
version line, so an edited profile was served the build of the profile before it under one key. A
profile as a toolkit ships it (its folders under the toolkit's own, `$(TOP)/include`, no option but
`-I`, `-isystem` and `-L`, no cudafe++ or ptxas flag: `is_plain`) keys nothing (its folders are read
from nvcc's `--dryrun`: `host_options`); any other is named in nvcc's identity by its digest
(`profile_named`), so its builds are another kernel's. `digest` is what the `--dryrun`s read through
it are remembered by, with the binary's stamp. `FROM_ENVIRONMENT` names the variables nvcc takes
from the environment through it (its `INCLUDES +=`: `INCLUDES=-DN=5` reaches every kernel). It holds
a memo per profile file and stamp (what a process reads of it once); it never runs nvcc.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

from warmcli.backends.serving import NVCC_ENVIRONMENT

# Where an nvcc identity names a profile that is no toolkit's own (`profile_named`): after its
# host compiler, among what changes what nvcc builds (`serving.nvcc_environment`).
PROFILE_MARK = f"{NVCC_ENVIRONMENT}PROFILE="
# What a toolkit's profile sets: folders (as `$(TOP)/...`), and flags it leaves empty.
_FOLDERS = frozenset({"TOP", "CICC_PATH", "CICC_NEXT_PATH", "NVVMIR_LIBRARY_DIR", "PATH"})
_FOLDERS |= {"LD_LIBRARY_PATH", "_TARGET_DIR_", "_TARGET_SIZE_"}
_OPTIONS = frozenset({"INCLUDES", "SYSTEM_INCLUDES", "LIBRARIES"})  # folders only
_EMPTY = frozenset({"CUDAFE_FLAGS", "PTXAS_FLAGS"})
# What a toolkit's profile adds to (`+=`): nvcc takes a value of these from the environment
# first, and its options reach every compile (`host_options.refused_flags` refuses them).
FROM_ENVIRONMENT = ("INCLUDES", "SYSTEM_INCLUDES", "CUDAFE_FLAGS", "PTXAS_FLAGS")
_LINE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\+=|=\+|\?=|=)\s*(.*?)\s*")
_MAX_BYTES = 1 << 20  # a profile bigger than this is keyed by its size's mark alone


@functools.cache
def _read(path: str, stamp: tuple[int, int, int]) -> bytes | None:
    """The profile at `path` (None where there is none), once per file and stamp."""
    try:
        with open(path, "rb") as fh:
            return fh.read(_MAX_BYTES + 1)
    except OSError:
        return None


def _text(binary: str) -> bytes | None:
    """The `nvcc.profile` beside the nvcc binary `binary` (None where there is none)."""
    path = os.path.join(os.path.dirname(binary), "nvcc.profile")
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _read(path, (st.st_ino, st.st_size, st.st_mtime_ns))


def digest(binary: str) -> str:
    """The first 16 hex digits of the digest of `binary`'s profile, "-" where there is none."""
    text = _text(binary)
    return "-" if text is None else hashlib.sha256(text).hexdigest()[:16]


def _under_toolkit(word: str, name: str) -> bool:
    """Whether a word of a folder setting names a folder of the toolkit's own."""
    if name == "TOP":
        return word == "$(_HERE_)/.."
    return word.startswith("$(") and "/.." not in word


@functools.lru_cache(maxsize=16)  # (a process asks of one profile at each `toolchain`)
def is_plain(text: bytes) -> bool:
    """Whether the profile `text` is as a toolkit ships one: only its own folders, no option."""
    if len(text) > _MAX_BYTES:
        return False
    for line in text.decode("utf-8", "replace").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        found = _LINE.fullmatch(line)
        if found is None:
            return False
        name, value = found.groups()
        words = value.replace('"', " ").replace("$(_SPACE_)", " ").split()
        if name in _EMPTY:
            if words:
                return False
        elif name in _FOLDERS:
            if not all(_under_toolkit(w, name) for w in value.replace(":", " ").split()):
                return False
        elif name in _OPTIONS:
            words = [w for w in words if w != "-isystem"]
            bare = [w[2:] if w.startswith(("-I", "-L")) else w for w in words]
            if not all(_under_toolkit(w, name) for w in bare):
                return False
        else:
            return False
    return True


def profile_named(binary: str) -> str:
    """What nvcc's identity says of `binary`'s profile: "" for none or a toolkit's own
    (`is_plain`), else `; NVCC_PROFILE=<digest>`."""
    text = _text(binary)
    return "" if text is None or is_plain(text) else f"{PROFILE_MARK}{digest(binary)}"
