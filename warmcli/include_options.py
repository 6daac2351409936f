"""The include folders and headers read first that a kernel's options name, and its key's options.

`-I`, `--include-path`, `-isystem`, nvcc's `--system-include`, `-iquote`, `-idirafter`, gcc's
`--include-directory[-after]` name an include folder, joined or with the folder next;
`-include`, `--pre-include`, gcc's `--include`, `-imacros` a header read before the source
(joined too: `-includeh.h`). `include_folders` and `pre_included` list them (`named_folders` and
`pre_included_at` with where each option is, for a caller that quotes or rewrites it),
`searched_folders` in the order a compiler searches them (nvcc puts what `-Xcompiler` hands its
gcc first);
`absolute_include_options` gives a relative one as the working folder's, or a compile unit's,
where its key read it (cc runs in a scratch folder); `keyed_options` writes each folder's
path, and a header's named by its absolute path, as a mark: `warmcli.headers` keys their
content instead; `absolute_include_paths` gives `CPATH` and its kin as a compiler's environment
takes them (relative entries made a unit's folder's). Pure functions over the
options' text (but `absolute_include_options`, which asks whether a header is in that folder).
Its one state: the folder relative include folders name while a unit built earlier is keyed
(`keyed_in`), a context variable.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar

# Options naming an include folder, joined (`-Idir`, `--include-path=dir`) or with the
# folder in the next option; gcc's long spellings of `-idirafter` (before its prefix) and `-I`,
# nvcc's of `-isystem`.
INCLUDE_FLAGS = (
    "--include-path", "--include-directory-after", "--include-directory", "--system-include",
    "-isystem", "-iquote", "-idirafter", "-I",
)  # fmt: skip
_AS_I = ("-I", "--include-path", "--include-directory")  # the flags searched as `-I`
_AS_DIRAFTER = ("-idirafter", "--include-directory-after")


def named_folders(options: Sequence[object]) -> list[tuple[str, str, int, str]]:
    """Each include folder `options` name, in order: flag, folder, option's place, text before."""
    folders: list[tuple[str, str, int, str]] = []
    take_next: str | None = None
    for at, option in enumerate(options):
        if take_next is not None or type(option) is not str:  # a folder, or no option's
            if take_next is not None and type(option) is str:
                folders.append((take_next, option, at, ""))
            take_next = None
            continue
        for flag in INCLUDE_FLAGS:
            if option.startswith(flag):
                rest = option[len(flag) :]
                if flag.startswith("--") and rest.startswith("="):
                    rest = rest[1:]
                elif flag.startswith("--") and rest:  # another option (`--include-paths`)
                    break
                if rest:
                    folders.append((flag, rest, at, option[: len(option) - len(rest)]))
                else:
                    take_next = flag
                break
    return folders


# The flags by which nvcc hands its host compiler an option (`warmcli.backends.cuda.host_options`
# reads what they hand): it puts those before its own include options on gcc's command line
# (`nvcc --dryrun`: `gcc ... -I/a ... -I"/b"`).
HOST_OPTION_FLAGS = ("-Xcompiler", "--compiler-options")


def searched_folders(options: Sequence[object]) -> list[tuple[str, str]]:
    """Each include folder `options` name, with its flag, in the order the compiler is handed
    them: those nvcc hands its gcc alone (`-Xcompiler`, `-I/a`) first, then the others."""
    named = named_folders(options)
    first = [n for n in named if n[2] and options[n[2] - 1] in HOST_OPTION_FLAGS]
    return [(flag, folder) for flag, folder, _, _ in first + [n for n in named if n not in first]]


# A header read before the source: its flags as gcc and nvcc spell them (`-imacros` reads
# one's macros alone), each with the file in the next option or after `=`; gcc's short ones
# also joined (`-includeh.h`).
PRE_INCLUDE_FLAGS = ("--pre-include", "-include", "--include", "-imacros", "--imacros")
_JOINED_PRE_INCLUDES = ("-include", "-imacros")


def pre_included_at(options: Sequence[object]) -> list[tuple[int, str, str]]:
    """Each header `options` read before the source: its option's position, text before it, name."""
    found: list[tuple[int, str, str]] = []
    for at, (before, option) in enumerate(zip(("", *options), options, strict=False)):
        if type(option) is not str:
            continue
        if before in PRE_INCLUDE_FLAGS:
            found.append((at, "", option))
        elif option.startswith(tuple(f + "=" for f in PRE_INCLUDE_FLAGS)):
            flag = option.split("=", 1)[0] + "="
            found.append((at, flag, option[len(flag) :]))
        elif option.startswith(_JOINED_PRE_INCLUDES) and option not in PRE_INCLUDE_FLAGS:
            joined = next(f for f in _JOINED_PRE_INCLUDES if option.startswith(f))
            found.append((at, joined, option[len(joined) :]))
    return found


def pre_included(options: Sequence[object]) -> list[str]:
    """The headers `options` read first (`-include h`, `--pre-include=h`, `-imacros h`...)."""
    return [name for _, _, name in pre_included_at(options)]


_KEYED_IN: ContextVar[str] = ContextVar("warm_keyed_in", default="")


def working_folder() -> str:
    """The folder relative include folders name: the one a unit's key read them in, inside
    `keyed_in`, else the working folder (`OSError` where that was removed)."""
    return _KEYED_IN.get() or os.getcwd()


@contextlib.contextmanager
def keyed_in(folder: str) -> Iterator[None]:
    """Relative include folders (`-I.`, `CPATH=.`) are `folder`'s here (a compile unit's, where
    its key read them: what is kept of its build is keyed there, as a batch runs later)."""
    token = _KEYED_IN.set(folder)
    try:
        yield
    finally:
        _KEYED_IN.reset(token)


def absolute_include_options(options: Sequence[str], folder: str = "") -> list[str]:
    """`options`, relative include folders and headers read first from `folder` (a unit's,
    where its key read them), else the working folder."""
    try:
        cwd = folder or working_folder()
    except OSError:  # the working folder was removed: relative folders name nothing
        return list(options)
    made = list(options)
    for _, folder, at, before in named_folders(options):
        made[at] = before + os.path.join(cwd, folder)
    for at, before, name in pre_included_at(options):  # cc's working folder, first
        if os.path.isfile(os.path.join(cwd, name)):
            made[at] = before + os.path.join(cwd, name)
    return made


# What a keyed option says in place of the include folder it names (`keyed_options`).
FOLDER_MARK = "<include folder>"
HEADER_MARK = "<header>"  # and in place of a header read first named by its absolute path


def keyed_options(options: Sequence[str]) -> tuple[str, ...]:
    """`options` as a key takes them: each include folder's path `FOLDER_MARK` (flag and place
    kept), a header read first by its path `HEADER_MARK`: `headers_digest` keys their content."""
    keyed = list(options)
    for _, _, at, before in named_folders(options):
        keyed[at] = before + FOLDER_MARK
    for at, before, name in pre_included_at(options):
        if os.path.isabs(name):
            keyed[at] = before + HEADER_MARK
    return tuple(keyed)


def include_folders(options: Sequence[object]) -> tuple[str, ...]:
    """The include folders `options` name, in order (empty for most kernels)."""
    return tuple(folder for _, folder, _, _ in named_folders(options))


INCLUDE_PATHS = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")  # a C (C++: nvcc) compiler's


def absolute_include_paths(env: Mapping[str, str], folder: str = "") -> dict[str, str]:
    """Each of `INCLUDE_PATHS` `env` sets to a list with a relative or empty entry, each such
    entry taken from `folder`, else the working folder (none where the working folder is gone)."""
    made: dict[str, str] = {}
    for name in INCLUDE_PATHS:
        entries = env[name].split(os.pathsep) if env.get(name) else []
        if not all(os.path.isabs(entry) for entry in entries):
            try:
                here = folder or os.getcwd()
            except OSError:
                return {}
            made[name] = os.pathsep.join(os.path.join(here, e) for e in entries)
    return made
