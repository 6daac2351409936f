"""nvcc's `nvcc.profile`: what of it keys nvcc's builds, and the digest its `--dryrun`s are
remembered by. nvcc reads `nvcc.profile` beside the binary it is started as, before every compile:
the options it gives its host compiler (`INCLUDES`, where a `-DNAME=1` defines a macro in every
kernel's device code), cudafe++'s and ptxas' (`CUDAFE_FLAGS`, `PTXAS_FLAGS`), and the folders it
runs cicc, ptxas and its host compiler from (`PATH`, `CICC_PATH`). None of it shows in nvcc's
version line, so an edited profile was served the build of the profile before it under one key. A
profile as a toolkit ships it (its folders under the toolkit's own, `$(TOP)/include`, no option but
`-I`, `-isystem` and `-L`, no cudafe++ or ptxas flag: `is_plain`) keys nothing (its folders are read
from nvcc's `--dryrun`: `host_options`); any other is named in nvcc's identity by its digest
(`profile_named`), so its builds are another kernel's. A `$(NAME)` it never sets (nor nvcc) is
the environment's: such a profile is no toolkit's own, and its digest covers the values of those
variables (`-I$(X)` with `X="/inc -DN=3"` defines N). `digest` is what the `--dryrun`s read through
it are remembered by, with the binary's stamp. `FROM_ENVIRONMENT` names the variables nvcc takes
from the environment through it (its `INCLUDES +=`: `INCLUDES=-DN=5` reaches every kernel), and
`PASSED_ON` those it hands cicc and ptxas with no profile naming them (`OCG_FLAGS`). It holds
memos per profile file and settled stamp (the last 8) and per profile text (the last 16, each
judged once while kept), and notes the variables a profile takes from the environment as ones a
compile reads (`wrapper_script.note_names_read`); it never runs nvcc.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

from warmcli import config
from warmcli.backends.serving import NVCC_ENVIRONMENT
from warmcli.stamped import Stamp, settled, stamp
from warmcli.wrapper_script import note_names_read

# Where an nvcc identity names a profile that is no toolkit's own (`profile_named`): after its
# host compiler, among what changes what nvcc builds (`serving.nvcc_environment`).
PROFILE_MARK = f"{NVCC_ENVIRONMENT}PROFILE="
# What a toolkit's profile sets: folders (as `$(TOP)/...`), and flags it leaves empty.
_FOLDERS = frozenset({"TOP", "CICC_PATH", "CICC_NEXT_PATH", "NVVMIR_LIBRARY_DIR", "PATH"})
_FOLDERS |= {"LD_LIBRARY_PATH", "_TARGET_DIR_", "_TARGET_SIZE_"}
_OPTIONS = frozenset({"INCLUDES", "SYSTEM_INCLUDES", "LIBRARIES"})  # folders only
_EMPTY = frozenset({"CUDAFE_FLAGS", "PTXAS_FLAGS"})
_SEARCHED = frozenset({"PATH", "LD_LIBRARY_PATH"})  # the folders a toolkit adds to (`+=`)
_BUILT_IN = frozenset({"_HERE_", "_SPACE_", "_TARGET_DIR_", "_TARGET_SIZE_"})  # nvcc sets them
_NAMED = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")  # `$(NAME)` in a setting's word
# What a toolkit's profile adds to (`+=`): nvcc takes a value of these from the environment
# first, and its options reach every compile (`host_options.refused_flags` refuses them).
FROM_ENVIRONMENT = ("INCLUDES", "SYSTEM_INCLUDES", "CUDAFE_FLAGS", "PTXAS_FLAGS")
# What nvcc hands its tools from the environment with no profile naming it, as the option that
# says so on its command line: cicc's and ptxas' options (`nvcc --dryrun`: `OCG_FLAGS=-O0` is
# another cubin, `NVVM_FLAGS=-g` another PTX); `host_options.refused_flags` refuses them too.
PASSED_ON = {"NVVM_FLAGS": "-Xcicc", "OCG_FLAGS": "-Xptxas"}
_LINE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\+=|=\+|\?=|=)\s*(.*?)\s*")
_MAX_BYTES = 1 << 20  # a profile bigger than this is keyed by its size's mark alone


@functools.lru_cache(maxsize=8)
def _read(path: str, stamp: Stamp) -> bytes | None:
    """The profile at `path` (None where there is none), once per file and settled stamp."""
    return _read_now(path)


def _read_now(path: str) -> bytes | None:
    """The profile at `path` (None where there is none), read now."""
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
    # by its whole stamp (`touch -r` sets an mtime back, never a ctime), once settled: a profile
    # changed twice in one tick of a coarse clock may keep its stamp
    return _read(path, stamp(st)) if settled(st) else _read_now(path)


def digest(binary: str) -> str:
    """The first 16 hex digits of the digest of `binary`'s profile and of the values of the
    environment's variables it names (`_from_environment`), "-" where there is none."""
    text = _text(binary)
    if text is None:
        return "-"
    names = _from_environment(text)
    note_names_read(set(names))  # (a compile reads them: a batch's groups tell them apart)
    values = config.named_variables(names) if names else {}
    named = "".join(f"\0{n}={values.get(n, '')}" for n in names)
    return hashlib.sha256(text + named.encode("utf-8", "surrogateescape")).hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _from_environment(text: bytes) -> tuple[str, ...]:
    """The variables the profile `text` takes from the environment: each `$(NAME)` it names
    but has not set above, nor nvcc sets (nvcc reads `-I$(R51D)` as `$R51D` says, its spaces
    splitting it: `R51D="/x -DN=3"` reaches every compile); none in a toolkit's own."""
    defined, named = set(_BUILT_IN), set()
    for line in text.decode("utf-8", "replace").splitlines():
        found = _LINE.fullmatch(line)
        named |= set(_NAMED.findall(found.group(3) if found else line)) - defined
        defined |= {found.group(1)} if found else set()
    return tuple(sorted(named))


def _under_toolkit(word: str, name: str, defined: set[str]) -> bool:
    """Whether a word of a folder setting names a folder of the toolkit's own: under `$(TOP)`
    or another the profile set before (`defined`), or nvcc's own names (`_BUILT_IN`). Any
    other `$(NAME)` is the environment's (nvcc reads `-I$(HOME)/inc` as `$HOME` says, and a
    value's spaces split it: `-DN=3` reaches every compile), which no key holds."""
    if name == "TOP":
        return word == "$(_HERE_)/.."
    named = _NAMED.findall(word)
    return (
        word.startswith("$(")
        and "/.." not in word
        and word.count("$(") == len(named)
        and all(n in defined or n in _BUILT_IN for n in named)
    )


@functools.lru_cache(maxsize=16)  # (a process asks of one profile at each `toolchain`)
def is_plain(text: bytes) -> bool:
    """Whether the profile `text` is as a toolkit ships one: only its own folders, no option."""
    if len(text) > _MAX_BYTES:
        return False
    defined: set[str] = set()  # (what a later line may name: set above it, judged plain)
    for line in text.decode("utf-8", "replace").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        found = _LINE.fullmatch(line)
        if found is None:
            return False
        name, how, value = found.groups()
        words = value.replace('"', " ").replace("$(_SPACE_)", " ").split()
        if name in _EMPTY:
            if words:
                return False
        elif name in _FOLDERS:
            if how != "=" and name not in _SEARCHED:  # (`+=` takes the environment's first)
                return False
            if not all(_under_toolkit(w, name, defined) for w in value.replace(":", " ").split()):
                return False
        elif name in _OPTIONS:
            words = [w for w in words if w != "-isystem"]
            bare = [w[2:] if w.startswith(("-I", "-L")) else w for w in words]
            if not all(_under_toolkit(w, name, defined) for w in bare):
                return False
        else:
            return False
        defined.add(name)
    return True


def profile_named(binary: str) -> str:
    """What nvcc's identity says of `binary`'s profile: "" for none or a toolkit's own
    (`is_plain`), else `; NVCC_PROFILE=<digest>`."""
    text = _text(binary)
    return "" if text is None or is_plain(text) else f"{PROFILE_MARK}{digest(binary)}"
