"""trial52b: warm on a shared Linux host: a group's bundle folder, several users, odd paths.

What was wrong:

- A new bundle was 0644 whatever the umask (SQLite makes its files so): made under umask
  002 in a group's folder, no other member could warm into it (`warm run`: "attempt to write
  a readonly database"). It is now made 0664 less the umask: its group may write it under
  umask 002, every user never, whatever the umask.
- `warm pull` into a new PATH under umask 000 (a container's entry point may set it) made a
  bundle every user may write (0666): any user could put native code into what the fleet
  loads (a `warm run`'s, a merge's, and warm's own folders are never so). Now 0664 too.
- `warm pull` by another member of a bundle's group replaced it with a file of the puller's
  own group (in a folder without the setgid bit) and without its ACL: the fleet (the group's
  production user, the user the ACL named) could no longer read it. Over a file of a group
  the puller is not in (0666, in a folder all may write) it took the file over. It now keeps
  the group, mode and ACL (the owner becomes the puller's, as Git's `core.sharedRepository`
  leaves an object's), or pulls nothing and says why.
- `warm merge -o OUT` by another member was refused outright ("cannot keep its owner and
  group") where OUT's group and mode could be kept, so a group's bundle was merged only by
  the user who made it first; and it kept no ACL. It now keeps both as `warm pull` does
  (`warmcli.bundle.replacing.keep_attributes`, the one rule), and refuses as before where
  the group cannot be kept.
- A bundle path longer than SQLite opens (504 bytes, a temporary file's name beside it
  counted: 488) was refused as "SQLite could not open the bundle or its journal (too many
  open files?)": now its length, and what to do.

The users are numeric uids and gids (no passwd entry made) run by `setpriv`, root only. Each
command is a started process (`setpriv ... python -m warmcli`), never a fork of the test's
root server: what is tested is the file another uid makes.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from test_remote import Store, http_store  # noqa: F401  (fixture)

from warmcli.bundle.replacing import ACL, copy_into
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError

FLEET, ALICE, BOB, PROD, READER = 54520, 54521, 54522, 54523, 54524

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root and setpriv, to be several users",
)


def _user(uid: int, groups: tuple[int, ...] = ()) -> list[str]:
    """`setpriv` as `uid` (its own gid, and `groups`), with no capability."""
    listed = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", listed]


def _warm(uid: int, groups: tuple[int, ...], *args: str | Path, env: dict[str, str]) -> Any:
    """`warm ARGS` as `uid`, under umask 002. It keeps one capability, CAP_DAC_READ_SEARCH
    (ambient): this interpreter may lie in root's own 0700 folder; it reads past a mode,
    never writes past one, and the files it makes are `uid`'s."""
    caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    command = [*_user(uid, groups), *caps, sys.executable, "-m", "warmcli", *map(str, args)]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=ROOT, umask=0o002, timeout=120
    )


def _reads(uid: int, groups: tuple[int, ...], path: Path) -> bool:
    """Whether `uid` (no capability) may read `path`, as its production process opens it."""
    done = subprocess.run([*_user(uid, groups), "cat", str(path)], capture_output=True)
    return done.returncode == 0


def _acl_reading(path: Path, uid: int) -> bytes:
    """Give `path` an access ACL that lets `uid` read it (as `setfacl -m u:UID:r`); its
    bytes, as Linux stores them (skip where the file system takes no ACL)."""
    mode = os.stat(path).st_mode
    owner, group, other, none = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7, 0xFFFFFFFF
    entries = [(1, owner, none), (2, 4, uid), (4, group, none), (0x10, group | 4, none)]
    acl = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", *e) for e in [*entries, (0x20, other, none)]
    )
    try:
        os.setxattr(path, ACL, acl)
    except OSError as exc:
        pytest.skip(f"no ACL here ({exc.strerror})")
    return os.getxattr(path, ACL)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A group's folder outside root's own (pytest's folders are 0700): FLEET's, 0775."""
    folder = Path(tempfile.mkdtemp(prefix="trial52b-"))
    os.chown(folder, 0, FLEET)
    folder.chmod(0o775)
    yield folder
    shutil.rmtree(folder)


def _bundle(path: Path, uid: int, gid: int, mode: int) -> bytes:
    """A new (empty) bundle at `path`, `uid`:`gid`, `mode`; its bytes."""
    Bundle.create(path).close()
    Path(f"{path}.lock").unlink()
    os.chown(path, uid, gid)
    path.chmod(mode)
    return path.read_bytes()


def _env(warm: Warm, home: Path) -> dict[str, str]:
    return dict(warm.env, WARM_HOME=str(home))


def test_a_new_bundle_is_0664_less_the_umask_not_sqlites_0644(tmp_path: Path) -> None:
    Bundle.create(tmp_path / "pulled.warm").close()
    made, pulled = {}, {}
    for umask in (0o002, 0o022, 0o000):
        old = os.umask(umask)
        try:
            Bundle.create(tmp_path / f"{umask:o}.warm").close()
            copy_into(tmp_path / "pulled.warm", tmp_path / f"pulled{umask:o}.warm", False)
        finally:
            os.umask(old)
        made[umask] = (tmp_path / f"{umask:o}.warm").stat().st_mode & 0o777
        pulled[umask] = (tmp_path / f"pulled{umask:o}.warm").stat().st_mode & 0o777
    assert made == pulled == {0o002: 0o664, 0o022: 0o644, 0o000: 0o664}  # none all users'


@as_root
def test_a_pull_by_another_member_keeps_the_bundle_the_fleets(
    warm: Warm,
    shared: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    store, base, _ = http_store
    target = shared / "b.warm"  # Alice's, her group's to read and write, and Reader's
    _bundle(target, ALICE, FLEET, 0o660)
    assert not _reads(READER, (), target)
    acl = _acl_reading(target, READER)  # (what lets Reader read it)
    store.files["/b.warm"] = _bundle(shared / "new.warm", 0, 0, 0o644)
    env = _env(warm, shared / "bob")
    pulled = _warm(BOB, (FLEET,), "pull", f"{base}/b.warm", target, env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert target.read_bytes() == store.files["/b.warm"]
    st = target.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (BOB, FLEET, 0o660)
    assert os.getxattr(target, ACL) == acl
    assert _reads(PROD, (FLEET,), target) and _reads(READER, (), target)
    assert not _reads(PROD, (), target)  # its group, not all users, may read it

    for gid, mode, why in (  # Alice's own group's; FLEET's, that only Alice may write
        (ALICE, 0o666, "cannot keep its owner and group"),
        (FLEET, 0o644, "cannot keep its owner, to whom its mode 0644 gives more than to its group"),
    ):
        theirs = shared / f"{mode:o}.warm"  # (this folder: FLEET may write in it)
        before = _bundle(theirs, ALICE, gid, mode)
        refused = _warm(BOB, (FLEET,), "pull", f"{base}/b.warm", theirs, env=env)
        assert refused.returncode != 0 and refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert f"{why}; nothing pulled" in refused.stderr
        st = theirs.stat()
        assert (theirs.read_bytes(), st.st_uid, st.st_gid) == (before, ALICE, gid)
    assert sorted(p.name for p in shared.iterdir() if p.name.startswith(".")) == []


@as_root
def test_a_merge_by_another_member_keeps_the_group_shared_bundle(warm: Warm, shared: Path) -> None:
    shared.chmod(0o2775)  # a group's folder as one sets it up: new files take its group
    out, other = shared / "b.warm", shared / "o.warm"
    _bundle(out, ALICE, FLEET, 0o664)
    _bundle(other, ALICE, FLEET, 0o664)
    acl = _acl_reading(out, READER)
    env = _env(warm, shared / "bob")
    merged = _warm(BOB, (FLEET,), "merge", out, other, "-o", out, env=env)
    assert merged.returncode == 0, merged.stderr
    st = out.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (BOB, FLEET, 0o664)
    assert os.getxattr(out, ACL) == acl
    assert _reads(PROD, (FLEET,), out) and _reads(READER, (), out)

    os.chown(other, ALICE, ALICE)  # a group Bob is not in: its group cannot be kept
    other.chmod(0o666)
    before = other.read_bytes()
    refused = _warm(BOB, (FLEET,), "merge", other, out, "-o", other, env=env)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1
    assert "cannot keep its owner and group: nothing was merged" in refused.stderr
    assert (other.read_bytes(), other.stat().st_gid) == (before, ALICE)


def test_a_bundle_path_longer_than_sqlite_opens_is_said_so(tmp_path: Path) -> None:
    folder = tmp_path
    while len(os.fsencode(folder)) < 500:
        folder /= "f" * 60
    folder.mkdir(parents=True)
    path = folder / "b.warm"
    with pytest.raises(BundleError) as raised:
        Bundle.create(path).close()
    said = str(raised.value)
    assert f"its path is {len(os.fsencode(path))} bytes, too long for SQLite" in said
    assert "name a shorter one" in said and "open files" not in said
    assert not path.exists()
