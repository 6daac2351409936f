"""warm's home directory: where what outlives one process but is not a bundle is kept.

`WARM_HOME` if it is set, else the user cache directory (`~/.cache/warm` on Linux).
It holds the default bundle, the remembered compiler version lines
(`toolchains.json`) and the host library cache (`host-libraries/`). Everything in it
can be deleted at any time: it is rebuilt on demand. This module only names paths;
it never creates, reads or writes them.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from platformdirs import user_cache_dir


def warm_home() -> Path:
    """`WARM_HOME`, else the user cache directory."""
    home = os.environ.get("WARM_HOME")
    return Path(home) if home else _user_cache(os.environ.get("XDG_CACHE_HOME"))


@functools.cache
def _user_cache(xdg_cache_home: str | None) -> Path:
    """platformdirs' answer, once per value of the variable it reads (it takes ~0.1 ms)."""
    return Path(user_cache_dir("warm"))
