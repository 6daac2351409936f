"""Stop 56: a failed shard in a Dask worker that ignores SIGCHLD; a push of a bundle no
trusted key signed.

A process that ignores SIGCHLD (a daemon's idiom) has the kernel reap its children: Python reads
every child's exit status as 0. A Dask worker doing so ran a shard's `warm run` from a worker
thread (`fanout.run_shard`): a shard that failed read as exit 0, and with its seed (the bundle
bytes it was sent) its data was taken as the shard's bundle. Real parts: the real `warm run`
of a real workload, a real process ignoring SIGCHLD calling `run_shard` from a thread.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Warm

WORKER = """
import json, signal, sys, threading
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # a daemon's idiom: every exit status reads 0
from warmcli.warming.fanout import run_shard
seed = open(sys.argv[2], "rb").read()
got = []
task = threading.Thread(target=lambda: got.append(run_shard([sys.argv[1]], "0/1", None, seed)))
task.start(); task.join()
code, report, data, error = got[0]
print(json.dumps([code, len(data), error]))
"""


def test_a_failed_shard_in_a_worker_ignoring_sigchld_is_no_success(
    warm: Warm, tmp_path: Path
) -> None:
    ok, fails, seed = tmp_path / "ok.py", tmp_path / "fails.py", tmp_path / "seed.warm"
    ok.write_text("def workload(rt):\n    pass\n")
    fails.write_text("def workload(rt):\n    raise RuntimeError('this shard fails')\n")
    made = warm("run", ok, "--bundle", seed, "--json")
    assert made.returncode == 0, made.stderr
    code, size, error = warm.production(WORKER, fails, seed)
    assert size > 0  # its bundle (the seed) is there: the exit code alone tells it failed
    assert code != 0 and "this shard fails" in error, (code, error)
    code, size, error = warm.production(WORKER, ok, seed)
    assert code == 0 and size > 0, error  # one that finished is still taken
    assert error == ""
