"""A fleet operator sharing one signed bundle, from the README alone (fleet38).

Real parts only: the CLI and production processes (each a fork of a process that imported
the CLI, or numpy and warmcli, once: `tests/forked_cli.py`; no test here is of how a
process starts), the system cc (and a wrapper script around it: another machine's
compiler), real SQLite files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, Warm
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


SERVE = f"""
import hashlib, json, sys
sys.path.insert(0, {str(EXAMPLES)!r})
import numpy as np
import warmcli, matmul_host as m
rt = warmcli.runtime("host")
rng = np.random.default_rng(0)
h = hashlib.sha256()
for M, N, K in m.SHAPES:
    a = rt.upload(rng.standard_normal((M, K), dtype=np.float32))
    b = rt.upload(rng.standard_normal((K, N), dtype=np.float32))
    bias = rt.upload(rng.standard_normal(N, dtype=np.float32))
    c = rt.buffer((M, N), "float32"); out = rt.buffer(M, "float32")
    rt.tune(m.MATMUL, a, b, c, M, N, K)
    rt.launch(m.BIAS_RELU, c, bias, M, N)
    rt.launch(m.ROW_SUM, c, out, M, N)
    h.update(np.asarray(rt.read(out)).tobytes())
r = warmcli.report()
print(json.dumps({{"h": h.hexdigest(), "kernels": len(r.kernels), "tunes": len(r.tunes)}}))
"""


def _machine(warm: Any, home: Path, **env: str) -> Any:
    """Another machine's warm (its own home): its commands forked as `warm`'s are."""
    return warm.with_env(WARM_HOME=str(home), **env)


def test_a_write_back_by_another_compiler_leaves_the_signed_tunes_signed(
    warm: Warm, tmp_path: Path
) -> None:
    """README, Trust: "a production write-back leave[s] the signed rows as they were, but
    what [it adds] is unsigned". A machine whose C compiler is a wrapper script misses
    every kernel and re-measures every tune (its picks were measured on another build);
    writing back replaced the three signed tune rows with unsigned ones, so every other
    machine of the fleet, under the trusted key, then missed them (`warm check` exit 1,
    `unsigned`; strict production raised StrictMissError)."""
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    bundle = tmp_path / "fleet.warm"
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--key", key, "-q")
    assert done.returncode == 0, done.stderr
    trusted = {"WARM_TRUSTED_KEYS": f"{key}.pub"}
    cold = _machine(warm, tmp_path / "cold").production(SERVE, bundle=None)
    wrapper = tmp_path / "cc-new"
    wrapper.write_text('#!/bin/sh\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    newer = _machine(
        warm, tmp_path / "newer", WARM_CC=str(wrapper), WARM_BUNDLE_WRITE="1", **trusted
    )
    served = newer.production(SERVE, bundle=bundle)
    assert served["h"] == cold["h"] and served["kernels"] == 6
    fleet = _machine(warm, tmp_path / "fleet", **trusted)
    check = fleet("check", bundle)
    assert check.returncode == 0, check.stdout + check.stderr
    strict = fleet.with_env(WARM_STRICT="1").production(SERVE, bundle=bundle)
    assert strict == {"h": cold["h"], "kernels": 0, "tunes": 0}
    # what the write-back added is there, unsigned: the newer machine serves it unsigned-free
    # only once signed again, and a re-sign by the release key keeps both machines served
    assert warm("sign", bundle, "--key", key).returncode == 0
    again = newer.production(SERVE, bundle=bundle)
    assert again["h"] == cold["h"] and again["kernels"] == 0
    shutil.rmtree(tmp_path / "cold")


def _produce(servers: Any, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -c code` in `env`: a fork of `servers`' production server of `env`
    (`tests/forked_python.py`, as `machine.production`'s), its output and exit code as
    they are (a refusal's too)."""
    return servers.pythons(env).run(code, env=env, cwd=ROOT)  # type: ignore[no-any-return]


def _serve(machine: Warm, url: str, servers: Any) -> tuple[dict[str, object], str]:
    """A strict production process serving `url`: what it computed, and its stderr."""
    env = dict(machine.env, WARM_BUNDLE=url, WARM_STRICT="1")
    proc = _produce(servers, SERVE, env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_a_store_holding_a_bundle_the_trusted_keys_refuse_leaves_the_last_good_copy_served(
    warm: Warm,
    tmp_path: Path,
    s3_like: tuple[S3Like, str],  # noqa: F811
    forking_servers: Any,
) -> None:
    """Another team pushes an unsigned bundle over the fleet's (or one signed only by a key
    since rotated out): a machine holding a good copy downloaded it, published it over
    that copy, and was then refused (`SignatureError`: production failed to start, `warm
    check` exit 2, naming the local copy, not the URL), though README says a store that
    sends no sound bundle leaves the last good copy served with one warning. Under trusted
    keys the download is refused as such; `warm pull` pulls nothing (exit 2)."""
    held, base = s3_like
    old, new = tmp_path / "old.key", tmp_path / "new.key"
    assert warm("keygen", old).returncode == 0 and warm("keygen", new).returncode == 0
    bundle = tmp_path / "fleet.warm"
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--key", new, "-q")
    assert done.returncode == 0, done.stderr
    unsigned, old_only = tmp_path / "other.warm", tmp_path / "old-only.warm"
    assert warm("merge", bundle, "-o", unsigned).returncode == 0
    shutil.copy(unsigned, old_only)
    assert warm("sign", old_only, "--key", old).returncode == 0
    url = f"{base}/fleet.warm"
    assert warm("push", bundle, url).returncode == 0
    machine = _machine(warm, tmp_path / "machine", WARM_TRUSTED_KEYS=f"{new}.pub")
    served, said = _serve(machine, url, forking_servers)
    assert served["kernels"] == served["tunes"] == 0 and not said
    for planted, why in ((unsigned, "unsigned"), (old_only, "signed only by untrusted")):
        held.files["/fleet.warm"] = planted.read_bytes()
        again, said = _serve(machine, url, forking_servers)
        assert again == served
        assert f"{url}: download refused: bundle refused: {why}" in said
        assert "using the last good copy" in said
        check = machine("check", url)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stderr.count("\n") == 1 and "using the last good copy" in check.stderr
        pulled = machine("pull", url, tmp_path / "pulled.warm")
        assert pulled.returncode == 2 and pulled.stderr.count("\n") == 1, pulled.stderr
        assert f"{why}" in pulled.stderr and "nothing pulled" in pulled.stderr
        assert not (tmp_path / "pulled.warm").exists()
    held.files["/fleet.warm"] = bundle.read_bytes()  # the fleet's again: served, no warning
    assert _serve(machine, url, forking_servers) == (served, "")


def test_a_run_into_a_new_bundle_under_trusted_keys_without_a_key_is_refused_before_it(
    warm: Warm, tmp_path: Path
) -> None:
    """A CI job whose environment trusts the release key (`WARM_TRUSTED_KEYS`) and forgets
    `--key`: `warm run` into a new bundle compiled and measured everything, stored it,
    then its verify pass refused what it had just stored (exit 2, `bundle refused:
    unsigned`), naming no fix. As with a `--key` no trusted key matches, it is refused
    before the run, in one line naming `--key`."""
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    ci = _machine(warm, tmp_path / "ci", WARM_TRUSTED_KEYS=f"{key}.pub")
    bundle = tmp_path / "new.warm"
    done = ci("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--key" in done.stderr and "WARM_TRUSTED_KEYS" in done.stderr
    assert not bundle.exists()
    signed = ci("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--key", key, "-q")
    assert signed.returncode == 0, signed.stderr


def test_a_url_the_trusted_keys_refuse_is_named_by_its_url_not_its_local_copy(
    warm: Warm,
    tmp_path: Path,
    s3_like: tuple[S3Like, str],  # noqa: F811
    host_bundle: Callable[[Path], Path],
    forking_servers: Any,
) -> None:
    """A first start on a machine whose store holds an unsigned bundle: `warm check URL`
    and production were refused in one line naming `WARM_HOME/remote/<hash>/bundle.warm`,
    a file the operator never named and no script can map back to the URL."""
    held, base = s3_like
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    unsigned = host_bundle(tmp_path / "other.warm")  # the host example's, as `warm run` makes it
    held.files["/other.warm"] = unsigned.read_bytes()
    url = f"{base}/other.warm"
    machine = _machine(warm, tmp_path / "machine", WARM_TRUSTED_KEYS=f"{key}.pub")
    check = machine("check", url)
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stderr == f"warm: error: {url}: bundle refused: unsigned, and " + (
        "the trusted keys (WARM_TRUSTED_KEYS or trusted_keys=) ask for a signature by one of them\n"
    )
    env = dict(machine.env, WARM_BUNDLE=url)
    code = "import warmcli\ntry:\n    warmcli.runtime('host')\n"
    code += "except warmcli.SignatureError as e:\n    print(e)"
    proc = _produce(forking_servers, code, env)
    assert proc.stdout.startswith(f"{url}: bundle refused: unsigned"), proc.stdout + proc.stderr
