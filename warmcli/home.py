"""warm's home directory: where what outlives one process but is not a bundle is kept.

`WARM_HOME` if it is set, else the user cache directory (`~/.cache/warm` on Linux; with no
home to name, no passwd entry for the uid and `HOME` unset or `/`, as a container runtime sets
it for a random uid, blank or relative, `warm-<uid>` in `TMPDIR`).
It holds the default bundle, the remembered compiler version lines
(`toolchains.json`), the includes each system header reaches (`system-headers/`) and the host
library cache (`host-libraries/`). Everything in it
can be deleted at any time: it is rebuilt on demand. This module names those paths
(as `Path`s, or as strings, `home_dir` and `in_home`, spelled as pathlib spells them by
`path_str`, without importing it: what a serving process reads) and holds the rule for
what in them warm trusts: a file this user owns and nobody else may write (`private`),
written whole, 0600, through a unique temporary file (`write_private`; read and rewritten by
one process, and one of its threads, at a time where that matters, `folder_held`), or new files
written all or none (`write_new`: a key pair); the default
bundle, loaded unasked, only where no other user may write it (`others_may_write`), so a
folder warm makes (`make_folder`) is never writable by every user, whatever the umask; for warm's
commands it refuses a `WARM_HOME` that is no directory, or lies below a file. It never
reads them; its only state is platformdirs' answer, once per value of what it reads, a uid's
passwd home, and the lock `folder_held`'s threads take in turn.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import threading

from warmcli import config
from warmcli.errors import ConfigError
from warmcli.forking import new_rlock

TYPE_CHECKING = False  # `typing.TYPE_CHECKING`, without importing typing here
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import TypeGuard

TMP_SUFFIX = ".tmp"  # `write_private`'s temporary files (a crashed writer's are pruned)
HELD_SECONDS = 2.0  # `folder_held` waits at most this long for another holder (warm: ms)
_WAITED_OUT: set[str] = set()  # the folders `folder_held` waited `HELD_SECONDS` for: not again


class _Turn:
    """This process's threads take `folder_held` one at a time, waiting on its `_lock` (a
    `flock` another of them held was polled every 2 ms: a first run's `as` and `ld` lines,
    remembered at once, one waited 2 ms or more of its probe); a forked child's is new."""

    _lock: threading.RLock


_Turn._lock = new_rlock(_Turn)


def warm_home() -> Path:
    """`WARM_HOME`, else the user cache directory."""
    from pathlib import Path  # on first use: a serving process names its home by `home_dir`

    return Path(home_dir())


def home_dir() -> str:
    """`warm_home()` as a string, without importing pathlib (what a serving process reads)."""
    home = config.home()
    return home if home else _user_cache(config.xdg_cache_home())


def in_home(name: str) -> str:
    """The path of `name` in warm's home, spelled as `str(warm_home() / name)` spells it."""
    return path_str(os.path.join(home_dir(), name))


def path_str(path: str | os.PathLike[str]) -> str:
    """`str(Path(path))`: pathlib is imported only for a path it would spell otherwise than
    it is given (with `//`, a `.` part or a trailing `/`), never for a plain one."""
    text = os.fspath(path)
    if text and "//" not in text and "/." not in text and text[-1] != "/" and text[:2] != "./":
        return text
    from pathlib import Path

    return str(Path(text))


def default_bundle_path(*, strict: bool = False) -> Path:
    """The bundle `warm run` writes without `--bundle`: `bundle.warm` in warm's home.
    `strict` (warm's commands) refuses a `WARM_HOME` that is there and no directory, or
    that lies below a file: what they keep in it would fail with a bare "Not a directory";
    and a default bundle others may write (`others_may_write`): its kernels would be loaded;
    and a uid with no home whose `warm-<uid>` in `TMPDIR` was not taken (`no_home_why`)."""
    if strict:
        refuse_no_directory()
        if why := no_home_why():  # else: "cannot make warm's home /dev/null/warm"
            raise ConfigError(
                f"warm has no home for the default bundle: {why}: set WARM_HOME to a folder "
                "of your own, or name a bundle with --bundle"
            )
    path = warm_home() / "bundle.warm"
    # (a link to no file too: warm would make the file it names, wherever that is)
    why = others_may_write(str(path)) if strict and os.path.lexists(path) else ""
    if why:  # its kernels would be loaded: native code another user may have put there
        raise ConfigError(
            f"the default bundle {path}: others may write it ({why}): name a bundle with "
            "--bundle, or a WARM_HOME of your own"
        )
    return path


def refuse_no_directory() -> None:
    """Raise `ConfigError` naming a `WARM_HOME` that is there and no directory, or that
    lies below a file (what warm's commands keep in it would fail with a bare "Not a
    directory"); a home that is not there yet is made when first written."""
    if not config.home():
        return
    home = warm_home()
    if home.exists() and not home.is_dir():
        raise ConfigError(f"WARM_HOME={home} is not a directory: name a directory, or unset it")
    above = next((p for p in home.parents if p.exists()), None)  # the nearest that is there
    if above is not None and not above.is_dir():
        raise ConfigError(
            f"WARM_HOME={home} is below {above}, which is not a directory: name a "
            "directory, or unset it"
        )


def _user_cache(xdg_cache_home: str | None) -> str:
    """The user cache directory's `warm`, as platformdirs names it: on Linux found here
    (`_plain_user_cache`), since importing platformdirs costs a serving process several ms;
    anywhere else platformdirs' own answer, once per value of the variables it reads."""
    home = config.user_home()
    no_home = home == "/" or not _absolute(home)  # a container runtime's for a uid it knows not
    if no_home and not _absolute(xdg_cache_home) and _no_passwd_entry():
        return no_home_cache()
    plain = _plain_user_cache(xdg_cache_home, home)
    found = plain if plain is not None else _platformdirs_cache(xdg_cache_home, home)
    return found if found is not None else no_home_cache()  # (made and checked at each call)


def _absolute(path: str | None) -> TypeGuard[str]:
    """Whether `path` is set and absolute (a relative or blank one names no folder)."""
    return path is not None and path.startswith("/")


def _no_passwd_entry() -> bool:
    """Whether this uid has no passwd entry (a container run under a random uid, whose
    runtime sets `HOME=/`, which a read-only root leaves unwritable); False where there are
    no uids. Asked of the uid now: a server that drops root for another uid after warm
    asked (a forked worker's `setuid`) is answered for the uid it runs as."""
    return hasattr(os, "getuid") and _passwd_home_of(os.getuid()) is None


@functools.cache
def _passwd_home_of(uid: int) -> str | None:
    """The home `uid`'s passwd entry names; None where it has no entry."""
    import pwd  # imported on first use: only a process whose HOME is /, unset or relative asks

    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None


def _plain_user_cache(xdg_cache_home: str | None, home: str | None) -> str | None:
    """`$XDG_CACHE_HOME/warm`, else `$HOME/.cache/warm`, on Linux (no Android app), as the
    XDG spec and platformdirs' latest name it, whatever platformdirs is installed: a relative
    or blank `XDG_CACHE_HOME` is no path, ignored; a `HOME` unset, blank or relative is the
    passwd entry's (platformdirs 4.0, which warm allows, took each as it was: `/tmp/warm-<uid>`
    beside a good `HOME`, or `/.cache/warm`, stop 59); None for anything else."""
    if sys.platform != "linux" or hasattr(sys, "getandroidapilevel") or config.android_app():
        return None
    if _absolute(xdg_cache_home):
        return os.path.join(xdg_cache_home, "warm")
    if not _absolute(home):  # unset, blank or relative: the passwd entry's, where it names one
        home = _passwd_home_of(os.getuid()) if hasattr(os, "getuid") else None
        if not _absolute(home):
            return None  # platformdirs' answer: none, so `no_home_cache`
    return f"{home.rstrip('/')}/.cache/warm"  # as `os.path.expanduser("~/.cache")` joins it


@functools.cache
def _platformdirs_cache(xdg_cache_home: str | None, home: str | None) -> str | None:
    """platformdirs' answer, once per value of the variables it reads (it takes ~0.1 ms);
    None where it has none (`HOME` unset and no passwd entry for this uid, as a container
    run under a random uid: it raises, or an older one answers `~/.cache/warm` relative to
    the working folder): then warm's home is `no_home_cache`'s."""
    from platformdirs import user_cache_dir  # imported on first use (it costs a few ms)

    try:
        answer = user_cache_dir("warm")
    except (RuntimeError, KeyError, OSError):  # "could not determine the home directory"
        return None
    return answer if os.path.isabs(answer) else None


UNUSABLE_HOME = "/dev/null/warm"  # no folder can be made there: every cache runs without


def no_home_cache() -> str:
    """warm's home where the user has none: `warm-<uid>` in `TMPDIR` (set and absolute,
    else `/tmp`), what a read-only container's root leaves writable. That folder is shared
    with every user, so it is made here, 0700 whatever the umask, before it is named, and
    then looked at without following a link (as `XDG_RUNTIME_DIR`'s rule): one that is not
    this user's own folder, writable by nobody else, in a folder where nobody else can
    rename it (another's, writable by others, a link, no folder, one in a folder writable
    by all without the sticky bit) is not taken: `UNUSABLE_HOME` instead, where nothing is
    kept (host libraries go to a temporary folder of the process, as where any home cannot
    be written): `no_home_why` says why. Made and looked at again at each call: once
    this user's folder is in a sticky folder, no other user can replace it. What warm
    believes inside is checked as in any home (`private`)."""
    return _no_home_cache()[0]


def _no_home_cache() -> tuple[str, str]:
    """`no_home_cache`'s answer, and why it is `UNUSABLE_HOME` ("" where it is not)."""
    import stat

    uid = os.getuid() if hasattr(os, "getuid") else None
    given = config.tmpdir()
    base = given if given and os.path.isabs(given) else "/tmp"
    path = os.path.join(base, f"warm-{'user' if uid is None else uid}")
    shown = f"TMPDIR={base}" if base == given else base
    try:
        above = os.stat(base)  # (a link to it is the user's own choice)
        if uid is not None and (
            above.st_uid not in (uid, 0) or above.st_mode & 0o1002 == 0o002
        ):  # another user could rename this user's folder away and put one of theirs there
            return (
                UNUSABLE_HOME,
                f"{shown} is another user's, or writable by all with no sticky bit",
            )
        with contextlib.suppress(FileExistsError):  # another's, or this user's from before
            os.mkdir(path, 0o700)
        st = os.lstat(path)  # never followed: a link another user planted is not taken
    except OSError as exc:
        return UNUSABLE_HOME, f"{path} cannot be made ({exc.strerror})"
    if uid is None:
        return path, ""
    if stat.S_ISLNK(st.st_mode):
        from warmcli.printable import printable  # (a link another user named: shown safely)

        with contextlib.suppress(OSError):
            return UNUSABLE_HOME, f"{path} is a symbolic link (to {printable(os.readlink(path))})"
    if not stat.S_ISDIR(st.st_mode):
        return UNUSABLE_HOME, f"{path} is there and no folder"
    if st.st_uid != uid:
        return UNUSABLE_HOME, f"{path} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return UNUSABLE_HOME, f"{path} is writable by others than you (mode {st.st_mode & 0o777:o})"
    return path, ""


def no_home_why() -> str:
    """Why warm has no home ("" where it has one, or `WARM_HOME` names one): a uid with no
    passwd entry and no `HOME`, whose `warm-<uid>` in `TMPDIR` was not taken."""
    if config.home() or home_dir() != UNUSABLE_HOME:
        return ""
    why = _no_home_cache()[1]  # (looked at again: no state kept between calls)
    return (
        f"no HOME for uid {os.getuid()} (unset or /, and no passwd entry), and {why}" if why else ""
    )


def private(st: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else: what warm loads or believes from
    its home (native code, version lines) must be so."""
    owner = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return owner and not st.st_mode & 0o022


def others_may_write(path: str) -> str:
    """Why a user other than this one (or root) could write the file at `path`, or put
    another in its place ("" where none could): it or its folder (the link's and the
    file's) is another user's, the file is writable by all, or a folder is writable by
    all without the sticky bit. Group write is allowed (a user's own group, umask 002)."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is None:
        return ""
    folders = {os.path.dirname(os.path.abspath(path)), os.path.dirname(os.path.realpath(path))}
    for each, is_file in ((path, True), *((folder, False) for folder in sorted(folders))):
        try:
            st = os.stat(each)
        except OSError:
            continue  # gone meanwhile: its open says so
        if st.st_uid not in (uid, 0):
            return f"{each} belongs to another user (uid {st.st_uid})"
        if st.st_mode & 0o002 and (is_file or not st.st_mode & 0o1000):
            return f"{each} is writable by every user"
    return ""


def make_folder(path: str | os.PathLike[str]) -> None:
    """Make folder `path` and the folders above it that are missing, none writable by
    every user whatever the umask (under umask 0 warm's home would be, and its default
    bundle refused: `others_may_write`); group write is left to the umask. An existing
    file in the way raises `FileExistsError`, as `mkdir(parents=True, exist_ok=True)`."""
    missing = []
    folder = os.path.abspath(path)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    for each in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
            os.mkdir(each, 0o775)
    if not os.path.isdir(path):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))


def write_private(directory: str, path: str, data: bytes) -> None:
    """Write `data` to `path` atomically: a reader sees no file or the whole file.

    The temporary file is unique (`mkstemp`: two writers of one file, in threads or in
    containers that share a home and a PID, never write into the same file) and 0600;
    `os.replace` replaces a link at `path`, never the file it points to.
    """
    import tempfile  # imported on first use: a hot start writes nothing

    fd, tmp = tempfile.mkstemp(dir=directory, suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def folder_held(folder: str) -> Iterator[None]:
    """`folder` locked (an exclusive `flock` of it) while the block runs: what reads a file of
    it, then writes it whole again (`toolchain._remember`), does so one process at a time (two
    at once each wrote what it had read: one's part lost). Where it cannot be locked (no
    `fcntl`, a file system without `flock`, no folder), or is held past `HELD_SECONDS` (by
    another user who may read the folder: never waited on for good), the block runs unlocked,
    as before; and a folder held past that once is not waited for again by this process (a
    start keeping each of its compiler's lines waited that long for every one: 10 s)."""
    import time

    turn, taken, fd = _Turn._lock, False, None
    try:  # another thread's hold waited out first (`HELD_SECONDS` at most), without a poll
        taken = turn.acquire(timeout=0.0 if folder in _WAITED_OUT else HELD_SECONDS)
        try:
            import fcntl  # on first use: a hot start writes nothing

            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (ImportError, OSError):
            fd = None
        deadline = time.monotonic() + (0.0 if folder in _WAITED_OUT else HELD_SECONDS)
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    _WAITED_OUT.add(folder)  # (tried once from now on)
                    break
                time.sleep(0.002)
            except OSError:
                break
        yield
    finally:
        if fd is not None:  # (let go for every copy of the descriptor a fork may hold)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        if taken:
            turn.release()


def write_new(files: list[tuple[Path, bytes, int]]) -> None:
    """Write each (path, data, mode) as a new file (`O_EXCL`: `FileExistsError` where one is
    there), all or none: where one cannot be written whole (a full disk), or an interrupt
    lands between them, those this call made are removed before its `OSError` (its
    `filename` that file's) or the interrupt is raised."""
    made: list[Path] = []
    path: Path | None = None
    try:
        for path, data, mode in files:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            made.append(path)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
    except BaseException as exc:  # a full disk, or Ctrl-C between the two: none is kept
        for done in made:
            with contextlib.suppress(OSError):
                os.unlink(done)
        if isinstance(exc, OSError):
            exc.filename = exc.filename or (None if path is None else os.fspath(path))
        raise
