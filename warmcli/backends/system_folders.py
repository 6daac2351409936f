"""A host compiler's own include folders: where it finds `<stdlib.h>`, after a kernel's.

`cc -E -v` prints them (`#include <...> search starts here:`; `-x c++` for nvcc's `gcc`, which
reads a CUDA kernel as C++: `warmcli.backends.cuda.own_folders`), run with `CPATH`
and its kin unset (their folders are keyed as a kernel's own), once per compiler binary and
language on a machine: remembered in warm's home beside its version line
(`toolchain.remembered`, by the binary's stamp and `GCC_EXEC_PREFIX`/`COMPILER_PATH`, which key
the compiler too), so a hot start runs no compiler for them (but for a wrapper script, asked in
each process as its version line is: the compiler it runs may change while its stamp does not).
The backends tell the key how to ask for them (`kernel.CC_SYSTEM`, by their toolchain's
identity); this module is imported where a key first asks: a kernel's include folders lack a
header it includes (`warmcli.system_shadows`). A compiler that does not say (another than GCC or
Clang: remembered so too; one that fails, asked again in the next process) names none: such a
kernel keys as before. It lends `system_shadows` warm's home to remember the includes each
system header reaches (`system-headers/`, a file per header and compiler's folders, read only
where this user alone may write it, as `toolchains.json`; where it cannot be read, or is odd,
they are read again). State: the per-process memo of each compiler's folders.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat

from warmcli import config, system_shadows
from warmcli.backends.toolchain import remembered
from warmcli.errors import ToolchainError
from warmcli.home import in_home, make_folder, private, write_private

_SEARCH = "cc -E -v includes"  # what `toolchains.json` remembers them under
FOLDER = "system-headers"  # in warm's home: the includes each system header reaches
MAX_FILE_BYTES = 1 << 20  # one larger than this was not written by warm
_UNSET = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH")


@functools.cache
def system_folders(cc: str, language: str = "c") -> tuple[str, ...]:
    """`cc`'s own `<...>` folders for `language` ("c", "c++"), in its order; () where it does
    not say."""
    # Asked, and remembered, under the variables that move cc's own folders as they key it
    # (`GCC_EXEC_PREFIX=/opt/gcc/lib/gcc/`: its `include`): else another's were kept.
    named = "".join(f"; {k}={v}" for k, v in config.compiler_programs().items())
    asked = _SEARCH if language == "c" else f"{_SEARCH} -x {language}"  # (C's: as before)
    search = functools.partial(_search_list, language=language)
    from warmcli.wrapper_script import script_digest  # (a probe's: imported with the toolchain)

    try:  # a wrapper script's asked in each process, as its version: what it runs may change
        if script_digest(cc):  # (`exec "$REAL_CC" "$@"`) while its own stamp does not
            said = search(asked, cc)
        else:
            said = remembered(asked + named, cc, os.stat(cc), search).version
    except (OSError, ToolchainError):
        return ()
    return tuple(said.split("\n")) if said else ()


def _search_list(name: str, cc: str, language: str = "c") -> str:
    """The folders `cc -E -v` lists for `<...>`, joined by line breaks; "" where it answers
    and lists none (remembered so: a compiler that never says is not asked again in every
    process, as it was); ToolchainError where it fails."""
    from warmcli.backends import processes  # on first use: a hot start finds them remembered

    unset = [w for name in _UNSET for w in ("-u", name)]  # (`env`: warm's own left as it is)
    command = ["env", *unset, cc, "-E", "-v", "-x", language, os.devnull]
    try:  # (what it prints kept whole: its search list may come late)
        out = processes.probe(command, 60)
    except OSError as exc:
        raise ToolchainError(f"{name}: {exc}") from exc
    if out.timed_out:
        raise ToolchainError(f"{name}: {cc} -E -v did not answer within 60 s")
    lines = out.err.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("#include <...>")), None)
    folders = []
    for line in lines[start + 1 :] if start is not None else []:
        if not line.startswith(" "):  # `End of search list.`
            break
        folder = line.strip().removesuffix(" (framework directory)")
        if folder and "\n" not in folder:
            folders.append(os.path.normpath(folder))
    if out.returncode != 0:
        raise ToolchainError(f"{name}: {cc} -E -v failed")
    return "\n".join(folders)


def _file(key: str) -> str:
    """The file in warm's home that remembers `key`'s entry."""
    digest = hashlib.sha256(key.encode(errors="surrogatepass")).hexdigest()[:32]
    return os.path.join(_folder(), f"{digest}.json")


@functools.cache
def _folder() -> str:
    """`system-headers/` in warm's home, named once per process (naming the user's cache
    directory costs ~35 µs a time)."""
    return in_home(FOLDER)


def recall(key: str) -> object:
    """The entry remembered for `key` (as JSON read it: `system_shadows` checks it); None
    where none is, or the file is no regular file this user alone may write, or too large."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(_file(key), flags)  # (a FIFO opens at once, and is no regular file)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and private(st) and st.st_size <= MAX_FILE_BYTES):
            return None
        return json.loads(os.read(fd, st.st_size + 1).decode())
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)


def keep(key: str, entry: system_shadows.Entry) -> None:
    """Remember `entry` for `key` (0600, written whole); a home that cannot be written only
    costs the next process the reads."""
    path = _file(key)
    with contextlib.suppress(OSError, ValueError):
        make_folder(os.path.dirname(path))
        if os.access(os.path.dirname(path), os.W_OK):  # (a read-only home: no writer imported)
            write_private(os.path.dirname(path), path, json.dumps(entry).encode())


system_shadows.store[:] = [(recall, keep)]  # (imported where a key first asks for the folders)
