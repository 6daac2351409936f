"""Where a command's bundle is: the one named (`--bundle`, an argument, `WARM_BUNDLE`), else
the default one; a path to write checked before anything is written (`new_file_path`), one to
read fetched first where it is a URL (`readable_bundle`), both made absolute before a workload's
import may change the working folder (`pinned`: the caller's then, absolute). A name warm refuses
is one line and exit 2 (`fail`). Split from `warmcli.cli.common`, which every command shares."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from warmcli import config
from warmcli.bundle.location import is_url, shown
from warmcli.cli.common import err, fail, guarded
from warmcli.home import default_bundle_path, make_folder, refuse_no_directory

Loaded = TypeVar("Loaded")
NAME_BYTES = 255  # the longest file name Linux and macOS file systems take (NAME_MAX)
BESIDE_BYTES = 21  # what a writer adds to a bundle's name beside it: `.NAME.PID.tmp-journal`
MERGE_BESIDE_BYTES = 36  # a merge's: its `.NAME.PID.merge`'s `..NAME.PID.merge.PID.tmp-journal`


def default_bundle(given: str | None = None) -> Path:
    """A local bundle to write: `given`, else `WARM_BUNDLE`, else `WARM_HOME/bundle.warm`
    (else the user cache directory's); a URL, read-only, is one line and exit 2."""
    named = _named(given)
    if named and is_url(named):
        fail(
            f"{'' if given else 'WARM_BUNDLE='}{shown(named)} is a URL, which is read-only: "
            "give a local bundle (warm pull fetches one, warm push publishes one)"
        )
    return Path(named) if named else guarded(lambda: default_bundle_path(strict=True))


def _named(given: str | None) -> str | None:
    """`given` (`--bundle`, a command's argument), else `WARM_BUNDLE`. An empty name (an
    unset variable in a script) is refused: it never stands for the default bundle."""
    if given is not None and not given.strip():
        fail("the bundle's name is empty: give a bundle's path, or leave it out for the default")
    return given or config.bundle()


def bundle_to_write(named: str | None) -> Path:
    """The bundle a command writes: `named` (`--bundle`), else `default_bundle()`. For a
    path the user gave, warm creates at most its last directory: a mistyped path fails
    rather than growing a tree of directories. warm's home, for the default bundle, is made
    here: one that cannot be (a read-only HOME) is one line saying what to do."""
    given = default_bundle(named)
    if named is None and not config.bundle():
        try:
            make_folder(given.parent)
        except OSError as exc:
            fail(
                f"cannot make warm's home {given.parent} for the default bundle "
                f"({exc.strerror}): set WARM_HOME, or name the bundle with --bundle"
            )
    if named is None:
        refuse_folder_name(str(config.bundle() or ""), "WARM_BUNDLE=")
        refuse_long_name(given, "WARM_BUNDLE=" if config.bundle() else "", new_only=True)
    return given if named is None else new_file_path(named, new_only=True)


def refuse_long_name(
    given: Path, shown: str = "", *, new_only: bool = False, beside: int = BESIDE_BYTES
) -> None:
    """One line and exit 2 where a folder's name in `given`'s path is longer than a file
    system takes (`NAME_BYTES`), or its file's name leaves no room for what a writer names
    beside it (`beside` more at most, a 7-digit pid's; a merge's: `MERGE_BESIDE_BYTES`),
    which each look at it, or the writer's temporary file, says as Python's `[Errno 36] File
    name too long: '...'`;
    `new_only` (a run's): its file's name only where none is there yet (a run writes an
    existing bundle in place, with no temporary file beside it)."""
    *folders, name = [len(os.fsencode(part)) for part in given.parts] or [0]
    if any(size > NAME_BYTES for size in folders):
        fail(f"{shown}{given}: a folder's name in it is over {NAME_BYTES} bytes: name the file")
    if name > NAME_BYTES - beside and not (new_only and os.path.lexists(given)):
        fail(
            f"{shown}{given}: its file name is {name} bytes, too long for the files a writer "
            f"makes beside it ({NAME_BYTES - beside} at most): name the file"
        )


def refuse_folder_name(named: str, shown: str = "", to: str = "write") -> str:
    """`named`; a bundle file to write or read named as a folder (`served.folder_end`), or
    as `-` (no bundle is streamed; one to read may be a file named `-`), or with a `~` a shell
    would have expanded but did not (`--bundle=~/b.warm`, `-o '~/b.warm'`: a folder `~` was
    made here, and the line naming it read as the home; one to read that is there is read;
    `WARM_BUNDLE`'s is expanded, `config.bundle`): one line, exit 2."""
    from warmcli.bundle.served import folder_end  # production's rule

    if named == "-" and (to == "write" or not os.path.lexists(named)):
        fail(f"{shown}-: stdin/stdout are not supported: name a file (./- for one named -)")
    home = os.path.expanduser(named)
    if home != named and (to == "write" or not os.path.lexists(named)):
        fail(
            f"{shown}{named}: its '~' was not expanded by a shell (quoted, or after '='): "
            f"name {home} (./{named} for a folder named {named.split('/')[0]})"
        )
    if (end := folder_end(named)) is not None:
        fail(f"{shown}{named}: ends in '{end}', so names a folder: name the bundle file to {to}")
    return named


def new_file_path(named: str | Path, *, new_only: bool = False, beside: int = BESIDE_BYTES) -> Path:
    """The bundle file the user `named`, if warm need create no more than its own
    directory to write it (`merge -o` too), and no name in its path is longer than a file
    name may be; else one line, and exit 2."""
    if not str(named).strip():
        fail("the bundle's name is empty: name the bundle file to write")
    if isinstance(named, str):
        refuse_folder_name(named)
    given = Path(named)
    refuse_long_name(given, new_only=new_only, beside=beside)
    if given.parent.exists() and not given.parent.is_dir():
        fail(f"{given}: {given.parent} is not a directory")
    if not given.parent.parent.is_dir():
        fail(
            f"{given}: no directory {given.parent.parent} (warm creates only the bundle's own "
            f"directory, {given.parent.name})"
        )
    return given


def readable_bundle(
    given: str | None, keys: Sequence[bytes] | None = None, *, now: str | None = None
) -> Path:
    """A bundle to read: `given` (a path or an https:// or s3:// URL), else WARM_BUNDLE
    (either too), else the default; a URL's local copy is fetched (`warmcli.bundle.remote`,
    imported only then) and a fall-back to its last good copy (one `keys` refused) warns,
    or, for a caller that takes only what the URL holds `now` (what it says then), fails."""
    location = _named(given) or str(default_bundle())
    if not is_url(location):  # named as a folder: refused, as a write is (`Path` drops `/`)
        refuse_folder_name(location, "" if given else "WARM_BUNDLE=", "read")
        if not (given or config.bundle() or os.path.lexists(location)):  # a new user's first
            fail(f"{location}: no such bundle (make one with `warm run WORKLOAD`)")
        return Path(location)
    from warmcli.bundle.remote import local_bundle

    guarded(refuse_no_directory)  # its copy is kept in WARM_HOME
    path, warning = guarded(lambda: local_bundle(location, keys))
    if warning and now is not None:  # (the fall-back's reason, as said without a copy)
        fail(f"{warning.removesuffix(f'; using the last good copy {path}')}; {now}")
    if warning:
        err.print(f"warm: warning: {warning}", markup=False, highlight=False)
    return path


def shown_name(given: str | None, path: Path) -> str:
    """How a command names the bundle it read at `path`: the URL it was given (or
    WARM_BUNDLE's), never that URL's local copy in WARM_HOME, which no script can map
    back, as `location.shown` shows it (no password, token or query); else the path."""
    named = given or config.bundle()
    return shown(named) if named and is_url(named) else str(path)


def pinned(path: Path, load: Callable[[], Loaded]) -> tuple[Path, Loaded]:
    """`load()` (a workload's import, which may move: `os.chdir` to its data folder) and
    `path` as it names the caller's bundle after it: as given, unless the import moved the
    working folder, then absolute in the folder warm was started in (written there, never in
    the workload's folder). A working folder removed under the caller leaves it as given: a
    relative name finds nothing there anyway. A relative `WARM_BUNDLE` and `WARM_HOME` are made
    the caller's for what follows, children included (its remembered compiler lines and host
    libraries went to the workload's data folder; a spawned child found no bundle there)."""
    before = _working_folder()
    if before is not None:
        config.pin_relative(before)  # (a spawned child opening `WARM_BUNDLE`: the caller's)
    loaded = load()
    if before is None or path.is_absolute() or _working_folder() == before:
        return path, loaded
    return Path(before, path), loaded  # (not normalized: `link/..` is where the link leads)


def _working_folder() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under this process
        return None
