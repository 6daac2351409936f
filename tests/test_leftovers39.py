"""Five small wrongs left from stop 38 (leftovers39).

Real parts only: the CLI and production processes in subprocesses, the system cc, NVRTC
for `--arch sm_90` (no GPU), real SQLite files, a local S3-like store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import (
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
)
from forked_python import ForkedPython
from shared_builds import SMALL
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)

# The small example served over WARM_BUNDLE (strict: a miss raises): what it computed.
SERVE = f"""
import sys
sys.path.insert(0, {str(EXAMPLES)!r})
import numpy as np
import warmcli, many_kernels_host as m
rt = warmcli.runtime("host")
m.workload(rt)
r = warmcli.report()
print(len(r.kernels), len(r.tunes))
"""


@pytest.fixture(scope="module")
def signed_small(signed_small_once: tuple[Path, Path, Path]) -> tuple[Path, Path, Path]:
    """The small host example warmed and signed by `ci.key`; the same bundle unsigned
    (`tests/shared_builds.py`'s, made once per test process: the modules importing this
    fixture only read them)."""
    return signed_small_once


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The module's production processes, each a fork of one that imported numpy and
    warmcli (`tests/forked_python.py`): what each serves and says is tested, not how it
    starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)  # (conftest's `warm`'s, its home aside)
    yield server
    server.close()


def _serve(
    env: dict[str, str], url: str, producing: ForkedPython | None = None
) -> subprocess.CompletedProcess[str]:
    """The small example served from `url` by a production process: a fork of `producing`'s
    server where given (`tests/forked_python.py`), else a Python started."""
    env = dict(env, WARM_BUNDLE=url, WARM_STRICT="1", **SMALL)
    if producing is not None:
        return producing.run(SERVE, env=env, cwd=ROOT)
    return subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_a_command_without_trusted_keys_never_replaces_the_copy_production_serves(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],
    s3_like: tuple[S3Like, str],  # noqa: F811
    producing: ForkedPython,
) -> None:
    """A machine's production (under WARM_TRUSTED_KEYS) holds a good copy of the fleet's
    bundle; the store then holds an unsigned one. `warm stats URL` run without trusted keys
    downloaded it over the copy production serves, which then refused it (strict
    production failed to start). A fetch that checks no signature keeps its copy beside
    the keyed one: production keeps serving the last good copy, with one warning."""
    held, base = s3_like
    key, bundle, unsigned = signed_small
    url = f"{base}/fleet.warm"
    assert warm("push", bundle, url).returncode == 0
    machine = dict(warm.env, WARM_HOME=str(tmp_path / "machine"))
    keyed = dict(machine, WARM_TRUSTED_KEYS=f"{key}.pub")
    first = _serve(keyed, url, producing)
    assert first.returncode == 0 and first.stdout == "0 0\n" and not first.stderr, first.stderr
    held.files["/fleet.warm"] = unsigned.read_bytes()
    stats = warm.with_env(WARM_HOME=machine["WARM_HOME"])("stats", url)  # (machine's env)
    assert stats.returncode == 0, stats.stdout + stats.stderr
    again = _serve(keyed, url, producing)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "0 0\n" and "using the last good copy" in again.stderr
    # the keyless copy is the store's unsigned one, kept beside: served without keys
    plain = _serve(machine, url, producing)
    assert plain.returncode == 0 and plain.stdout == "0 0\n" and not plain.stderr, plain.stderr


@pytest.fixture(scope="module")
def cuda_small(cuda_small_once: Path) -> Path:
    """The CUDA example warmed for sm_90 without a GPU (compile-only, NVRTC):
    `tests/shared_builds.py`'s, made once per test process (the modules importing this
    fixture only read it or copy it)."""
    return cuda_small_once


def test_check_without_a_gpu_says_the_cuda_part_of_a_mixed_bundle_is_not_checked(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],
    cuda_small: Path,
) -> None:
    """A host+CUDA bundle (`warm merge` of a host run and an `--arch sm_90` pre-build)
    failed `warm check` on a machine with no GPU (exit 1, each CUDA entry `device
    fingerprint`: "this machine has no cuda device"), though nothing is wrong with it and
    `warm verify` calls it sound. Its CUDA entries are not checked here, and said so (exit
    0); `--arch sm_90` checks them (its pre-built tunes are pending: exit 1, as README says)."""
    _, _, host = signed_small
    mixed = tmp_path / "mixed.warm"
    assert warm("merge", host, cuda_small, "-o", mixed).returncode == 0
    assert warm("verify", mixed).returncode == 0
    done = warm("check", mixed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every entry checked is servable here" in done.stdout, done.stdout
    assert "not checked: 8 cuda kernel(s), 6 cuda tune(s): no cuda device here" in done.stdout
    assert "device fingerprint" not in done.stdout
    doc = json.loads(warm("check", mixed, "--json").stdout)
    assert doc["servable"] and doc["not_checked"] == {"cuda": {"kernels": 8, "tunes": 6}}
    assert warm("check", host).stdout.count("not checked") == 0  # a host bundle: all checked
    armed = warm("check", mixed, "--arch", "sm_90", "--json")
    doc = json.loads(armed.stdout)
    assert armed.returncode == 1 and doc["not_checked"] == {}, armed.stdout
    assert {m["reason"] for m in doc["unservable"]} == {"pending"}, doc["unservable"]
    assert doc["unservable_count"] == 6 and doc["kernels"] == 13


def test_verify_names_a_cubin_row_whose_blob_is_ptx_and_clean_removes_it(
    warm: Warm, tmp_path: Path, cuda_small: Path
) -> None:
    """verify38 made `warm verify` check that a PTX row holds PTX of its arch, but not the
    reverse: a bundle whose `sm_90` (cubin) rows named their PTX twin's blob (its sha256
    right, only the kind wrong) was called sound, and `warm check --arch sm_90` called
    those kernels servable. verify names each such row (exit 1), check calls it unusable,
    `warm clean` removes it as corrupt, and what is left is sound."""
    bundle = tmp_path / "ptx-as-cubin.warm"
    bundle.write_bytes(cuda_small.read_bytes())
    with sqlite3.connect(bundle) as conn:
        conn.execute(
            "UPDATE kernels SET sha256 = (SELECT c.sha256 FROM kernels c WHERE c.arch = "
            "'compute_90' AND c.symbol = kernels.symbol) WHERE arch = 'sm_90'"
        )
    conn.close()
    done = warm("verify", bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("PTX, not a cubin for sm_90") == 8, done.stdout
    checked = json.loads(warm("check", bundle, "--arch", "sm_90", "--json").stdout)
    kernels = [m for m in checked["unservable"] if m["kind"] == "kernel"]
    assert len(kernels) == 8 and all("not a cubin" in m["detail"] for m in kernels), kernels
    cleaned = warm("clean", bundle)
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "(8): corrupt: its blob is not a cubin of its arch" in cleaned.stdout, cleaned.stdout
    assert warm("verify", bundle).returncode == 0
    with sqlite3.connect(bundle) as conn:
        left = conn.execute("SELECT arch, count(*) FROM kernels GROUP BY arch").fetchall()
    conn.close()
    assert left == [("compute_90", 8)], left
    # the untouched bundle: every cubin row holds a cubin of its SM
    assert warm("verify", cuda_small).returncode == 0


def test_a_key_str_that_reads_as_another_json_value_keys_apart_from_it() -> None:
    """A Tunable whose key= returned the string "1" and one returning the int 1 (so "null"
    and None, "true" and True, '[64, "f32"]' and (64, "f32")) gave one tune key: a pick
    measured for one shape was served for another. Such a string is tagged now; every
    other key (every value that cannot collide) keeps today's text, so stored tunes are
    served as before."""
    from warmcli import Kernel, Tunable
    from warmcli.runtime.tune_spec import key_text

    for value, today in (  # today's keys, unchanged
        (1, "1"),
        (None, "null"),
        (True, "true"),
        (1.5, "1.5"),
        ((64, "f32"), '[64, "f32"]'),
        ("M=64 N=32", "M=64 N=32"),
        ("float32[64x64]", "float32[64x64]"),
        ("1e5", "1e5"),  # no JSON value writes it so: no collision
    ):
        assert key_text("t", value) == today, value
    pairs = (("1", 1), ("null", None), ("true", True), ("1.5", 1.5), ('[64, "f32"]', (64, "f32")))
    texts = [key_text("t", v) for pair in pairs for v in pair]
    assert len(set(texts)) == len(texts), texts
    assert key_text("t", "str:1") != key_text("t", "1")  # the tag itself is tagged
    kernel = Kernel("void k(float *x) {}", "k", "P")
    made = [
        Tunable(name="op", candidates={"a": kernel}, launch=_launch, key=lambda x, v=v: v)
        for v in ("1", 1)
    ]
    assert made[0].shape_key((None,)) != made[1].shape_key((None,))


def _launch(rt: object, kernel: object, x: object) -> None:
    pass
