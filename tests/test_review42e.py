"""review42e: warm's home in a shared `TMPDIR`, attacked by another user.

A uid with no passwd entry and `HOME` unset (or `/`) keeps warm's home in
`$TMPDIR/warm-<uid>` (trial42b). What was wrong:

- The folder was looked at when named, and made (by path, following links, 0775 less
  the umask) only when first written: another user who put a link or a folder of theirs
  there in between (a process names its home at start, writes after its first compile)
  had the victim write its compiler memo, host libraries and kept bundles into the
  attacker's folder, or into any folder the link named. It is now made 0700 when named
  and looked at without following a link; once there, in a sticky `TMPDIR`, no other
  user can replace it.
- A folder of the victim's own writable by its group (0775, made under umask 002) was
  taken; a `TMPDIR` writable by all without the sticky bit (where another user can
  rename the victim's folder away) too. Neither is now.
- With no home taken, `warm run` without `--bundle` said `cannot make warm's home
  /dev/null/warm for the default bundle (Not a directory)`, and `warm pull` `its local
  copy cannot be kept in /dev/null/warm/remote/...`: now why there is no home, and what
  to set.

The two users are real uids (`setuid` in forked children; the CLI in a user namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm

from warmcli import home

VICTIM, ATTACKER = 54331, 54332

pytestmark = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root, to be two users"
)


def _as(uid: int, action: Callable[[], Any], env: dict[str, str] | None = None) -> Any:
    """`action()` run in a forked child as `uid` (its environment `env`, umask 0); what it
    returns (JSON), or the text of what it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read)
        try:
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
                tempfile.tempdir = None  # (Python's own, read again from this TMPDIR)
            os.umask(0)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out: Any = action()
        except BaseException as exc:
            out = f"raised {type(exc).__name__}: {exc}"
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.fixture
def tmpdir_shared() -> Iterator[Path]:
    """A `TMPDIR` as /tmp is: every user's, sticky."""
    folder = Path(tempfile.mkdtemp(prefix="review42e-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder)


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmp), **extra}


def test_the_home_is_made_the_users_own_when_named_so_a_link_planted_after_is_not_followed(
    tmpdir_shared: Path,
) -> None:
    trap = tmpdir_shared / "attacker"
    trap.mkdir(mode=0o777)
    os.chown(trap, ATTACKER, ATTACKER)
    trap.chmod(0o777)
    victim_home = tmpdir_shared / f"warm-{VICTIM}"
    go_read, go_write = os.pipe()
    named_read, named_write = os.pipe()

    def victim() -> list[str]:
        memo = home.in_home("toolchains.json")  # at start; written after the first compile
        os.write(named_write, b"x")
        os.read(go_read, 1)  # the attacker's turn
        home.make_folder(os.path.dirname(memo))
        home.write_private(os.path.dirname(memo), memo, b"{}")
        return [memo, os.path.realpath(memo)]

    def attacker() -> str:
        os.read(named_read, 1)
        try:
            os.symlink(trap, victim_home)
            return "planted"
        except OSError as exc:
            return exc.strerror or ""
        finally:
            os.write(go_write, b"x")

    pid = os.fork()
    if pid == 0:  # pragma: no cover (the attacker, beside the victim)
        os.write(1, f"attacker: {_as(ATTACKER, attacker)}\n".encode())
        os._exit(0)
    memo, real = _as(VICTIM, victim, _env(tmpdir_shared))
    os.waitpid(pid, 0)
    assert list(trap.iterdir()) == []  # nothing of the victim's in the attacker's folder
    assert real == memo == str(victim_home / "toolchains.json")
    st = os.lstat(victim_home)  # made 0700 under umask 0, the victim's
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == VICTIM and st.st_mode & 0o777 == 0o700


def _none(*_: object) -> None:  # (what steps of a lambda return: nothing)
    return None


def _planted(tmp: Path, how: str) -> None:
    folder = tmp / f"warm-{VICTIM}"
    elsewhere = tmp / "elsewhere"
    if how == "attacker's folder 0777":
        _as(ATTACKER, lambda: _none(os.mkdir(folder), os.chmod(folder, 0o777)))
    elif how == "attacker's folder 0755":
        _as(ATTACKER, lambda: os.mkdir(folder, 0o755))
    elif how == "link to attacker's folder":
        _as(ATTACKER, lambda: _none(os.mkdir(elsewhere, 0o777), os.symlink(elsewhere, folder)))
    elif how == "link to the victim's folder":  # the victim's own, private: still a link
        _as(VICTIM, lambda: os.mkdir(elsewhere, 0o700))
        _as(ATTACKER, lambda: os.symlink(elsewhere, folder))
    elif how == "FIFO":
        _as(ATTACKER, lambda: os.mkfifo(folder))
    elif how == "file":
        _as(ATTACKER, lambda: os.close(os.open(folder, os.O_CREAT | os.O_WRONLY, 0o644)))
    elif how == "victim's folder 0775":  # made under umask 002: its group may write
        _as(VICTIM, lambda: _none(os.mkdir(folder), os.chmod(folder, 0o775)))


PLANTED = [
    ("attacker's folder 0777", "belongs to another user"),
    ("attacker's folder 0755", "belongs to another user"),
    ("link to attacker's folder", "is a symbolic link"),
    ("link to the victim's folder", "is a symbolic link"),
    ("FIFO", "is there and no folder"),
    ("file", "is there and no folder"),
    ("victim's folder 0775", "is writable by others than you (mode 775)"),
]


@pytest.mark.parametrize(("how", "said"), PLANTED)
def test_a_warm_uid_folder_not_the_users_alone_is_not_taken_and_why_is_said(
    tmpdir_shared: Path, how: str, said: str
) -> None:
    _planted(tmpdir_shared, how)
    before = sorted(os.listdir(tmpdir_shared))

    def victim() -> list[str]:
        return [home.home_dir(), home.no_home_why()]

    for env in (_env(tmpdir_shared), _env(tmpdir_shared, HOME="/")):
        where, why = _as(VICTIM, victim, env)
        assert where == home.UNUSABLE_HOME
        assert why.startswith(f"no HOME for uid {VICTIM} (unset or /, and no passwd entry), ")
        assert said in why
    assert sorted(os.listdir(tmpdir_shared)) == before  # nothing made, nothing followed


def test_a_tmpdir_others_may_rename_in_or_cannot_be_written_is_no_home(
    tmpdir_shared: Path,
) -> None:
    loose = tmpdir_shared / "loose"
    loose.mkdir()
    loose.chmod(0o777)  # no sticky bit: another user could rename the victim's folder away

    def victim() -> list[str]:
        return [home.home_dir(), home.no_home_why()]

    where, why = _as(VICTIM, victim, _env(loose))
    assert (where, list(loose.iterdir())) == (home.UNUSABLE_HOME, [])
    assert f"TMPDIR={loose} is another user's, or writable by all with no sticky bit" in why
    where, why = _as(VICTIM, victim, _env(tmpdir_shared / "none"))
    assert where == home.UNUSABLE_HOME
    assert why.endswith(f"none/warm-{VICTIM} cannot be made (No such file or directory)")


def test_warm_run_and_pull_with_no_home_say_why_and_what_to_set(
    warm: Warm, tmp_path: Path, tmpdir_shared: Path
) -> None:
    unshare = shutil.which("unshare")
    userns = [unshare or "unshare", "--user", f"--map-user={VICTIM}", f"--map-group={VICTIM}"]
    if unshare is None or subprocess.run([*userns, "true"], capture_output=True).returncode:
        pytest.skip("no user namespace here to run as a uid with no passwd entry")
    _planted(tmpdir_shared, "attacker's folder 0755")
    (tmp_path / "w.py").write_text("def workload(rt):\n    pass\n")
    unset = ("HOME", "WARM_HOME", "XDG_CACHE_HOME", "WARM_BUNDLE")
    env = {k: v for k, v in warm.env.items() if k not in unset}
    env.update(TMPDIR=str(tmpdir_shared), PYTHONPATH=str(ROOT))
    why = f"no HOME for uid {VICTIM} (unset or /, and no passwd entry), and {tmpdir_shared}/"
    for args, said in (
        (["run", "w.py"], "warm has no home for the default bundle: "),
        (["pull", "https://127.0.0.1:9/a.warm", "a.warm"], "its local copy cannot be kept: "),
    ):
        proc = subprocess.run(
            [*userns, sys.executable, "-m", "warmcli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1, proc.stderr
        assert said + why in lines[0] and "set WARM_HOME to a folder of your own" in lines[0]
        assert "belongs to another user" in lines[0] and "/dev/null" not in lines[0]


def test_a_uid_dropped_to_after_warm_asked_as_root_is_judged_as_itself(
    tmpdir_shared: Path,
) -> None:
    """A server that asked as root (HOME=/, a passwd entry: a home) then drops to a uid with no
    passwd entry (a forked worker's setuid) is judged as that uid: no home, not `/.cache/warm`
    (the answer was cached once per process, so the suite's order decided this test's fate)."""
    saved = os.environ.get("HOME")
    os.environ["HOME"] = "/"
    try:
        assert home._no_passwd_entry() is False  # root has an entry: asked, and remembered
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
    where = _as(VICTIM, home.home_dir, _env(tmpdir_shared, HOME="/"))
    assert where == str(tmpdir_shared / f"warm-{VICTIM}"), where
