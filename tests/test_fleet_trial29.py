"""Fleet trial 29: an operator running warm for a fleet, from the README's object-store
sections, against real stores on 127.0.0.1 (test_remote's stdlib HTTP store, a raw
socket store) and the real CLI in subprocesses (each command a fork of a process that
imported it once, `tests/forked_cli.py`, where no limit or signal of its own is tried).

- AWS settings an S3 client cannot be made from (a profile that does not exist, an
  endpoint that is no URL, a config file that does not parse, a region that is no
  region) are one line naming the URL, exit 2 (production: a `RemoteError`), never
  botocore's traceback.
- A download the local disk refuses (a file size limit: `RLIMIT_FSIZE` in the child)
  says the local copy cannot be kept, not that the store is unreachable; the last good
  copy still serves.
- `warm push` uploads one state of the bundle: a writer committing while the push reads
  it waits for the push, so the bytes uploaded are the ones its digests name.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from raw_store import RawStore
from test_fleet_remote import production_runtime
from test_live_bundle import Paused
from test_remote import Store, built, http_store  # noqa: F401  (fixtures)

from warmcli.bundle.store import Bundle

_S3_SETTINGS = {
    "profile": {"AWS_PROFILE": "no-such-profile"},
    "endpoint": {"AWS_ENDPOINT_URL": "not a url"},
    "config": {"AWS_CONFIG_FILE": "{tmp}/aws-config"},
    "region": {"AWS_DEFAULT_REGION": "no/region"},
}


@pytest.mark.parametrize("setting", sorted(_S3_SETTINGS))
def test_aws_settings_no_client_can_be_made_from_are_one_line(
    warm: Warm, forked: Any, tmp_path: Path, setting: str
) -> None:
    pytest.importorskip("boto3")
    (tmp_path / "aws-config").write_text("[unclosed\n")
    (tmp_path / "b.warm").write_bytes(b"")
    env = {k: v for k, v in warm.env.items() if not k.startswith("AWS_")}
    env.update(WARM_HOME=str(tmp_path / "home"), AWS_ACCESS_KEY_ID="t", AWS_SECRET_ACCESS_KEY="t")
    env.update({k: v.format(tmp=tmp_path) for k, v in _S3_SETTINGS[setting].items()})
    url = "s3://fleet/b.warm"
    for args in (("stats", url), ("pull", url, tmp_path / "p.warm")):
        proc = forked(Warm(env))(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"warm: error: {url}: "), proc.stderr
    served = production_runtime(env, url, tmp_path)
    assert served.stdout.startswith(f"RemoteError {url}: "), served.stdout + served.stderr


class _OneStore(RawStore):
    """A store on 127.0.0.1 that serves `body` at one URL with one ETag, whole."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head = b'HTTP/1.1 200 OK\r\nETag: "%d"\r\nContent-Length: %d\r\n\r\n'
        conn.sendall(head % (len(self.body), len(self.body)) + self.body)


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_download_the_disk_refuses_says_so_and_the_last_good_copy_serves(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    store = _OneStore(built[1])
    home = tmp_path / "home"
    env = dict(warm.env, WARM_HOME=str(home))
    full = [sys.executable, "-m", "warmcli", "stats", "--json", store.url]
    limit = len(built[0]) // 2  # below either bundle: the download cannot be kept

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            full,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            preexec_fn=lambda: _limited(limit),
        )

    try:
        first = run()  # no copy yet: one line, exit 2
        assert warm.with_env(**env)("stats", store.url).returncode == 0  # a last good copy
        store.body = built[0]  # changed: its download is refused by the disk
        again = run()
    finally:
        store.server.close()
    assert first.returncode == 2 and first.stderr.count("\n") == 1, first.stderr
    doc = json.loads(first.stdout)
    for said in (doc["error"], first.stderr):
        assert "store unreachable" not in said and "cannot be kept" in said, said
        assert "File too large" in said, said
    assert again.returncode == 0, again.stderr
    assert "cannot be kept" in again.stderr and "last good copy" in again.stderr, again.stderr
    assert len(json.loads(again.stdout)["tunes"]) < 3  # the shard's bundle, as it was
    assert not list((home / "remote").glob("*/*.tmp"))


_TOUCH = "UPDATE manifest SET value = CAST(value AS REAL) + 1 WHERE key = 'updated'"


def test_a_push_uploads_one_state_and_holds_up_no_writer_or_reader_while_it_uploads(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    store, base, _ = http_store
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    url = f"{base}/b.warm"
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"))
    target = "warmcli.bundle.remote_http:Http.upload"  # its digests read, its body not yet
    pushing = Paused(Warm(env), tmp_path / "gate", target, "push", bundle, url)
    writer = sqlite3.connect(bundle, timeout=0, isolation_level=None)
    try:  # the upload holds up no writer and no reader: it sends a copy of the state checked
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(_TOUCH)  # as a write-back's commit does
        writer.execute("COMMIT")
        reader = sqlite3.connect(f"file:{bundle}?mode=ro", uri=True, timeout=0)
        assert reader.execute("SELECT count(*) FROM kernels").fetchone() == (6,)
        reader.close()
        pushed = pushing.go()
    finally:
        writer.close()
        if pushing.proc.poll() is None and not pushing.gate.exists():  # a failure above
            pushing.proc.kill()
            pushing.proc.communicate()
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    body = store.files["/b.warm"]
    put = store.puts[-1]
    assert put["X-Warm-Sha256"] == hashlib.sha256(body).hexdigest()
    assert put["Content-MD5"] == base64.b64encode(hashlib.md5(body).digest()).decode()
    assert body == built[0]  # the state checked, not the commit made during the upload
    sent = tmp_path / "sent.warm"
    sent.write_bytes(body)
    with Bundle.open(sent) as opened:
        assert len(list(opened.each_kernel())) == 6
    with Bundle.open(bundle) as opened:  # the writer's commit, kept
        assert len(list(opened.each_kernel())) == 6
    assert bundle.read_bytes() != built[0]


def test_a_slurm_array_with_a_step_gives_each_task_its_own_shard(
    warm: Warm, tmp_path: Path
) -> None:
    """`sbatch --array=0-12:4` runs tasks 0, 4, 8 and 12 (COUNT 4, MIN 0, STEP 4): they
    are shards 0 to 3, not shard 0 and three errors."""
    from warmcli.runtime.shard import shard_from_environment

    slurm = {"SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}
    stepped = dict(slurm, SLURM_ARRAY_TASK_STEP="4")
    got = [shard_from_environment(dict(stepped, SLURM_ARRAY_TASK_ID=str(i))) for i in (0, 4, 8, 12)]
    assert [str(s) for s in got] == ["0/4", "1/4", "2/4", "3/4"]
    one = {"SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_STEP": "0"}
    assert shard_from_environment(dict(one, SLURM_ARRAY_TASK_ID="5")) is None  # --array=5: all
    off_step = dict(stepped, SLURM_ARRAY_TASK_ID="6")
    from warmcli.errors import ShardError

    with pytest.raises(ShardError, match="SLURM_ARRAY_TASK_STEP"):
        shard_from_environment(off_step)
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"), SLURM_ARRAY_TASK_ID="8", **stepped)
    env.pop("WARM_SHARD", None)
    proc = Warm(env)(
        "run", ROOT / "examples" / "matmul_host.py", "-b", tmp_path / "s.warm", "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["shard"] == "2/4"


def test_what_a_pull_killed_mid_copy_left_is_removed_by_the_next_write(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """A pull's copy into PATH goes through a temporary file beside it: one a SIGKILL
    left there (as large as the bundle) is a dead writer's, removed by the next pull."""
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    target = tmp_path / "p.warm"
    target.write_bytes(built[1])
    env = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    # stopped with the temporary file made, its bytes not yet copied
    copying = Paused(env, tmp_path / "gate", "shutil:copyfileobj", "pull", f"{base}/b.warm", target)
    copying.proc.send_signal(signal.SIGKILL)
    copying.proc.communicate()
    left = [p.name for p in tmp_path.glob(".p.warm.*")]
    assert left and target.read_bytes() == built[1]  # PATH as it was; a temporary beside it
    assert env("pull", f"{base}/b.warm", target).returncode == 0
    assert target.read_bytes() == built[0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".p", "p"))) == [
        "p.warm",
        "p.warm.lock",
    ]


def test_a_pull_the_disk_refuses_names_path_and_leaves_it_as_it_was(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """The download is kept (its copy in WARM_HOME is current); the copy into PATH is
    over the file size limit: one line naming PATH, not warm's own temporary files."""
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"))
    assert warm.with_env(**env)("pull", f"{base}/b.warm", tmp_path / "first.warm").returncode == 0
    target = tmp_path / "p.warm"
    target.write_bytes(built[1])
    limit = len(built[0]) // 2
    limited = lambda: _limited(limit)  # noqa: E731
    pull = [sys.executable, "-m", "warmcli", "pull", f"{base}/b.warm", target]
    proc = subprocess.run(
        pull, capture_output=True, text=True, env=env, cwd=ROOT, preexec_fn=limited
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"warm: error: {target}: "), proc.stderr
    assert "File too large" in proc.stderr and "nothing pulled" in proc.stderr, proc.stderr
    assert ".tmp" not in proc.stderr and "remote" not in proc.stderr, proc.stderr
    assert target.read_bytes() == built[1]
    assert not list(tmp_path.glob(".p.warm*"))


_KILLED_MID_WRITE = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # the cache spills: pages written before the commit
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE blobs SET data = zeroblob(length(data))")
conn.execute("UPDATE kernels SET entry = entry || 'x'")
os.kill(os.getpid(), 9)
"""


def killed_writing(path: Path, script: str, left: str) -> None:
    """A writer of the bundle at `path` (`script`, given the path) killed by SIGKILL: what
    it left beside the bundle (`left`: `-journal`, `-wal`) is not empty."""
    proc = subprocess.run([sys.executable, "-c", script, path], cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL
    assert os.path.getsize(f"{path}{left}") > 0


def old_and_new(store: Store, pair: tuple[bytes, bytes], tmp_path: Path) -> tuple[Path, Path]:
    """The bundle to put in place (`pair[0]`, served at `/b.warm` and as `source.warm`)
    and the one there (`pair[1]`, `t.warm`), as the put-in-place tests start."""
    store.files["/b.warm"] = pair[0]
    source = tmp_path / "source.warm"
    source.write_bytes(pair[0])
    target = tmp_path / "t.warm"
    target.write_bytes(pair[1])
    return source, target


@pytest.mark.parametrize("command", ["pull", "merge"])
def test_a_bundle_put_in_place_of_one_a_killed_writer_left_is_not_rolled_into(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    command: str,
) -> None:
    """The crash journal beside PATH (OUT) is the old file's: played into the new one by
    its next opener, it made the bundle pulled (merged) `corrupt`."""
    store, base, _ = http_store
    source, target = old_and_new(store, built, tmp_path)
    killed_writing(target, _KILLED_MID_WRITE, "-journal")
    env = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    replaced_soundly(env, command, f"{base}/b.warm", source, target, "-journal")


def replaced_soundly(
    env: Any, command: str, url: str, source: Path, target: Path, left: str
) -> None:
    """`warm pull URL TARGET` or `warm merge SOURCE -o TARGET --force` (`command`) succeeds,
    TARGET verifies sound with the source's three tunes, and nothing named TARGET`left`
    (what the old file's writer left) is beside it."""
    if command == "pull":
        proc = env("pull", url, target)
    else:
        proc = env("merge", source, "-o", target, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verified = env("verify", target)
    assert verified.returncode == 0 and "sound" in verified.stdout, (
        verified.stdout + verified.stderr
    )
    assert len(env.json("stats", target)["tunes"]) == 3
    assert not os.path.exists(f"{target}{left}")


@pytest.mark.parametrize("force", [False, True])
def test_a_pull_into_a_folder_says_it_is_one_and_never_suggests_force(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    force: bool,
) -> None:
    """`warm pull URL DIR` said `exists and is not a warm bundle ...: pass --force to
    replace it`; with --force, `nothing pulled: Is a directory`."""
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    folder = tmp_path / "bundles"
    folder.mkdir()
    env = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    proc = env("pull", f"{base}/b.warm", folder, *(["--force"] if force else []))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "a folder" in proc.stderr and "--force" not in proc.stderr, proc.stderr
    assert list(folder.iterdir()) == []


def test_a_pulled_bundle_is_readable_as_any_file_the_user_makes(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """`warm pull URL /opt/app/warm.bundle`, for production processes of another user:
    the pulled file was 0600 (a temporary file's mode), new or replacing a 0644 one, where
    `warm run` and `warm merge` make 0644 under umask 022 and merge keeps OUT's mode."""
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"))
    new, kept = tmp_path / "new.warm", tmp_path / "kept.warm"
    kept.write_bytes(built[1])
    kept.chmod(0o640)
    for target in (new, kept):
        pull = [sys.executable, "-m", "warmcli", "pull", f"{base}/b.warm", target]
        proc = subprocess.run(
            pull,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            preexec_fn=lambda: os.umask(0o022),
        )
        assert proc.returncode == 0, proc.stderr
        assert target.read_bytes() == built[0]
    assert (new.stat().st_mode & 0o777, kept.stat().st_mode & 0o777) == (0o644, 0o640)


def test_no_aws_credentials_are_said_so_not_a_store_unreachable(
    warm: Warm, forked: Any, tmp_path: Path
) -> None:
    pytest.importorskip("boto3")
    env = {k: v for k, v in warm.env.items() if not k.startswith("AWS_")}
    env.update(
        WARM_HOME=str(tmp_path / "home"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",  # never reached: no request is signed
    )
    (tmp_path / "b.warm").write_bytes(b"")
    for args in (("stats", "s3://fleet/b.warm"), ("pull", "s3://fleet/b.warm", tmp_path / "p")):
        proc = forked(Warm(env))(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "no AWS credentials" in proc.stderr and "unreachable" not in proc.stderr, proc.stderr


class _Misbehaving(_OneStore):
    """`_OneStore`, or (its `mode`) a body longer than announced, a 500, a chunked body
    cut short: each with an ETag of its own, so each is a change to download."""

    mode = "ok"

    def answer(self, conn: socket.socket, request: bytes) -> None:
        body, etag = self.body, b'ETag: "%s"\r\n' % self.mode.encode()
        if self.mode == "ok":
            head = b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n" % (etag, len(body))
            conn.sendall(head + body)
        elif self.mode == "longer":  # announces less than it sends
            head = b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n"
            conn.sendall(head % (etag, len(body) - 4096) + body)
        elif self.mode == "500":
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
        else:  # a chunked body cut short
            head = b"HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\n\r\n1000\r\n" % etag
            conn.sendall(head + body[:4096] + b"\r\n")


@pytest.mark.parametrize("mode", ["longer", "500", "chunked-cut"])
def test_a_store_misbehaving_is_one_line_or_the_last_good_copy_with_one_warning(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    mode: str,
) -> None:
    store = _Misbehaving(built[0])
    env = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    try:
        store.mode = mode
        first = env("stats", store.url)
        store.mode = "ok"
        assert env("stats", store.url).returncode == 0
        store.mode = mode
        again = env("stats", "--json", store.url)
        pulled = env("pull", store.url, tmp_path / "p.warm")
    finally:
        store.server.close()
    assert first.returncode == 2 and first.stderr.count("\n") == 1, first.stderr
    assert again.returncode == 0 and again.stderr.count("\n") == 1, again.stderr
    assert "; using the last good copy " in again.stderr, again.stderr  # said alike
    assert len(json.loads(again.stdout)["tunes"]) == 3
    assert pulled.returncode == 2 and "nothing pulled" in pulled.stderr, pulled.stderr
    assert not (tmp_path / "p.warm").exists()
    assert not list((tmp_path / "home" / "remote").glob("*/*.tmp"))


def test_a_push_whose_temporary_copy_the_disk_refuses_is_one_line_and_sends_nothing(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """The state pushed is copied into a temporary file first: a copy the disk refuses (a
    size limit under the bundle's) pushes nothing and says so in one line."""
    store, base, _ = http_store
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"))
    push = [sys.executable, "-m", "warmcli", "push", bundle, f"{base}/b.warm"]
    limit = len(built[0]) // 2
    proc = subprocess.run(
        push, capture_output=True, text=True, env=env, cwd=ROOT, preexec_fn=lambda: _limited(limit)
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not pushed: its temporary copy in " in proc.stderr, proc.stderr
    assert " failed (File too large; " in proc.stderr, proc.stderr
    assert "/b.warm" not in store.files and bundle.read_bytes() == built[0]
