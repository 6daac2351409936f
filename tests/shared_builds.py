"""Session-wide builds the tests share (fixtures `tests/conftest.py` registers): each made
once per test process (each pytest-xdist worker), never changed after, and copied or read
by the tests that use it, so that the many files needing the same build do not each make
it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def big_bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A folder of this test process where `tests/big_bundle.build_big` keeps each large
    bundle it built, copied for every later use of the same arguments (several files
    build the same ones); named in the environment, so whichever way a test module imports
    `big_bundle` finds it."""
    from big_bundle import CACHE_FOLDER

    os.environ[CACHE_FOLDER] = str(tmp_path_factory.mktemp("big-bundles"))
    yield
    os.environ.pop(CACHE_FOLDER, None)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory: pytest.TempPathFactory, made_once: Path) -> tuple[bytes, bytes]:
    """The host example's bundle (`made_once`'s), and a second, different one (a `warm run`
    of shard 1/4 of it), as bytes (once per test process): `test_remote.built`'s, which
    many remote-store tests import."""
    from conftest import EXAMPLES, Warm

    folder = tmp_path_factory.mktemp("built")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(folder / "home")))
    other = folder / "other.warm"
    shard = warm("run", EXAMPLES / "matmul_host.py", "-b", other, "--shard", "1/4", "-q")
    assert shard.returncode == 0, shard.stderr
    return (made_once / "good.warm").read_bytes(), other.read_bytes()


SMALL = {"WARM_EXAMPLE_KERNELS": "5"}  # one tunable operation of three, two plain kernels


@pytest.fixture(scope="session")
def signed_small_once(
    tmp_path_factory: pytest.TempPathFactory, forking_servers: Any
) -> tuple[Path, Path, Path]:
    """The small host example (`SMALL`) warmed and signed by `ci.key`; the same bundle
    unsigned (each command forked from the server the tests' warm uses: they only make the
    inputs): `test_leftovers39.signed_small`'s, which several hostile-input modules import."""
    from conftest import EXAMPLES, Warm
    from forked_cli import ForkedWarm

    folder = tmp_path_factory.mktemp("small39")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(folder / "home"), COLUMNS="200", **SMALL)
    warm = ForkedWarm(Warm(env), forking_servers)
    key, bundle, unsigned = folder / "ci.key", folder / "signed.warm", folder / "unsigned.warm"
    assert warm("keygen", key).returncode == 0
    done = warm("run", EXAMPLES / "many_kernels_host.py", "-b", bundle, "--key", key, "-q")
    assert done.returncode == 0, done.stderr
    assert warm("merge", bundle, "-o", unsigned).returncode == 0
    return key, bundle, unsigned


@pytest.fixture(scope="session")
def cuda_small_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """The CUDA example warmed for sm_90 without a GPU (compile-only, NVRTC; forked from
    the server the tests' warm uses): `test_leftovers39.cuda_small`'s, which several
    modules import."""
    from conftest import EXAMPLES, Warm, nvrtc_release_or_skip
    from forked_cli import ForkedWarm

    nvrtc_release_or_skip()
    folder = tmp_path_factory.mktemp("cuda39")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(
        Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")), forking_servers
    )
    bundle = folder / "cuda.warm"
    done = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    return bundle
