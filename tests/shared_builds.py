"""Session-wide builds the tests share (fixtures `tests/conftest.py` registers): each made
once per test process (each pytest-xdist worker), never changed after, and copied or read
by the tests that use it, so that the many files needing the same build do not each make
it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

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
