"""A signal at any moment of a writing command loses nothing and says what was kept.

Found by a seeded signal fuzz (every writing command, SIGINT/SIGTERM/SIGHUP/SIGKILL at a
random moment or at the Nth of a system call): a SIGINT, SIGTERM or SIGHUP that landed as
`warm merge` moved OUT into place said only `warm: interrupted` (exit 130) of a merge that
was complete and kept; into a new OUT, OUT and `OUT.lock` stayed and the same command then
refused (`OUT exists`), the user told nothing was merged. Now the interrupt is held across
the move and the merge's end, then said with what was merged and kept. Likewise `warm
sign` interrupted once its signature was committed said a bare `warm: interrupted` of a
bundle that was signed: now it says what it signed (kept). And `warm pull` interrupted once
PATH was in place said a bare `warm: interrupted`, never that the bundle it replaced had
lost entries the pulled one lacks: now it says both; `warm push` interrupted once the
store had answered its upload said a bare `warm: interrupted` of a bundle the store held.
A `warm run` whose worker was killed
(SIGKILL, as the OOM killer does) while it stored said "nothing was stored" and left the
worker's hot journal beside the bundle (a read-only reader, `sqlite3`'s, could not open it;
a new bundle stayed, with its lock): now the journal is rolled back before it says so.

The real CLI in a subprocess over real bundles; the signal sent at a precise point by the
process itself (a hook around `os.replace`, then warm's own `main`).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import (
    ForkedWarm,
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
)
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)

# Runs `warm ARGS...` with a hook that has the process send itself WARM_TEST_SIGNAL at a
# precise point: once a rename onto a path ending in WARM_TEST_AT has happened, or (with
# WARM_TEST_AT "unlock") once a write lock was let go, which follows a commit ("lock": once
# it was taken, before any write; "put-answered": once the answer to an HTTP PUT is closed).
HOOK = """
import fcntl, os, signal, sys
at = os.environ["WARM_TEST_AT"]
def send():
    os.kill(os.getpid(), getattr(signal, os.environ["WARM_TEST_SIGNAL"]))
real_replace, real_flock = os.replace, fcntl.flock
def replace(a, b, *args, **kw):
    real_replace(a, b, *args, **kw)
    if str(b).endswith(at):
        send()
def flock(fd, op):
    real_flock(fd, op)
    if (at, op & ~fcntl.LOCK_NB) in (("unlock", fcntl.LOCK_UN), ("lock", fcntl.LOCK_EX)):
        send()
os.replace, fcntl.flock = replace, flock
import http.client
real_close, closed = http.client.HTTPResponse.close, []
def close(self):
    real_close(self)
    if at == "put-answered" and getattr(self, "_method", "") == "PUT" and not closed:
        closed.append(send())
http.client.HTTPResponse.close = close
sys.argv[0] = "warm"
from warmcli.__main__ import main
main()
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> tuple[Path, Path]:
    """Shards 0/2 and 1/2 of the host example, warmed once for the module (each run a fork
    of a process that imported the CLI, `tests/forked_cli.py`: they only make the inputs)."""
    folder = tmp_path_factory.mktemp("shards")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(folder / "home"), COLUMNS="200")  # (as `warm`'s: one server)
    warm = ForkedWarm(Warm(env), forking_servers)
    made = []
    for i in (0, 1):
        path = folder / f"s{i}.warm"
        proc = warm("run", EXAMPLES / "matmul_host.py", "-b", path, "--shard", f"{i}/2", "-q")
        assert proc.returncode == 0, proc.stderr
        Path(f"{path}.lock").unlink()
        made.append(path)
    return made[0], made[1]


def _hooked(warm: Warm, at: str, sig: str, *args: object) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_TEST_AT=at, WARM_TEST_SIGNAL=sig)
    return subprocess.run(
        [sys.executable, "-c", HOOK, *map(str, args)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip


def _keys(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        kernels = {k for (k,) in conn.execute("SELECT key FROM kernels")}
        return kernels | {bytes(k).hex() for (k,) in conn.execute("SELECT key FROM tunes")}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_interrupt_as_a_new_out_is_moved_into_place_says_it_was_merged(
    shards: tuple[Path, Path], warm: Warm, tmp_path: Path, sig: str
) -> None:
    a, b = shards
    out = tmp_path / "out.warm"
    proc = _hooked(warm, "/out.warm", sig, "merge", a, b, "-o", out)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "interrupted" in proc.stderr and "merged" in proc.stderr, proc.stderr
    assert "kept" in proc.stderr and str(out) in proc.stderr, proc.stderr
    assert _keys(out) == _keys(a) | _keys(b)  # complete, as said
    assert warm("verify", out).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.warm", "out.warm.lock"]


def test_interrupt_as_an_out_that_is_an_input_is_replaced_says_it_was_merged(
    shards: tuple[Path, Path], warm: Warm, tmp_path: Path
) -> None:
    a, b = shards
    out = tmp_path / "a.warm"
    out.write_bytes(a.read_bytes())
    proc = _hooked(warm, "/a.warm", "SIGINT", "merge", out, b, "-o", out)
    assert proc.returncode == 130, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "merged" in proc.stderr, proc.stderr
    assert _keys(out) == _keys(a) | _keys(b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.warm", "a.warm.lock"]


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupt_once_the_signature_is_committed_says_it_was_signed(
    shards: tuple[Path, Path], warm: Warm, tmp_path: Path, sig: str
) -> None:
    bundle, key = tmp_path / "b.warm", tmp_path / "key"
    bundle.write_bytes(shards[0].read_bytes())
    assert warm("keygen", key).returncode == 0
    proc = _hooked(warm, "unlock", sig, "sign", bundle, "--key", key)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "interrupted: signed" in proc.stderr and "(kept)" in proc.stderr, proc.stderr
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM signatures").fetchone() == (1,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.warm", "b.warm.lock", "key", "key.pub"]


def test_interrupt_before_the_signature_is_committed_signs_nothing(
    shards: tuple[Path, Path], warm: Warm, tmp_path: Path
) -> None:
    bundle, key = tmp_path / "b.warm", tmp_path / "key"
    bundle.write_bytes(shards[0].read_bytes())
    before = bundle.read_bytes()
    assert warm("keygen", key).returncode == 0
    proc = _hooked(warm, "lock", "SIGINT", "sign", bundle, "--key", key)  # as the lock is taken
    assert proc.returncode == 130 and proc.stderr == "warm: interrupted\n", proc.stderr
    assert bundle.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.warm", "b.warm.lock", "key", "key.pub"]


def test_interrupt_once_a_pull_is_in_place_says_it_was_pulled_and_what_went(
    shards: tuple[Path, Path],
    warm: Warm,
    tmp_path: Path,
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> None:
    held, base = s3_like
    held.files["/b.warm"] = shards[0].read_bytes()
    target = tmp_path / "b.warm"
    target.write_bytes(shards[1].read_bytes())  # holds what the pulled one lacks
    proc = _hooked(warm, "/b.warm", "SIGINT", "pull", f"{base}/b.warm", target)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"interrupted: pulled {base}/b.warm into {target} (kept)" in proc.stderr
    assert "replaced:" in proc.stderr and "they are gone" in proc.stderr, proc.stderr
    assert target.read_bytes() == shards[0].read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.warm", "b.warm.lock", "home"]


# A workload whose worker is killed (SIGKILL, as by the OOM killer) in the middle of storing:
# once the first kernel row of a store is written, before its commit.
KILLED_STORING = """
import os, signal, sys
sys.path.insert(0, {examples!r})
from matmul_host import *  # noqa
from warmcli.bundle.store import Bundle
real_put = Bundle.put
def put(self, kernels=(), *args, **kw):
    def killing():
        for i, item in enumerate(kernels):
            yield item
            os.kill(os.getpid(), signal.SIGKILL)
    return real_put(self, killing(), *args, **kw)
Bundle.put = put
"""


@pytest.mark.parametrize("new", [False, True])
def test_a_worker_killed_as_it_stores_leaves_no_journal(
    shards: tuple[Path, Path], warm: Warm, tmp_path: Path, new: bool
) -> None:
    workload = tmp_path / "work" / "killed.py"
    workload.parent.mkdir()
    workload.write_text(KILLED_STORING.format(examples=str(EXAMPLES)))
    folder = tmp_path / "out"
    folder.mkdir()
    bundle = folder / "b.warm"
    if not new:
        bundle.write_bytes(shards[0].read_bytes())
    proc = warm("run", workload, "-b", bundle, "-q")
    assert proc.returncode == 2, proc.stderr
    assert "the run was killed (SIGKILL" in proc.stderr, proc.stderr
    assert "nothing was stored" in proc.stderr, proc.stderr
    if new:
        assert list(folder.iterdir()) == []
        return
    assert sorted(p.name for p in folder.iterdir()) == ["b.warm", "b.warm.lock"]
    assert bundle.read_bytes() == shards[0].read_bytes()  # as before the run
    assert _keys(bundle) == _keys(shards[0])  # a read-only reader opens it


def test_interrupt_once_the_store_answered_a_push_says_it_was_pushed(
    shards: tuple[Path, Path],
    warm: Warm,
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> None:
    held, base = s3_like
    proc = _hooked(warm, "put-answered", "SIGINT", "push", shards[0], f"{base}/p.warm")
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"interrupted: pushed {shards[0]} to {base}/p.warm (kept)" in proc.stderr
    assert held.files["/p.warm"] == shards[0].read_bytes()
