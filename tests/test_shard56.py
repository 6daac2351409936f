"""Stop 56: a failed shard in a Dask worker that ignores SIGCHLD; a push of a bundle no
trusted key signed.

A process that ignores SIGCHLD (a daemon's idiom) has the kernel reap its children: Python reads
every child's exit status as 0. A Dask worker doing so ran a shard's `warm run` from a worker
thread (`fanout.run_shard`): a shard that failed read as exit 0, and with its seed (the bundle
bytes it was sent) its data was taken as the shard's bundle. Real parts: the real `warm run`
of a real workload, a real process ignoring SIGCHLD calling `run_shard` from a thread.

`warm push BUNDLE URL` under `WARM_TRUSTED_KEYS` uploaded a bundle none of those keys signed
without a word: production processes trusting only them then serve none of it. Now one warning
line (escaped, on stderr; exit status and `--json` unchanged). Real parts: the real CLI, real
keys (`warm keygen`, `warm sign`), a real HTTP store on 127.0.0.1 (`test_remote`'s); each
command a fork of a process that imported the CLI once (`tests/forked_cli.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import Warm
from test_remote import Store, http_store  # noqa: F401  (the fixture)

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


def test_a_push_under_trusted_keys_warns_where_none_of_them_signed_the_bundle(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    forked: Callable[[Warm], Warm],
) -> None:
    store, base, _ = http_store
    warm = forked(warm)
    bundle = host_bundle(tmp_path / "b\x1b[31m.warm")  # a name a terminal would obey
    key, other = tmp_path / "key", tmp_path / "other"
    assert warm("keygen", key).returncode == 0 and warm("keygen", other).returncode == 0
    trusting = warm.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")
    warning = "is not signed by a trusted key (WARM_TRUSTED_KEYS): production processes"
    for signer in (None, other):  # unsigned, then signed by a key not trusted
        if signer is not None:
            assert warm("sign", bundle, "--key", signer).returncode == 0
        for args in ((), ("--json",)):
            done = trusting("push", bundle, f"{base}/b.warm", *args)
            assert done.returncode == 0, done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("warm: warning: "), done.stderr
            assert warning in lines[0] and "will not serve it" in lines[0]
            assert "\x1b" not in done.stderr  # the bundle's name escaped
            if args:
                assert set(json.loads(done.stdout)) == {"bundle", "url", "sha256", "sent"}
    assert store.files["/b.warm"] == bundle.read_bytes()  # pushed all the same
    unset = warm("push", bundle, f"{base}/u.warm")  # no trusted keys: nothing read, nothing said
    assert unset.returncode == 0 and unset.stderr == "", unset.stderr
    assert warm("sign", bundle, "--key", key).returncode == 0
    signed = trusting("push", bundle, f"{base}/b.warm")
    assert signed.returncode == 0 and signed.stderr == "", signed.stderr
