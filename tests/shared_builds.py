"""Session-wide builds the tests share (fixtures `tests/conftest.py` registers): each made
once per test process (each pytest-xdist worker), never changed after, and copied or read
by the tests that use it, so that the many files needing the same build do not each make
it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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
