"""Five small wrongs left from stop 38 (leftovers39).

Real parts only: the CLI and production processes in subprocesses, the system cc, NVRTC
for `--arch sm_90` (no GPU), real SQLite files, a local S3-like store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)

SMALL = {"WARM_EXAMPLE_KERNELS": "5"}  # one tunable operation of three, two plain kernels

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
def signed_small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The small host example warmed and signed by `ci.key`; the same bundle unsigned."""
    folder = tmp_path_factory.mktemp("small39")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(folder / "home"), **SMALL))
    key, bundle, unsigned = folder / "ci.key", folder / "signed.warm", folder / "unsigned.warm"
    assert warm("keygen", key).returncode == 0
    done = warm("run", EXAMPLES / "many_kernels_host.py", "-b", bundle, "--key", key, "-q")
    assert done.returncode == 0, done.stderr
    assert warm("merge", bundle, "-o", unsigned).returncode == 0
    return key, bundle, unsigned


def _serve(env: dict[str, str], url: str) -> subprocess.CompletedProcess[str]:
    env = dict(env, WARM_BUNDLE=url, WARM_STRICT="1", **SMALL)
    return subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_a_command_without_trusted_keys_never_replaces_the_copy_production_serves(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],
    s3_like: tuple[S3Like, str],  # noqa: F811
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
    first = _serve(keyed, url)
    assert first.returncode == 0 and first.stdout == "0 0\n" and not first.stderr, first.stderr
    held.files["/fleet.warm"] = unsigned.read_bytes()
    stats = Warm(machine)("stats", url)
    assert stats.returncode == 0, stats.stdout + stats.stderr
    again = _serve(keyed, url)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "0 0\n" and "using the last good copy" in again.stderr
    # the keyless copy is the store's unsigned one, kept beside: served without keys
    plain = _serve(machine, url)
    assert plain.returncode == 0 and plain.stdout == "0 0\n" and not plain.stderr, plain.stderr
