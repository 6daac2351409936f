"""A fleet that shares one bundle, from the README alone (fleet40): warmed sharded on a
local Dask cluster, pushed to an object store, signed, served by production processes.

Real parts only: the CLI and production processes (each a fork of a process that imported
the CLI, or numpy and warmcli, once: `tests/forked_cli.py`; no test here is of how a
process starts), a real local Dask cluster (worker processes on 127.0.0.1), the system cc,
real SQLite files.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from dask_cluster import SharedCluster
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet38 import SERVE

from warmcli.warming.fanout import CONNECT_TIMEOUT

distributed = pytest.importorskip("distributed")


GROWN = """
import sys
sys.path.insert(0, {examples!r})
import matmul_host
from warmcli import Kernel

DEVICE = "host"
EXTRA = Kernel("void twice(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] *= 2; }}",
               "twice", "Pi")


def workload(rt):
    matmul_host.workload(rt)
    x = rt.buffer(8, "float32")
    rt.launch(EXTRA, x, 8)
"""


@pytest.fixture(scope="module")
def fleet_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet's signing key (its `.pub` beside it)."""
    from warmcli.bundle.key_files import generate_key_pair

    return generate_key_pair(tmp_path_factory.mktemp("keys") / "ci.key")[0]


@pytest.fixture(scope="module")
def scheduler(fleet_key: Path, shared_cluster: SharedCluster) -> Iterator[str]:
    """Two workers whose environment trusts the fleet's key, as the GPU nodes' image that
    also serves production does (`WARM_TRUSTED_KEYS`)."""
    with shared_cluster.using({"WARM_TRUSTED_KEYS": f"{fleet_key}.pub"}) as address:
        yield address


def test_a_dask_run_into_a_signed_bundle_without_a_key_leaves_what_it_held_signed(
    warm: Warm, scheduler: str, fleet_key: Path, tmp_path: Path, forked: Any
) -> None:
    """README, Trust: "Writing keeps what was signed signed"; `warm run` without a key
    "says the new entries are unsigned". A `--dask` run into the fleet's signed bundle
    (its shards re-measure what it held) rewrote it by a merge: every signature was gone
    (`signature: unsigned`) and the held tunes replaced by the shards' newer, unsigned
    measurements, so every production process under the trusted key refused the bundle
    whole; and it said `stored 6 new kernel(s)`, the bundle's whole count, as if all were
    new. Now what it held stays signed, its picks kept, as a local run leaves them."""
    bundle, key = tmp_path / "fleet.warm", tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    first = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--dask", scheduler, "-q")
    assert first.returncode == 0, first.stderr
    assert warm("sign", bundle, "--key", key).returncode == 0
    before = warm.json("stats", bundle)["tunes"]
    again = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--dask", scheduler, "-q")
    assert again.returncode == 0, again.stderr
    trusting = forked(Warm(dict(warm.env, WARM_TRUSTED_KEYS=f"{key}.pub")))
    verified = trusting("verify", bundle)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # (each signature's date is said "(unsigned)": the key signs no date, review52e)
    assert "signature: unsigned" not in verified.stdout, verified.stdout
    assert re.search(r"valid, trusted, covers (\d+) of \1 row", verified.stdout), verified.stdout
    assert "stored 0 new kernel(s) and 0 new tune(s)" in again.stdout
    assert warm.json("stats", bundle)["tunes"] == before  # the picks it held, kept
    served = trusting.production(SERVE, bundle=bundle)
    cold = warm.with_env(WARM_HOME=str(tmp_path / "cold")).production(SERVE)
    assert served == {"h": cold["h"], "kernels": 0, "tunes": 0}
    grown = tmp_path / "grown.py"  # the next release: one kernel more
    grown.write_text(GROWN.format(examples=str(EXAMPLES)))
    more = warm("run", grown, "-b", bundle, "--dask", scheduler, "-q")
    assert more.returncode == 0, more.stderr
    assert "stored 1 new kernel(s) and 0 new tune(s)" in more.stdout
    assert "the 1 new entries are unsigned: sign the bundle again (warm sign)" in more.stdout
    assert trusting.production(SERVE, bundle=bundle) == served  # what it held: still served
    # Under keys that do not trust it, the run is refused before any shard runs, as a
    # local run is, and the bundle is left byte for byte (it was merged into, then refused).
    other = forked(Warm(dict(warm.env, WARM_TRUSTED_KEYS=f"{fleet_key}.pub")))
    held = bundle.read_bytes()
    refused = other("run", grown, "-b", bundle, "--dask", scheduler, "-q")
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert refused.stderr.startswith(f"warm: error: {bundle}: bundle refused: signed only by")
    assert len(refused.stderr.splitlines()) == 1 and bundle.read_bytes() == held


def test_a_port_that_takes_the_connection_and_never_answers_is_one_line_in_seconds(
    warm: Warm, tmp_path: Path
) -> None:
    """README: "A scheduler that does not answer within 5 s is one line and exit 2." An
    operator who gives the port of Dask's dashboard (`tcp://HOST:8787`, an HTTP server
    that waits for a request) or of any listener that accepts and stays silent waited for
    ever: Dask's connect reads the peer's handshake with no time limit, whatever
    `Client(timeout=)` says."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])  # taken, never answered

    threading.Thread(target=accept, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    bundle = tmp_path / "b.warm"
    started = time.perf_counter()
    try:
        proc = warm(
            "run",
            EXAMPLES / "matmul_host.py",
            "-b",
            bundle,
            "--dask",
            address,
            timeout=CONNECT_TIMEOUT + 15,
        )
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert time.perf_counter() - started < CONNECT_TIMEOUT + 10
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"warm: error: dask scheduler {address} unreachable: no answer within "
        f"{CONNECT_TIMEOUT:g} s\n"
    )
    assert not bundle.exists()


def test_a_dask_run_with_a_key_under_trusted_keys_signs_no_row_they_had_not_signed(
    warm: Warm, scheduler: str, fleet_key: Path, tmp_path: Path, forked: Any
) -> None:
    """README, Trust: `warm run --key KEY` signs what it stored, "under trusted keys: with
    only what they had signed, never a row it did not check". The `--dask` run's merge
    signed every row of the bundle: a kernel another hand had added unsigned came out
    signed by the fleet's key, vouched for by a run that never built it.

    And the workers' environment trusts the fleet's key (`scheduler`, as the production
    image's would): each shard's `warm run` into a fresh, unsigned shard bundle was refused
    ("give --key"), `--key` or not, though that bundle is only gathered and merged here,
    where `--key` signs it and the trusted keys judge it."""
    bundle, grown = tmp_path / "fleet.warm", tmp_path / "grown.py"
    trusting = forked(Warm(dict(warm.env, WARM_TRUSTED_KEYS=f"{fleet_key}.pub")))
    args = ("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--dask", scheduler)
    first = trusting(*args, "--key", fleet_key, "-q")
    assert first.returncode == 0, first.stderr
    assert trusting.production(SERVE, bundle=bundle)["kernels"] == 0
    grown.write_text(GROWN.format(examples=str(EXAMPLES)))
    added = warm("run", grown, "-b", bundle, "-q")  # unsigned: no key, none trusted
    assert "the 1 new entries are unsigned" in added.stdout, added.stdout + added.stderr
    fanned = trusting(*args, "--key", fleet_key, "-q")  # (a local run signs it not either)
    assert fanned.returncode == 0, fanned.stderr
    verified = trusting("verify", bundle)  # the added kernel: still signed by no trusted key
    assert verified.returncode == 1, verified.stdout
    assert "not signed by a trusted key" in verified.stdout, verified.stdout


SLOW_VERIFY = """
import os, sys, time
sys.path.insert(0, {examples!r})
import matmul_host

DEVICE = "host"


def workload(rt):
    matmul_host.workload(rt)
    if os.environ.get("FLEET40_HERE"):  # this side's passes (the verify): a long one
        print("verifying", file=sys.stderr, flush=True)
        time.sleep(30)
"""


def test_ctrl_c_in_the_verify_pass_of_a_dask_run_says_what_was_kept(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """README, On a Dask cluster: what the shards built "is merged into `--bundle`, as it is
    on Ctrl-C (`interrupted: N kernel(s) and M tune(s) stored are kept`, exit 130)". A
    Ctrl-C once the shards were merged, in the verify pass here, said only `warm:
    interrupted`, as if nothing were kept; a local run says what it stored."""
    workload, bundle = tmp_path / "slow.py", tmp_path / "fleet.warm"
    workload.write_text(SLOW_VERIFY.format(examples=str(EXAMPLES)))
    here = Warm(dict(warm.env, FLEET40_HERE="1"))
    proc = here.popen("run", workload, "-b", bundle, "--dask", scheduler, "-q")
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the workload's output goes to stderr; the verify began
            if line.startswith("verifying"):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == (
        "warm: interrupted: 6 kernel(s) and 3 tune(s) stored are kept"
    ), err
