"""User trial 61c, fleets sharing one bundle: what a merge, a pull, a push or a shared folder's
writers do to a bundle others read and write meanwhile, with real bundles (`warm run` of the
host example, the system C compiler), the real CLI in processes of their own and real SQLite.

A length a store announces with the spaces HTTP allows around a header's value
(`Content-Length: 311296 `) is that length: the download is taken, not refused as announcing
another.

A merge reads each input in one state: an input a writer commits to meanwhile (a shard's run
still ending, a production write-back into the fleet's bundle) is merged as it was when the
merge began to read it, never its kernels from before that commit and its tunes from after.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, Warm
from raw_store import RawStore

import warmcli.ops.merge_union as merge_union
from warmcli.ops.merge import merge_bundles

# `python -m warmcli ARGS` whose wait for another process's SQLite lock is 1 s, not 60: a
# writer the merge holds back fails at once ("locked"), never waits out the merge it is in
_SHORT_WAIT = (
    "import runpy, warmcli.bundle.file as f; f.LOCK_WAIT_SECONDS = 1.0; "
    "runpy.run_module('warmcli', run_name='__main__', alter_sys=True)"
)


def _shard(warm: Warm, index: int, bundle: Path) -> subprocess.CompletedProcess[str]:
    """`warm run` of the host example's shard `index` of 2 into `bundle` (no verify pass)."""
    args = ["run", EXAMPLES / "matmul_host.py", "--no-verify", "--shard", f"{index}/2"]
    return subprocess.run(
        [sys.executable, "-c", _SHORT_WAIT, *map(str, args), "-b", str(bundle)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=300,
        cwd=ROOT,
    )


def _keys(warm: Warm, bundle: Path) -> tuple[set[str], set[str]]:
    """The kernel keys and the tune keys `bundle` holds (`warm stats --json`)."""
    listed = warm.json("stats", bundle)
    return {k["key"] for k in listed["kernels"]}, {t["key"] for t in listed["tunes"]}


def test_a_merge_reads_an_input_a_writer_commits_to_meanwhile_in_one_state(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the merge read every input's kernels, then every input's tunes, each in a
    statement of its own: shard 1's run committing into the input between the two made an
    output of shard 0's 5 kernels and both shards' 3 tunes (the kernel only shard 1 built
    missing), a state the input never held; `warm verify --workload` of it compiled 1."""
    fleet, out = tmp_path / "fleet.warm", tmp_path / "out.warm"
    assert _shard(warm, 0, fleet).returncode == 0
    before = _keys(warm, fleet)
    writer: list[subprocess.CompletedProcess[str]] = []
    read_tunes = merge_union._write_tunes

    def tunes_once_a_writer_committed(*args: Any, **kwargs: Any) -> Any:
        """The merge's tunes read once shard 1's run has tried to commit into the input."""
        writer.append(_shard(warm, 1, fleet))
        return read_tunes(*args, **kwargs)

    monkeypatch.setattr(merge_union, "_write_tunes", tunes_once_a_writer_committed)
    monkeypatch.setenv("WARM_HOME", warm.env["WARM_HOME"])
    merge_bundles([fleet], out)
    assert len(writer) == 1
    if writer[0].returncode != 0:  # held back by the merge's read: said so in one line
        assert writer[0].stderr.count("\n") == 1 and "locked" in writer[0].stderr
        assert _shard(warm, 1, fleet).returncode == 0  # and stored once it is done
    after = _keys(warm, fleet)
    assert before != after and len(after[0]) == 6 and len(after[1]) == 3  # nothing lost
    assert _keys(warm, out) in (before, after), (before, after, _keys(warm, out))


class _SpacedLength(RawStore):
    """A store on 127.0.0.1 serving `body` whole, its `Content-Length` followed by a space,
    as HTTP allows (the optional whitespace around a field's value is no part of it)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head = b'HTTP/1.1 200 OK\r\nETag: "1"\r\nContent-Length: %d \r\nConnection: close\r\n\r\n'
        conn.sendall(head % len(self.body) + self.body)


def test_a_length_announced_with_a_space_after_it_is_that_length(
    warm: Warm, tmp_path: Path, made_once: Path
) -> None:
    """Before: `download refused: 311296 bytes received, '311296 ' announced`, exit 2 (and
    production served its last good copy with a warning, or, with none, failed)."""
    good = made_once / "good.warm"
    store = _SpacedLength(good.read_bytes())
    try:
        proc = warm("pull", store.url, tmp_path / "pulled.warm")
    finally:
        store.close()
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "pulled.warm").read_bytes() == good.read_bytes()
