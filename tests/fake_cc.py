"""A C compiler stand-in for a test: a shell script of the test's, written into its folder,
made executable, and named by `WARM_CC` (as a user's wrapper is). Owns nothing beyond the
file it writes; never runs it itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def with_cc(warm: Any, folder: Path, name: str, script: str) -> Any:
    """`warm` (conftest's, forked or not) with `WARM_CC` naming `script`, written to
    `folder / name` and made executable."""
    cc = folder / name
    cc.write_text(script)
    cc.chmod(0o755)
    return warm.with_env(WARM_CC=str(cc))
