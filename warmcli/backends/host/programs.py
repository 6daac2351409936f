"""The assembler and linker the host C compiler runs, named in its identity.

cc (GCC) runs `as`, and `ld` through `collect2`: the first found in its program folders (its
install's, `GCC_EXEC_PREFIX`'s, `COMPILER_PATH`'s: the `programs` line of `cc
-print-search-dirs`; for the linker `real-ld`, then `collect-ld`, then `ld` there, as
`collect2` looks), else the first on `PATH`; a relative folder read, as cc reads it, from
its scratch folder (`warmcli.scratch.seen_from_scratch`). Another one there builds other code
under the same cc (a wrapper `as` that edits a constant, an `ld` that adds `--defsym`,
binutils replaced behind the same names), so each one's version line follows cc's in its
identity (`; as GNU assembler ... 2.40; ld GNU ld ... 2.40`; a script's with its digest, one
with no `#!` too, as a wrapper cc's: `warmcli.backends.toolchain`); where `COMPILER_PATH` or
`GCC_EXEC_PREFIX` is set, so are those of the `cc1`, `collect2`, `lto1` and `lto-wrapper`
found first in cc's folders (`cc1` prints none: its name and its content's digest), and the
digest of the linker plugin there (`liblto_plugin.so`, loaded by `ld` on every link). A hot
start whose cc's identity is remembered whole (`host.identity`: believed while each place it
was found by keeps its stamp) asks nothing here; else it pays one `access` per folder of
cc's, one per name in each it can search, one per `PATH` entry and name (`PATH` walked once
for both), a `stat` per program found (its stamp), and one read of `toolchains.json` for all:
cc's program folders are remembered in warm's home by cc's stamp, the file it resolves to
(gcc finds them beside it) and the variables that move them (read anew in each process for
a cc that is a wrapper script), each program's version line by its own stamp, as cc's is (one not
remembered is asked anew, `as`'s and `ld`'s at once: `warmcli.backends.processes.at_once`, one in a
thread of its own; for a cc that is a binary, all of it while cc's `--version` runs:
`programs_ahead`). Its state: a per-process memo of each cc's line, by the variables read.
Nothing here compiles or prints.
"""

from __future__ import annotations

import functools
import os
import stat

from warmcli.backends.toolchain import (
    LINE_CHARS,
    WRAPPER_MARK,
    Toolchain,
    _joined,
    _read_versions,
    _version_line,
    environment_named,
    remembered,
)
from warmcli.errors import ToolchainError

ASSEMBLER = ("as",)
LINKER = ("real-ld", "collect-ld", "ld")  # `collect2`'s order in cc's folders (`PATH`: `ld`)
# Named too where `COMPILER_PATH` or `GCC_EXEC_PREFIX` may put others before cc's own (`-flto`
# runs `lto-wrapper` and `lto1`).
MOVED_PROGRAMS = ("cc1", "collect2", "lto1", "lto-wrapper")
PLUGIN = "liblto_plugin.so"  # cc hands `ld` the first in its folders (`-plugin`): linker code
FOLDERS_TIMEOUT = 60.0  # seconds cc may take to answer `-print-search-dirs`


def programs_line(found: Toolchain, moved: Moved, search: str) -> str:
    """What follows cc's version line in its identity: `; as <line>; ld <line>` of the
    programs the cc of `found` runs here (`none` for one not found), where the variables
    `moved` (`config.compiler_programs`) are set and `PATH` is `search`."""
    return _line(found.path, WRAPPER_MARK in found.version, moved, search)


def programs_ahead(cc: str, moved: Moved, search: str) -> None:
    """`programs_line` of the cc whose file is `cc` (its path as `toolchain.probe` finds it),
    taken for a binary (no wrapper script), asked before cc's version line is read (while
    `cc --version` runs: `host.compiler.found_anew`) and kept in this process's memo, where
    `programs_line` takes it (a script's, and another file's, are asked anew there)."""
    _line(cc, False, moved, search)


Moved = tuple[tuple[str, str], ...]  # `config.compiler_programs()`'s items


@functools.cache
def _line(cc: str, script: bool, moved: Moved, search: str) -> str:
    from warmcli.scratch import seen_from_scratch  # (as `_on_path`: an identity found anew)

    versions = _read_versions()  # (once for all: each line below is looked up in it)
    # cc's folders one can search (no other holds a program): each is looked in for up to four
    # names, and on most machines some are not there (Debian's `.../x86_64-linux-gnu/bin/`)
    found = filter(None, map(seen_from_scratch, _folders(cc, script, moved, versions)))
    folders = [folder for folder in found if os.access(folder, os.X_OK)]
    assembler, linker = _first(folders, ASSEMBLER), _first(folders, LINKER)
    if assembler is None or linker is None:  # `PATH` read once for both
        on_path = _on_path([n for n, f in (("as", assembler), ("ld", linker)) if not f], search)
        assembler, linker = assembler or on_path.get("as"), linker or on_path.get("ld")
    from warmcli.backends.processes import at_once  # (as `_read_folders`' import)

    said = at_once(
        lambda: _version("as", assembler, versions), lambda: _version("ld", linker, versions)
    )
    line = f"; as {said[0]}; ld {said[1]}"  # (each asked at once: two processes overlapped)
    for name in MOVED_PROGRAMS if moved else ():  # else cc's own, of its version
        line += f"; {name} {_version(name, _first(folders, (name,)), versions)}"
    return line + (f"; {PLUGIN} {_plugin(folders, versions)}" if moved else "")


def _plugin(folders: list[str], versions: dict[str, str]) -> str:
    """The digest of the linker plugin cc finds first in `folders` (a readable file), by its
    stamp (in `versions`, as read); `none` where there is none."""
    for folder in folders:
        found = _file(_joined(folder, PLUGIN))
        if found and os.access(found[0], os.R_OK):
            return remembered(PLUGIN, *found, _digest_line, versions).version
    return "none"


def _digest_line(name: str, where: str) -> str:
    return f"sha256:{_content_digest(where)}"


def _folders(cc: str, script: bool, moved: Moved, versions: dict[str, str]) -> list[str]:
    """cc's program folders, remembered by its stamp and the variables that move them (in
    `versions`, as read)."""
    try:
        st = os.stat(cc)
    except OSError:
        return []
    try:
        if script:  # the compiler a script runs may change while the script does not
            text = _read_folders("", cc)
        else:  # by the file cc resolves to, beside which gcc finds them (another tree's is
            # another's, the same file hard-linked there too), and the variables
            moving = environment_named(repr(moved))  # (no digest unless long: no first sha256)
            real = os.path.realpath(cc)
            text = remembered(f"cc programs {moving}", real, st, _read_folders, versions).version
    except ToolchainError:  # no answer this time: none in this process, none remembered
        return []
    return [folder for folder in dict.fromkeys(text.split(os.pathsep)) if folder]


def program_folders(cc: str, moved: Moved) -> list[str]:
    """The program folders of the cc `cc` (no script), as `programs_line` reads them (before
    `seen_from_scratch`): the places its identity's memo stamps (`host.identity`)."""
    return _folders(cc, False, moved, _read_versions())


def _read_folders(name: str, cc: str) -> str:
    """The `programs` line of `cc -print-search-dirs` (none where cc prints none or fails);
    ToolchainError where it gave no answer (out of time, or killed: warm stopping its
    compilers on Ctrl-C), which is not remembered as none, as it was (stop 50's review)."""
    from warmcli.backends import processes  # on first use: a serving process runs no compiler

    try:
        out = processes.probe([cc, "-print-search-dirs"], FOLDERS_TIMEOUT)
    except OSError:
        return ""
    if out.timed_out or out.returncode < 0:
        raise ToolchainError(f"{cc} -print-search-dirs gave no answer")
    if out.returncode != 0:
        return ""
    for line in out.out.splitlines():
        if line.startswith("programs: "):
            return line[len("programs: ") :].removeprefix("=")
    return ""


Found = tuple[str, os.stat_result]  # a program's absolute path, and its stat


def _first(folders: list[str], names: tuple[str, ...]) -> Found | None:
    """The first of `names` that is an executable file, name by name, folder by folder (each
    as cc's scratch folder reads it: `_line`)."""
    access, executable = os.access, os.X_OK
    for name in names:
        for folder in folders:
            place = _joined(folder, name)
            if access(place, executable) and (found := _file(place)):
                return found
    return None


def _on_path(names: list[str], search: str) -> dict[str, Found]:
    """The first executable file of each of `names` on `search` (PATH), as cc's `execvp`
    finds it (those found: none where `search` is empty), one pass over `PATH` for all."""
    from warmcli.scratch import seen_from_scratch  # (found anew only: a hot process never)

    found: dict[str, Found] = {}
    access, executable = os.access, os.X_OK
    folders = dict.fromkeys(search.split(os.pathsep)) if search else {}
    for folder in filter(None, map(seen_from_scratch, folders)):  # (as cc's scratch folder)
        for name in names:
            if name in found:
                continue
            place = _joined(folder, name)
            if access(place, executable) and (hit := _file(place)):
                found[name] = hit
        if len(found) == len(names):
            break
    return found


def _file(place: str) -> Found | None:
    """`place` as absolute path and stat, where it is a file (a folder named so is passed
    over; the caller asks whether it may run or read it)."""
    try:
        st = os.stat(place)
    except OSError:
        return None
    return (os.path.abspath(place), st) if stat.S_ISREG(st.st_mode) else None


def _version(name: str, found: Found | None, versions: dict[str, str]) -> str:
    """The version line of the program `found` (a script's with its digest), remembered by
    its stamp (the stat it was found by; in `versions`, as read); `none` where there is none,
    and what it says where it answers no version."""
    if found is None:
        return "none"
    where, st = found
    try:
        return remembered(name, where, st, _answered, versions, LINE_CHARS).version
    except (OSError, ToolchainError):
        return f"{os.path.basename(where)} (no version line)"


def _answered(name: str, where: str) -> str:
    """`where --version`'s line, or where it prints none (`cc1`) its name and its content's
    digest (a script's, one with no `#!` too, with the values of the variables it names: then
    read in each process): remembered so, by its stamp, so no process asks it again."""
    try:
        return _version_line(name, where)
    except ToolchainError:
        from warmcli.wrapper_script import script_digest  # (as `toolchain._wrapper`'s)

        said = f"{os.path.basename(where)} (no version line)"
        if digest := script_digest(where, bare=True):
            return f"{said}{WRAPPER_MARK}{digest})"
        return f"{said} (sha256:{_content_digest(where)})"


def _content_digest(where: str) -> str:
    """The first 16 hex digits of the digest of the file `where` ("" where it cannot be read):
    another binary behind the same name (another GCC's `cc1`) is another program."""
    from warmcli.linked import file_digest  # (kept by the file's stamp, as a linked library's)

    return (file_digest(where) or "")[:16]
