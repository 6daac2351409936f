"""Hostile review of stop 52's changes (tune_flight, keep_attributes, remote masking, signals).

Found:
- A forked child's tune waited for ever on a thread of its own: `tune_flight` named a key's
  measurer by its thread ident, and a child's new thread takes the ident of a parent's thread
  the child lacks (glibc hands the new thread that thread's stack), so a child forked while a
  thread measured a tune, that started threads of its own (a server's pool), waited on one of
  them, alive and measuring nothing, on its first call of that tune: for ever.
- A pull by a user whose group only reads a bundle took it over (a merge checks the file
  writable first): `keep_attributes` read what the group may do from the mode's group bits,
  which are an ACL's mask where the file has one (`setfacl -m u:reader:r` makes 0644 read
  0664), so Alice's bundle, her group's to read only (ACL `group::r--`, mask `rw-`), pulled
  over by Bob of that group became Bob's, `user::rw-` now his, Alice left to read it as one
  of the group: Bob took what the file never let him write. Refused now, as the same bundle
  without an ACL (0644) is. So was one no user may write (0444, or 0000: its owner's to
  chmod, its group's to read): a member pulling over it became its owner (a merge refuses
  it: not writable by you).
- `said` (what a store says, made one line, its URLs masked) took 10 s of CPU for a run of
  65,000 letters (a store's reason phrase: http.client reads 64 KiB of a status line; an S3
  error's Message, its body, any size: minutes for 256 KiB): its URL pattern's unbounded
  scheme was scanned from each letter to the run's end. A scheme of 32 characters at most now.
Real host runtime (the real C compiler), real fork; several users by `setpriv` (root only).
"""

from __future__ import annotations

import os
import struct
import subprocess
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from test_remote import Store, http_store  # noqa: F401  (fixture)
from test_trial52b import (
    ALICE,
    BOB,
    FLEET,
    READER,
    _bundle,
    _env,
    _warm,
    as_root,
    shared,  # noqa: F401  (fixture)
)

from warmcli import Kernel, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.bundle.replacing import ACL
from warmcli.execution import ProcessMode, ProcessModeOverride

SRC = "void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"


def _exit_code(pid: int, within: float) -> int | None:
    """The child's exit code, or None where it still runs after `within` seconds (then killed)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_a_child_forked_while_a_thread_measures_a_tune_measures_it_itself() -> None:
    parent, measuring, release = os.getpid(), threading.Event(), threading.Event()

    def launch(rt, kernel, x, n, *, stream=None):
        if os.getpid() == parent and threading.current_thread().name == "measurer":
            measuring.set()
            release.wait(30)  # measuring as the main thread forks
        rt.launch(kernel, x, n, stream=stream)

    steps = {f"s{s}": Kernel(SRC, "add", "Pi", defines={"STEP": s}) for s in (1, 2)}
    tunable = Tunable("forked", steps, launch, warmup=1, repeats=1, restore=())
    rt = Runtime(HostDevice(), None, misses=None)
    try:
        with ProcessModeOverride(ProcessMode.EXECUTE):
            for kernel in steps.values():  # built before the fork
                rt.launch(kernel, rt.upload(np.zeros(4, np.float32)), 4)
            x = rt.upload(np.zeros(4, np.float32))
            measurer = threading.Thread(
                target=rt.tune, args=(tunable, x, 4), name="measurer", daemon=True
            )
            measurer.start()
            assert measuring.wait(30)
            pid = os.fork()
            if pid == 0:  # the child: threads of its own (a pool), then the tune
                code = 3
                try:
                    idle = threading.Event()
                    pool = [threading.Thread(target=idle.wait, daemon=True) for _ in range(8)]
                    for t in pool:
                        t.start()
                    reused = measurer.ident in {t.ident for t in pool}
                    pick = rt.tune(tunable, rt.upload(np.zeros(4, np.float32)), 4)
                    code = 0 if pick in steps and reused else 4 if pick in steps else 5
                finally:
                    os._exit(code)
            try:
                code = _exit_code(pid, 20)
            finally:
                release.set()
                measurer.join(30)
    finally:
        rt.close()
    assert code is not None, "the child's tune waited for ever on a thread measuring nothing"
    assert code == 0, code  # 4: no thread of the child's took the measurer's ident (unchecked)


def _alices_and_the_stores(
    folder: Path, served: tuple[Store, str, ThreadingHTTPServer], mode: int
) -> tuple[Path, bytes, str]:
    """Alice's bundle `folder/b.warm` (her group's to read, `mode`) and another on the store
    `served`: its path, its bytes and the store's URL."""
    store, base, _ = served
    target = folder / "b.warm"
    before = _bundle(target, ALICE, FLEET, mode)
    store.files["/b.warm"] = _bundle(folder / "new.warm", 0, 0, 0o644)
    return target, before, base


def _kept_alices(
    target: Path, before: bytes, refused: subprocess.CompletedProcess[str], why: str
) -> None:
    """A member's pull over Alice's bundle refused in one line (`cannot keep its owner, WHY`),
    the bundle still hers, its bytes as they were (it was the puller's)."""
    st = target.stat()
    assert (st.st_uid, target.read_bytes()) == (ALICE, before), refused.stderr
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"cannot keep its owner, {why}" in refused.stderr


@as_root
def test_a_pull_by_a_member_its_acl_lets_only_read_keeps_its_owner(
    warm: Warm,
    shared: Path,  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    target, before, base = _alices_and_the_stores(shared, http_store, 0o644)
    none = 0xFFFFFFFF  # user::rw- user:READER:r-- group::r-- mask::rw- other::r-- (0664)
    entries = [(1, 6, none), (2, 4, READER), (4, 4, none), (0x10, 6, none), (0x20, 4, none)]
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    try:
        os.setxattr(target, ACL, acl)
    except OSError as exc:
        pytest.skip(f"no ACL here ({exc.strerror})")
    assert target.stat().st_mode & 0o777 == 0o664  # the mask's bits, not the group's
    env = _env(warm, shared / "bob")
    refused = _warm(BOB, (FLEET,), "pull", f"{base}/b.warm", target, env=env)
    _kept_alices(target, before, refused, "to whom its ACL gives more than to its group")
    assert os.getxattr(target, ACL) == acl


@as_root
def test_a_pull_by_a_member_over_a_bundle_none_may_write_keeps_its_owner(
    warm: Warm,
    shared: Path,  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    target, before, base = _alices_and_the_stores(shared, http_store, 0o444)  # hers to chmod
    refused = _warm(BOB, (FLEET,), "pull", f"{base}/b.warm", target, env=_env(warm, shared / "b"))
    _kept_alices(target, before, refused, "and may not write it; nothing pulled")


def test_what_a_store_says_at_length_is_made_one_line_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A store's reason phrase (http.client reads 64 KiB of a status line) or an S3 error's
    # Message (its body, any size) of letters alone: the URL pattern's scheme was tried at
    # each letter, to the end of the run, 10 s for 65,000 letters (quadratic: 256 KiB, minutes).
    # Counted, not timed: the letters of a run one try of the pattern takes as a scheme (each
    # URL it hands `shown`), at most 32, so a run of n letters is read 33 n times at most.
    from warmcli.bundle import http_open

    urls: list[str] = []
    with monkeypatch.context() as patched:
        patched.setattr(http_open, "shown", lambda url: urls.append(url) or url)
        http_open.said("a" * 65_000 + "://h/b")
    assert [len(url.partition("://")[0]) for url in urls] == [32]  # (unbounded: 65,000)
    text = "a" * 262_144 + " https://u:secret@store.example/b.warm?sig=abc"
    assert http_open.said(text) == "a" * 200
    assert (
        http_open.said("a" * 40 + " https://u:secret@h/b?sig=x")
        == "a" * 40 + " https://u:***@h/b?***"
    )
