"""Temporary files beside a bundle, in a group-writable folder without the sticky bit (README's
group-shared bundles): a member who renames warm's temporary file away and puts a link in its
place, at the moment warm is between two steps, never has warm write through that link.

Each attacker is simulated in this process by a profile hook that acts at one exact step of
warm's own code (no timing): `warmcli.bundle.file._write_empty` about to connect SQLite, a merge
between removing a dead merge's file and making its own, a merge between making its file and
writing the union into it, a pull about to give its file the old one's attributes. Each test
is a unit test of that step (`test_unit_...`), through the module API."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_live_bundle import bundle_of

from warmcli.bundle.replacing import copy_into
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError, RemoteError
from warmcli.ops.merge import merge_bundles


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def swap_for_link(tmp: Path, victim: Path) -> None:
    """What the group member does: warm's file renamed away, a link to `victim` in its place."""
    if os.path.lexists(tmp):
        os.rename(tmp, f"{tmp}.moved")
    os.symlink(victim, tmp)


@contextmanager
def attacker(act: Callable[[FrameType, str, Any], bool]) -> Iterator[list[str]]:
    """A profile hook calling `act` at each event till it returns True (acted once)."""
    acted: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if not acted and act(frame, event, arg):
            acted.append(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        yield acted
    finally:
        sys.setprofile(None)


def test_unit_a_link_put_at_a_new_bundles_temp_file_before_sqlite_opens_it(
    tmp_path: Path,
) -> None:
    """`_write_empty` made its file, then SQLite connected through the name: a link put there
    in between had SQLite write warm's schema into the file it leads to (the user's)."""
    victim = tmp_path / "notes.db"
    victim.write_bytes(b"")  # the user's empty file (SQLite writes into one as into a new one)

    def act(frame: FrameType, event: str, arg: Any) -> bool:
        if event != "c_call" or frame.f_code.co_name != "_write_empty":
            return False
        if getattr(arg, "__name__", "") != "connect":
            return False
        swap_for_link(Path(frame.f_locals["tmp"]), victim)
        return True

    with attacker(act) as acted, pytest.raises(BundleError) as refused:
        Bundle.create(tmp_path / "new.warm")
    assert acted == ["_write_empty"]
    assert "temporary file was replaced" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert victim.read_bytes() == b""  # nothing written through the link
    assert not (tmp_path / "new.warm").exists()


def test_unit_a_link_put_and_taken_away_while_sqlite_connects(tmp_path: Path) -> None:
    """The link put in place only while SQLite opened the name, warm's file put back after:
    the name checked after the connect is warm's file again, but SQLite holds the user's.
    What SQLite holds is what is checked (`/proc/self/fd`): refused, the user's file empty."""
    victim = tmp_path / "notes.db"
    victim.write_bytes(b"")
    steps: list[str] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if frame.f_code.co_name != "_write_empty" or getattr(arg, "__name__", "") != "connect":
            return
        tmp = Path(frame.f_locals["tmp"])
        if event == "c_call" and not steps:
            swap_for_link(tmp, victim)
            steps.append("linked")
        elif event == "c_return" and steps == ["linked"]:
            tmp.unlink()
            os.rename(f"{tmp}.moved", tmp)  # warm's own file back at its name
            steps.append("put back")

    sys.setprofile(hook)
    try:
        with pytest.raises(BundleError) as refused:
            Bundle.create(tmp_path / "new.warm")
    finally:
        sys.setprofile(None)
    assert steps == ["linked", "put back"]
    assert "temporary file was replaced" in str(refused.value)
    assert victim.read_bytes() == b""
    assert not (tmp_path / "new.warm").exists()


def _merge_with(
    warm: Warm, tmp_path: Path, act: Callable[[Path, FrameType, str, Any], bool]
) -> tuple[Path, Path, BaseException | None, list[str]]:
    """Merge two bundles into OUT, `act` (given the victim) run as the attacker; the victim
    is the user's own bundle elsewhere (a file warm would write into, where it opened it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2775)  # group-shared: no sticky bit
    one, two = bundle_of(warm, shared, 1), bundle_of(warm, shared, 2)
    mine = tmp_path / "mine"
    mine.mkdir()
    victim = bundle_of(warm, mine, 1)
    with sqlite3.connect(victim) as conn:  # the user's: its own rows (it differs from ONE)
        conn.execute("DELETE FROM tunes")
    before = digest(victim)
    out = shared / "out.warm"
    failed: BaseException | None = None
    with attacker(lambda frame, event, arg: act(victim, frame, event, arg)) as acted:
        try:
            merge_bundles([one, two], out)
        except (BundleError, OSError) as exc:
            failed = exc
    assert digest(victim) == before, "the merge wrote through the link into the user's bundle"
    return out, victim, failed, acted


def _temp_of(frame: FrameType) -> Path | None:
    """The merge's temporary file, in `_publish`'s frame (or its caller's: `frame`'s)."""
    for at in (frame, frame.f_back):
        if at is not None and at.f_code.co_name == "_publish":
            return Path(at.f_locals["tmp"])
    return None


def test_unit_a_link_put_at_a_merges_temp_name_after_the_dead_ones_removal(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm merge` removed `.OUT.PID.merge`, then `Bundle.create` followed a link put there
    meanwhile: into the user's bundle it leads to (written with the union, or, were it empty,
    replaced by an empty bundle through `publish`). The merge's file is made exclusively and
    never through a link: refused in one line, OUT not made."""

    def act(victim: Path, frame: FrameType, event: str, arg: Any) -> bool:
        if event != "return" or frame.f_code.co_name != "unlink":
            return False
        back = frame.f_back
        if back is None or back.f_code.co_name != "_publish":
            return False
        os.symlink(victim, Path(back.f_locals["tmp"]))
        return True

    out, _, failed, acted = _merge_with(warm, tmp_path, act)
    assert acted == ["unlink"]
    assert isinstance(failed, BundleError), failed
    assert "something else is at warm's temporary name" in str(failed)
    assert "\n" not in str(failed)
    assert not out.exists()


def test_unit_a_link_put_at_a_merges_temp_file_before_the_union_is_written(
    warm: Warm, tmp_path: Path
) -> None:
    """Made and opened, the merge's file renamed away and a link put in its place: the first
    write followed the name to the file it leads to (`_follow_replacement`, there for a bundle
    a merge replaced), the user's bundle. A merge's own file is kept to: refused."""

    def act(victim: Path, frame: FrameType, event: str, arg: Any) -> bool:
        if event != "return" or frame.f_code.co_name not in ("create", "create_new"):
            return False
        tmp = _temp_of(frame.f_back) if frame.f_back is not None else None
        if tmp is None:
            return False
        swap_for_link(tmp, victim)
        return True

    out, victim, failed, acted = _merge_with(warm, tmp_path, act)
    assert acted in (["create"], ["create_new"])
    assert not os.path.lexists(f"{victim}.lock")  # nor a lock file made beside it
    assert isinstance(failed, BundleError), failed
    assert "temporary file was replaced" in str(failed)
    assert not out.exists()


def test_unit_a_link_put_at_a_pulls_temp_file_before_its_attributes_are_kept(
    warm: Warm, tmp_path: Path
) -> None:
    """A pull gives its new file the old PATH's group, mode and ACL by the file's name: a
    link put there in between had the user's file it leads to chmodded (0600 made 0640). Now
    through the file made only: a link there is refused in one line, PATH as it was."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2775)
    target, source = bundle_of(warm, shared, 1), bundle_of(warm, tmp_path, 2)
    os.chmod(target, 0o640)
    before = digest(target)
    victim = tmp_path / "private.key"
    victim.write_bytes(b"secret")
    os.chmod(victim, 0o600)

    def act(frame: FrameType, event: str, arg: Any) -> bool:
        if event != "call" or frame.f_code.co_name != "keep_attributes":
            return False
        swap_for_link(Path(frame.f_locals["tmp"]), victim)
        return True

    with attacker(act) as acted, pytest.raises(RemoteError) as refused:
        copy_into(source, target, force=False)
    assert acted == ["keep_attributes"]
    assert "nothing pulled" in str(refused.value) and "\n" not in str(refused.value)
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    assert victim.read_bytes() == b"secret"
    assert digest(target) == before
