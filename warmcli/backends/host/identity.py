"""The host C compiler's whole identity, remembered across processes while nothing it names moved.

A hot start's identity of cc (its version line, those of the `as` and `ld` it runs and, where
`COMPILER_PATH` or `GCC_EXEC_PREFIX` is set, of its other programs: `host.programs`) asked
about every folder of `PATH` and of cc's own, read `toolchains.json` twice and walked cc's
links: ~300 µs of a process's first launch. Here the identity is remembered in
`toolchains.json` (one entry per cc name, those variables and `PATH`), with the stamp (`stat`:
mode, size, device, inode, mtime, ctime; or the error it gave) of every place its finding read:
each folder searched (`PATH`'s up to the last that held a name first, all where one was in
none; cc's own; one not there by its error, and none below it), each entry
there of a name it looked for (cc's, `as`, `real-ld`, `collect-ld`, `ld`, and the moved
programs and linker plugin), the file `WARM_CC` names, cc's folder and that of each link it
leads through (gcc finds its programs beside the file it resolves to: a link to another tree
of the same file, hard-linked, moves them), and warm's own modules that make the identity.
It is believed only while every stamp is the same: a program added, removed or renamed in a
folder changes the folder's mtime and ctime, a file rewritten, replaced or made executable
changes its own, so the identity changes exactly when finding it anew would. One
read of the file and a `stat` per place, then; never remembered where a stamp is racy (changed
from `RACY_SECONDS` before its finding began: a program replaced while it was found would be
remembered by the new one's stamp with the old one's line), a folder searched is relative
(read from the working or scratch folder), cc is a launcher (`ccache`) or a script, or a
program answered no version line; nor tried where the place a remembered one was disbelieved
by is racy (it would be again: a folder changed in every process costs little more).
Its state: none (the per-process memo is `compiler._toolchain`'s). Nothing here compiles.
"""

from __future__ import annotations

import errno
import os
import sys
import time

from warmcli.backends.host.programs import (
    ASSEMBLER,
    LINKER,
    MOVED_PROGRAMS,
    PLUGIN,
    Moved,
    _file,
    program_folders,
)
from warmcli.backends.toolchain import (
    LAUNCHERS,
    MAX_PARTS,
    PARTED,
    RACY_SECONDS,
    WRAPPER_MARK,
    Toolchain,
    _find,
    _joined,
    _read_versions,
    _remember,
    environment_named,
    resolved_name,
)
from warmcli.home import home_dir
from warmcli.stamped import last_change

# Raised where what an identity names or how it is found changes (the stamps of warm's own
# modules below name an upgraded or edited warm too): a remembered one of another form is none.
IDENTITY_FORM = 1
KEY = PARTED.rstrip("|")  # (`toolchain` believes NULs in such an entry only)
ON_PATH = ("as", "ld")  # the names `PATH` is searched for (with cc's, where it has no folder)
IN_FOLDERS = (*ASSEMBLER, *LINKER)  # those cc's own folders are (and `MOVED`, where moved)
MOVED = (*MOVED_PROGRAMS, PLUGIN)
ENOENT = f"errno {errno.ENOENT}"  # the stamp of a place not there
SEPARATOR = "\x00"  # after each part of a remembered identity (one string: no JSON in it)
# The modules whose code makes the identity (their files' stamps are among the memo's).
MAKERS = (
    "warmcli.backends.toolchain",
    "warmcli.backends.host.programs",
    "warmcli.backends.host.compiler",
    "warmcli.backends.host.identity",
)


def _key(cc: str, moved: Moved, search: str) -> str:
    named = environment_named(repr(moved))
    return f"{KEY}|{IDENTITY_FORM}|{cc}|{named}|{environment_named(search)}"


def _stamp(place: str) -> str:
    """`place`'s stat as the memo holds it (links followed), or the error it gives."""
    try:
        st = os.stat(place)
    except OSError as exc:
        return f"errno {exc.errno}"
    return f"{st.st_mode}|{st.st_size}|{st.st_dev}|{st.st_ino}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def recalled(cc: str, moved: Moved, search: str) -> Toolchain | None:
    """The identity of the cc `cc` where the variables `moved` are set and `PATH` is `search`,
    as remembered, where every place it was found by is as it was then; else None."""
    return recall(cc, moved, search)[0]


def recall(cc: str, moved: Moved, search: str) -> tuple[Toolchain | None, bool]:
    """`recalled`'s identity, and whether it is worth remembering anew where there is none:
    not where a place it was found by changed in the last `RACY_SECONDS` (that one's stamp
    would be racy when remembered: a folder changed in every process costs it nothing more)."""
    held = _read_versions().get(_key(cc, moved, search))
    # As written: the path and version, then places and stamps (some), each ended by a NUL
    # (which no path, stamp or version line holds: one that did was never remembered)
    parts = held.split(SEPARATOR) if held else ()
    if len(parts) < 5 or len(parts) % 2 == 0 or parts[-1]:
        return None, True
    path, version, *checks = parts[:-1]
    for at in range(0, len(checks), 2):
        if (stamp := _stamp(checks[at])) != checks[at + 1]:
            return None, not _racy(stamp, time.time())
    return Toolchain(name="cc", path=path, version=version), False


def _racy(stamp: str, since: float) -> bool:
    """Whether the file of `stamp` changed after `RACY_SECONDS` before `since`, when its
    identity's finding began: since then (what was found may be another file's), or so near
    it that a second change in the same tick of its clock would leave the same stamp."""
    if stamp.startswith("errno"):
        return False
    mtime, ctime = (int(n) for n in stamp.split("|")[4:6])
    return since * 1e9 - last_change(mtime, ctime, int(since * 1e9)) < RACY_SECONDS * 1e9


def remember(cc: str, moved: Moved, search: str, toolchain: Toolchain, since: float) -> None:
    """Remember `toolchain`, the identity of the cc `cc` (`recalled`'s arguments) found anew
    from the time `since` (`time.time()` before its finding began), with the stamps of the
    places finding it read; nothing where one of them could change unseen (`recalled`:
    relative folders, a launcher, a script, a stamp racy since then: a program replaced while
    it was found, whose stamps would be read after its line was). A place stamped racy ends
    the stamping (a folder changed in every process costs its hot start little more)."""
    version = toolchain.version
    if WRAPPER_MARK in version or any(
        part.endswith("(no version line)") for part in version.split("; ")
    ):
        return  # read anew in each process (a script reads the environment), or asked again
    if not os.access(home_dir(), os.W_OK):
        return  # a home no process may write (mounted read-only): nothing more asked each time
    name_only = os.sep not in cc
    first = _find(cc)
    if first is None or first[0] != toolchain.path or resolved_name(first[0]) in LAUNCHERS:
        return  # a launcher (`ccache`): the compiler it runs is found past it, name by name
    if not os.path.isabs(cc if not name_only else os.sep) or _racy(_stamp(first[0]), since):
        return  # (its program folders would be asked of it again)
    path_folders = list(dict.fromkeys(search.split(os.pathsep))) if search else []
    if not all(os.path.isabs(folder) for folder in path_folders):
        return  # read from the working folder, or a scratch one
    checks = {cc: _stamp(cc)} if not name_only else {}
    on_path = (cc, *ON_PATH) if name_only else ON_PATH
    if not _stamp_folders(_consulted(path_folders, on_path), on_path, checks, since):
        return
    folders = list(dict.fromkeys(program_folders(toolchain.path, moved)))
    if not all(os.path.isabs(folder) for folder in folders):
        return  # (as `PATH`'s)
    if not _stamp_folders(folders, (*IN_FOLDERS, *(MOVED if moved else ())), checks, since):
        return
    for folder in _link_folders(toolchain.path):  # (gcc's own folders are beside its file)
        checks.setdefault(folder, _stamp(folder))
    for module in MAKERS:
        if not (source := getattr(sys.modules.get(module), "__file__", None)):
            return
        checks[source] = _stamp(source)
    if any(_racy(stamp, since) for stamp in checks.values()):
        return
    texts = [toolchain.path, version, *(text for check in checks.items() for text in check)]
    if len(texts) <= MAX_PARTS and not any(SEPARATOR in text for text in texts):  # (believed)
        _remember(_key(cc, moved, search), "".join(text + SEPARATOR for text in texts))


def _link_folders(path: str) -> list[str]:
    """The folder of `path` and of each link it leads through to its file (`/usr/bin/cc`,
    `/etc/alternatives/cc`, ...; `/opt/gcc/bin` where `/opt/gcc` is a link): gcc finds its
    programs beside the file it resolves to, so a link on the way repointed (to another tree
    of the same file hard-linked, whose own stamp is the same) moves them."""
    folders = []
    for _ in range(40):  # (the kernel's limit on links)
        folders.append(os.path.dirname(path))
        try:
            target = os.readlink(path)
        except OSError:
            break
        path = os.path.join(os.path.dirname(path), target)  # (an absolute one: itself)
    return folders


def _consulted(folders: list[str], names: tuple[str, ...]) -> list[str]:
    """`folders` (`PATH`'s) up to the last that holds one of `names` found first there (an
    executable file, as `toolchain._find` and `programs._on_path` find it): none after it is
    asked about any of them; all where one of them is in none."""
    last = -1
    for name in names:
        for at, folder in enumerate(folders):
            place = _joined(folder, name)
            if os.access(place, os.X_OK) and _file(place):
                last = max(last, at)
                break
        else:
            return folders
    return folders[: last + 1]


def _stamp_folders(
    folders: list[str], names: tuple[str, ...], checks: dict[str, str], since: float
) -> bool:
    """Add to `checks` the stamps of `folders` and of their entries named `names` (one not
    there is the folder's: its mtime moves when one is made), in order; but none of a folder
    below one not there (nor is it), nor of the entries of a folder that is one before it (the
    same stamp: `/bin`, a link to `/usr/bin`), whose stamps are checked first. False at
    the first stamp racy since `since` (`_racy`: nothing more stamped), else True."""
    stamps = {folder: checks.get(folder) or _stamp(folder) for folder in folders}
    if any(_racy(stamp, since) for stamp in stamps.values()):
        return False
    absent = [f if f.endswith(os.sep) else f + os.sep for f, s in stamps.items() if s == ENOENT]
    seen: set[tuple[str, str]] = set()
    for folder, stamp in stamps.items():
        if any(folder.startswith(a) and folder != a for a in absent):
            continue  # below a folder not there: not there while that one is not
        checks[folder] = stamp
        for name in () if stamp == ENOENT else names:
            place = _joined(folder, name)
            if (stamp, name) not in seen and os.path.lexists(place):
                checks.setdefault(place, _stamp(place))
                if _racy(checks[place], since):
                    return False
            seen.add((stamp, name))
    return True
