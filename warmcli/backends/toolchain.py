"""Toolchain identity: which compiler, at which version, built a binary.

A `Toolchain` is a compiler's path (as found on PATH) and the first line of its `--version`, as
the binary the path resolves to prints it (`cc`, `gcc` and `gcc-12`, one binary, are one
toolchain); its `identity` is part of every kernel key, so upgrading the compiler makes every
kernel a different kernel. Probing runs the compiler once per path per process (memoised), and
once per compiler binary across processes: the version line is remembered in `toolchains.json`
(in warm's home, by a process that reads its children's exit statuses, not one ignoring SIGCHLD;
believed only when this user alone may write it, as the host library cache, and as warm writes
it: at most 64 lines, none listing 256 folders or with a NUL, but between a cc identity's
places; one over 1,024 characters by its digest, a longer one remembered not believed) by the
binary's path, size, inode, mtime and ctime, named as the binary it resolved to then, so a hot
start keys its kernels without starting a compiler nor walking links again (a `stat` per PATH
entry, its identity one read of it).
A C compiler that is a script (a wrapper, which may add flags) has its text's digest in its
version too, with the values of the environment variables it names (`$CFLAGS`), its version line
read in each process, never remembered (what it runs or reads from the environment may change
while the script does not). `remembered` does the same for a compiler that is a library (NVRTC):
read once per library file on a machine (`is_remembered` says whether a process would find it).
The marks an identity carries are here (`RECIPE_MARK`, `WRAPPER_MARK`, and `NATIVE` before the
CPU a kernel tuned for its builder is keyed with: `warmcli.backends.native`). State: the
per-process memos of each path's toolchain, the lines remembered in warm's home. Nothing here
compiles and nothing prints.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.errors import ToolchainError
from warmcli.home import folder_held, in_home, make_folder, private, warm_home, write_private
from warmcli.printable import Pattern
from warmcli.records import Record
from warmcli.stamped import last_change

if TYPE_CHECKING:
    from pathlib import Path

MAX_REMEMBERED = 64  # version lines kept across processes (one per compiler binary)
VERSIONS_FILE = "toolchains.json"  # in warm's home: the remembered version lines
MAX_FILE_BYTES = 1 << 20  # a `toolchains.json` larger than this was not written by warm
MAX_FOLDERS = 256  # a remembered list of more folders (cc says ~10) was forged: read again
PARTED, MAX_PARTS = "cc identity|", 4096  # `host.identity`'s: NUL-ended parts, at most so many
RACY_SECONDS = 2.0
VERSION_TIMEOUT = 60.0  # seconds a compiler may take to answer `--version`
WRAPPER_MARK = " (wrapper script sha256:"  # in the version of a C compiler that is a script
# How warm builds a kernel (the flags it adds, how it writes a group's translation unit and
# isolates each kernel): raised where that changes what a build computes. A toolchain's
# identity names it from 2 on (`RECIPE_MARK`), so a build keys apart and serving never
# serves one of another recipe (`recipe_of`; none named: 1, a name no warm writes: 0).
# 2: each C kernel's section saves and restores the macros it names (`#pragma push_macro`),
# a CUDA kernel colliding with an option's macro is built alone (a neighbour's `#undef`
# took a compiler-given macro from the kernels after it: recipe 1's builds computed -1).
# 3: a CUDA kernel with a device variable of C linkage no `#define` renames (`extern "C" {
# __device__ int counter; }`) is built alone (`backends.c_linkage`): in a shared cubin two
# kernels' `counter` were one object, so a hit computed what a cold start did not.
# 4: a C kernel with code the loader runs (`__attribute__((constructor))`, a pointer put in
# `.init_array` by `__attribute__((section(...)))`, from a function's body too) is built alone:
# in a shared binary a hit ran it when a neighbour loaded, ahead of the kernels launched
# before it (a constructor's `srand(12345)` reseeded their `rand()`: a cold start's differed);
# so is one whose options (or its C compiler's, a wrapper script's) read a header first
# (`-include state.h`) or set a macro its source
# uses at file scope (`-DDECL=static int counter;`, through a macro of its own too, or in a
# struct's braces), or whose own macro declares through another: they shared one `counter`.
BUILD_RECIPE = 4
RECIPE_MARK = " [warm build recipe "
NATIVE = " +native "  # between an identity and the CPU a kernel tuned for it is keyed for
REMEMBERED_FORM = 2  # in a remembered line's stamp: 2, a C wrapper script's digest too


class Toolchain(Record):
    """A compiler binary and its version line."""

    name: str
    path: str
    version: str

    @property
    def identity(self) -> str:
        """What keys a kernel: the compiler and its version, not where it is installed (a CI
        venv's and a GPU machine's toolkit build alike); the path is kept beside fingerprints."""
        recipe = f"{RECIPE_MARK}{BUILD_RECIPE}]" if BUILD_RECIPE != 1 else ""
        version, native, cpu = self.version.partition(NATIVE)  # (a CPU it tunes for: last)
        return f"{self.name}:{version}{recipe}{native}{cpu}"

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "path": self.path, "version": self.version}


@functools.cache
def probe(name: str, path: str) -> Toolchain:
    """Find `path` (a name on PATH, or a file) and read its version line: a compiler launcher's
    (`/usr/lib/ccache/cc`) that of the compiler it runs, the next on PATH (`past_launchers`):
    its own stamp would keep a line of one upgraded behind it, and key the same one apart."""
    found = _find(path)
    if found is None:
        raise ToolchainError(f"{name}: compiler {path!r} not found")
    where, st = found
    if resolved_name(where) in LAUNCHERS:  # (once a process per path)
        runs = past_launchers(os.path.basename(where), config.path())
        if runs is not None and (real := _find(runs)) is not None:
            where, st = real
    return remembered(name, where, st, _version_line, longest=LINE_CHARS)


# Compiler launchers that, started by a compiler's name, run the next of that name on `PATH`.
LAUNCHERS = frozenset({"ccache", "sccache", "buildcache", "distcc", "icecc"})


def resolved_name(where: str) -> str:
    """`os.path.basename(os.path.realpath(where))`, read from the links alone (`/usr/bin/cc`,
    `/etc/alternatives/cc`, `/usr/bin/gcc`, `gcc-12`: four `readlink`s, where `realpath` asks
    about every folder of the way): a link's folders lead where they lead, its last name is
    the file's."""
    for _ in range(40):  # (the kernel's limit on links: past it, as `realpath` answers)
        try:
            target = os.readlink(where)
        except OSError as exc:
            if exc.errno != errno.EINVAL or os.path.basename(where) in ("", ".", ".."):
                break  # (none there, a folder's name: as `realpath` answers)
            return os.path.basename(where)  # no link: the file's own name
        where = target if os.path.isabs(target) else f"{os.path.dirname(where)}/{target}"
    return os.path.basename(os.path.realpath(where))


def past_launchers(name: str, search: str) -> str | None:
    """The first `name` on `search` that is no launcher (`LAUNCHERS`, by the file it
    resolves to), as a launcher found first finds it; None where there is none."""
    import shutil

    from warmcli.scratch import seen_from_scratch  # (a launcher found anew: no hot process's)

    for folder in dict.fromkeys(search.split(os.pathsep)):  # (as the launcher, in a scratch one)
        found = (at := seen_from_scratch(folder)) and shutil.which(name, path=at)
        if found and os.path.basename(os.path.realpath(found)) not in LAUNCHERS:
            return found
    return None


def remembered(
    name: str,
    where: str,
    st: os.stat_result,
    read_version: Callable[[str, str], str],
    versions: dict[str, str] | None = None,
    longest: int | None = None,
) -> Toolchain:
    """The toolchain of the file `where`: its version line remembered by the file's stamp (in
    `versions`, where the caller just read them; not believed where warm would not write it,
    `_written`), else `read_version(name, where)` (raises ToolchainError), kept if the stamp is
    the same after it ran (no binary swapped in meanwhile), but not for a wrapper script (what
    it runs may change) nor where this process ignores SIGCHLD (a failed probe read as exit 0)."""
    stamp = _stamp(name, where, st)
    known = (_read_versions() if versions is None else versions).get(stamp) if stamp else None
    if known is not None and (longest is None or _written(known, where, longest)):
        return Toolchain(name=name, path=where, version=_as_binary(known, where))
    from warmcli.backends.processes import exit_status_lost  # (as a probe: not when served)

    version = _as_binary(read_version(name, where), where)
    kept = stamp and WRAPPER_MARK not in version and not exit_status_lost()
    if kept and _stamp_now(name, where) == stamp:  # else swapped while it ran: not kept
        _remember(stamp, version)
    return Toolchain(name=name, path=where, version=version)


def _written(known: str, where: str, longest: int) -> bool:
    """Whether warm writes `known`: a line over `longest` characters by its digest, one whole
    (stop 46's in a shared home, or hand-edited) read again; its first word maybe `where`'s."""
    first = known.partition(" ")[0]
    return len(known) - len(first) + min(len(first), len(os.path.basename(where))) <= longest


def is_remembered(name: str, where: str) -> bool:
    """Whether the version line of the file `where` is remembered for its present stamp."""
    stamp = _stamp_now(name, where)
    return stamp is not None and stamp in _read_versions()


def _stamp_now(name: str, where: str) -> str | None:
    """The present stamp of the file `where` (None where it has none or is gone)."""
    try:
        return _stamp(name, where, os.stat(where))
    except OSError:
        return None


def _version_line(name: str, where: str) -> str:
    """A compiler's `--version` line (a C compiler script's with its digest, `_wrapper`), one
    over `ENVIRONMENT_CHARS` by its length and digest (a bundle's toolchain holds 4,096)."""
    from warmcli.backends.version_line import version_line  # run on a miss only

    script = "" if name == "nvcc" else _wrapper(where)  # read first: the file that answers
    return environment_named(version_line(name, where, VERSION_TIMEOUT)) + script


def recipe_of(identity: str) -> int:
    """The build recipe a toolchain identity names (`BUILD_RECIPE`): 1 where it names none,
    0 where what it names is no recipe warm writes (a number of at most 9 ASCII digits). The
    CPU a kernel tuned for it is keyed with comes after it (`warmcli.backends.native`)."""
    identity = identity.partition(NATIVE)[0]
    at = identity.rfind(RECIPE_MARK)
    if at < 0:
        return 1
    named = identity[at + len(RECIPE_MARK) :]
    digits = named[:-1]
    ok = named.endswith("]") and digits.isascii() and digits.isdigit() and len(digits) <= 9
    return int(digits) if ok else 0


def wrapper_named(identity: str) -> str:
    """The wrapper scripts a toolchain's identity (or version) names, as `_wrapper` wrote
    them (`wrapper script sha256:…`; a program cc runs by its name, `as wrapper script …`), ""
    for none."""
    named = []
    for n, part in enumerate(identity.split("; ")):
        at = part.find(WRAPPER_MARK) + len(WRAPPER_MARK)
        if at >= len(WRAPPER_MARK):
            who = f"{part.partition(' ')[0]} " if n else ""
            named.append(f"{who}wrapper script sha256:{part[at : at + 16]}")
    return ", ".join(named)


def _wrapper(where: str) -> str:
    """For a C compiler that is a script (`#!`: a wrapper, which may add flags or pick another
    compiler by what it holds), the digest of its text and of the values of the environment
    variables it names (`exec gcc $CFLAGS "$@"`: a flag from the environment builds another
    kernel), to be told from the compiler it runs; "" for a binary. Not for nvcc: toolkits and
    packages ship it as a wrapper script that only finds the real one (its version line is the
    build's), and a bundle built by one must serve where the toolkit's own runs."""
    from warmcli.wrapper_script import script_digest  # a probe's: a served toolchain is read

    digest = script_digest(where)
    return f"{WRAPPER_MARK}{digest})" if digest else ""


def script_words(path: str) -> list[str]:
    """The words of the C compiler `path` where it is a script (a wrapper: `exec cc -include
    h.h "$@"`) and of the values of the variables it names (`$CFLAGS`), as options it may
    add (`warmcli.backends.sharing` keeps apart what they could reach); [] for a binary."""
    text, named = _script(path, config.path())
    values = config.named_variables(named)
    return _WORDS.findall(" ".join([text, *values.values()])) if text else []


@functools.lru_cache(maxsize=8)
def _script(path: str, search: str) -> tuple[str, tuple[str, ...]]:
    """The text of the script `path` names (on `search`, PATH) and the variables it names,
    read once per process as its identity is (`probe`); ("", ()) for a binary or none."""
    from warmcli.wrapper_script import MAX_WRAPPER, NAMED, UNBUILT

    found = _find(path)
    if found is None:
        return "", ()
    where = found[0]
    try:
        with open(where, "rb") as script:
            if script.read(2) != b"#!":
                return "", ()
            text = script.read(MAX_WRAPPER)
    except OSError:
        return "", ()
    named = sorted({b"".join(n).decode() for n in NAMED.findall(text)} - UNBUILT)
    return text.decode(errors="replace"), tuple(named)


_WORDS = Pattern(r"[^\s'\"]+")  # a script's words, as its quotes would split them, near enough


def _as_binary(version: str, where: str) -> str:
    """The version line as the binary `where` resolves to would print it.
    GCC starts its line with the name it was started by (`cc (Debian 12.2.0) 12.2.0`,
    `gcc (Debian 12.2.0) 12.2.0`), so `cc`, `gcc` and `gcc-12`, one binary, would be
    three toolchains; the leading name is replaced by the resolved binary's."""
    invoked = os.path.basename(where)
    first, sep, rest = version.partition(" ")
    if first != invoked:  # named otherwise already (as remembered: resolved when it was)
        return version
    try:  # a file that is no link resolves to its own name, whatever links its folders are
        if not stat.S_ISLNK(os.lstat(where).st_mode):
            return version
    except OSError:
        pass
    return f"{resolved_name(where)}{sep}{rest}"


def versions_file() -> Path:
    """Where version lines are remembered: `WARM_HOME`, else the user cache directory."""
    return warm_home() / VERSIONS_FILE


def _find(path: str) -> tuple[str, os.stat_result] | None:
    """The executable file `path` names (searched on PATH if it has no separator) and its
    stat, following symbolic links: one `access` per PATH entry, as `shutil.which` does."""
    if os.sep in path:
        places = iter((path,))
    else:
        value = config.path()
        if not value:
            return None  # an empty PATH searches nowhere (not the working directory)
        places = (_joined(d, path) for d in dict.fromkeys(value.split(os.pathsep)))
    access, executable = os.access, os.X_OK
    for place in places:
        if not access(place, executable):  # no exception raised per PATH entry that lacks it
            continue
        try:
            st = os.stat(place)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            return os.path.abspath(place), st  # compilers run in scratch directories
    return None


def _joined(directory: str, name: str) -> str:
    """`os.path.join(directory or os.curdir, name)` for a `name` with no separator, in one
    expression (a hot start joins one per PATH entry)."""
    directory = directory or os.curdir
    return f"{directory}{os.sep}{name}" if directory[-1] != os.sep else directory + name


def _stamp(name: str, path: str, st: os.stat_result) -> str | None:
    """The compiler binary's identity on disk: path, size, device, inode, mtime and ctime
    of the file it resolves to. Any rewrite, replacement or `touch` of the binary changes it
    (ctime cannot be set back), and so does a symbolic link repointed at another compiler.
    A file changed (`last_change`) in the last `RACY_SECONDS` has none: the clock's coarse
    ticks could hide a second rewrite (git's "racily clean" entries)."""
    now = time.time_ns()
    if now - last_change(st.st_mtime_ns, st.st_ctime_ns, now) < RACY_SECONDS * 1e9:
        return None
    ident = f"{st.st_size}|{st.st_dev}|{st.st_ino}|{st.st_mtime_ns}|{st.st_ctime_ns}"
    return f"{name}|{path}|{ident}|{REMEMBERED_FORM}"


def _read_versions() -> dict[str, str]:
    """The remembered version lines; none unless the file is this user's alone, as the
    host library cache requires (a version line decides which kernels a bundle serves)."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(in_home(VERSIONS_FILE), flags)  # a FIFO opens at once (and is no regular file)
    except OSError:
        return {}
    try:  # one read of the file as it is (no buffered reader: it is read whole)
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and private(st) and st.st_size <= MAX_FILE_BYTES):
            return {}
        # Its size (no larger buffer made), as UTF-8 text, as warm writes it (no encoding
        # sniffed: `json.loads` of bytes costs a hot start ~10 µs more).
        data = json.loads(os.read(fd, st.st_size + 1).decode())
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)
    if not isinstance(data, dict) or len(data) > MAX_REMEMBERED:  # (more: not warm's, nor read)
        return {}
    return {k: v for k, v in data.items() if type(k) is str and type(v) is str and _said(k, v)}


def _said(key: str, value: str) -> bool:  # else read again, remembered over (a NUL raised
    if key.startswith(PARTED):  # ValueError), but in an identity's parts, each a path or stamp
        return value.count("\0") <= MAX_PARTS  # (more: forged; cc's are ~60)
    return "\0" not in value and value.count("\n") + value.count(os.pathsep) < MAX_FOLDERS


def _remember(stamp: str, version: str) -> None:
    """Keep a version line for the next process (a 0600 file; one not written costs a run of
    `--version`), in the order remembered, the oldest dropped past `MAX_REMEMBERED` (in key
    order, binaries long gone outlived the compilers in use, which evicted each other)."""
    path = versions_file()
    with contextlib.suppress(OSError):
        make_folder(path.parent)
        with folder_held(str(path.parent)):  # (read, then written, by one process at a time)
            versions = {**_read_versions(), stamp: version}
            if len(versions) > MAX_REMEMBERED:
                versions = dict(list(versions.items())[-MAX_REMEMBERED:])
            write_private(str(path.parent), str(path), json.dumps(versions, indent=0).encode())


# A variable's value (`COMPILER_PATH`) or version line longer than this is named by its length
# and digest: a bundle's toolchain holds 4,096 characters (`MAX_NAME_CHARS`), all in one.
ENVIRONMENT_CHARS = 1024
LINE_CHARS = ENVIRONMENT_CHARS  # a version line as remembered, its first word aside (`_written`)


def environment_named(value: str) -> str:
    """`value` as a compiler's identity names it: itself, or over `ENVIRONMENT_CHARS`, its
    length and digest (two values alike name alike, two that differ differ)."""
    if len(value) <= ENVIRONMENT_CHARS:
        return value
    digest = hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]
    return f"<{len(value)} characters, sha256 {digest}>"
