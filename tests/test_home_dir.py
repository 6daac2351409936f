"""warm's home without `WARM_HOME`: the user cache directory, as platformdirs names it,
found by a serving process without importing platformdirs (it costs a production start
several ms) wherever the answer is plain (Linux, an absolute `XDG_CACHE_HOME` or `HOME`)."""

from __future__ import annotations

import os
import subprocess
import sys

import platformdirs
import pytest

from warmcli import home

CASES = [
    {"XDG_CACHE_HOME": "/srv/cache", "HOME": "/home/u"},
    {"XDG_CACHE_HOME": "/srv/cache/", "HOME": "/home/u"},
    {"HOME": "/home/u"},
    {"HOME": "/home/u/"},
    {"HOME": "/"},
    {"XDG_CACHE_HOME": "", "HOME": "/home/u"},
    {"XDG_CACHE_HOME": "relative/cache", "HOME": "/home/u"},
    {"XDG_CACHE_HOME": "  ", "HOME": "/home/u"},
    {"XDG_CACHE_HOME": "~/c", "HOME": "/home/u"},
    {"HOME": "relative"},
    {},
]


@pytest.mark.parametrize("env", CASES, ids=[repr(c) for c in CASES])
def test_the_home_is_the_user_cache_directory_platformdirs_names(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("XDG_CACHE_HOME", "HOME", "WARM_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    home._platformdirs_cache.cache_clear()
    try:
        expected: str | type[Exception] = platformdirs.user_cache_dir("warm")
    except RuntimeError:
        expected = RuntimeError
    if expected is RuntimeError:
        with pytest.raises(RuntimeError):
            home.home_dir()
    else:
        assert home.home_dir() == expected
    home._platformdirs_cache.cache_clear()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the plain case is Linux's")
def test_a_serving_process_names_its_home_without_importing_platformdirs() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("WARM_HOME", "XDG_CACHE_HOME")}
    code = (
        "import sys; from warmcli import home; print(home.in_home('toolchains.json')); "
        "print('platformdirs' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [os.path.join(platformdirs.user_cache_dir("warm"), "toolchains.json"), "False"]
