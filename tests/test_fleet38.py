"""A fleet operator sharing one signed bundle, from the README alone (fleet38).

Real parts only: the CLI and production processes in subprocesses, the system cc (and a
wrapper script around it: another machine's compiler), real SQLite files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import EXAMPLES, Warm

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


def _machine(warm: Warm, home: Path, **env: str) -> Warm:
    return Warm(dict(warm.env, WARM_HOME=str(home), **env))


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
    strict = Warm(dict(fleet.env, WARM_STRICT="1")).production(SERVE, bundle=bundle)
    assert strict == {"h": cold["h"], "kernels": 0, "tunes": 0}
    # what the write-back added is there, unsigned: the newer machine serves it unsigned-free
    # only once signed again, and a re-sign by the release key keeps both machines served
    assert warm("sign", bundle, "--key", key).returncode == 0
    again = newer.production(SERVE, bundle=bundle)
    assert again["h"] == cold["h"] and again["kernels"] == 0
    shutil.rmtree(tmp_path / "cold")
