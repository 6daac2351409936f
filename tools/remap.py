"""Rewrite `warmcli.<old module>` references to the package layout (one pass per file).

Used once by the move to the layout of ARCHITECTURE.md; kept so that a branch made
before the move can be brought over: `python tools/remap.py FILE...`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MOVES = {
    "device": "backends.base",
    "compiler": "backends.compiler",
    "batch": "backends.batch",
    "toolchain": "backends.toolchain",
    "launch_args": "backends.launch_args",
    "signature": "backends.signature",
    "serving": "backends.serving",
    "devices": "backends.machine",
    "cuda": "backends.cuda",
    "host": "backends.host",
    "launch_mode": "execution.base",
    "process_mode": "execution.process_mode",
    "stream_mode": "execution.stream_mode",
    "statistics": "execution.statistics",
    "bundle": "bundle.store",
    "bundle_files": "bundle.file",
    "signing": "bundle.signing",
    "remote": "bundle.remote",
    "runtime": "runtime.runtime",
    "autotune": "runtime.tune",
    "kernel_cache": "runtime.kernel_cache",
    "explain": "runtime.explain",
    "tune_guard": "runtime.tune_guard",
    "shard": "runtime.shard",
    "workload": "warming.workload",
    "passes": "warming.passes",
    "isolation": "warming.isolation",
    "fanout": "warming.fanout",
    "preflight": "ops.check",
    "integrity": "ops.verify",
    "summary": "ops.stats",
    "clean": "ops.clean",
    "merge": "ops.merge",
    "diff": "ops.diff",
    "render": "cli.render",
}
DOTTED = re.compile(r"\bwarmcli\.([a-z_]+)\b(?!\()")  # `warmcli.runtime(` is the function
FROM_PKG = re.compile(r"^(\s*)from warmcli import ([a-z_]+)\b", re.M)


def _dotted(m: re.Match[str]) -> str:
    new = MOVES.get(m.group(1))
    return f"warmcli.{new}" if new else m.group(0)


def _from_pkg(m: re.Match[str]) -> str:
    new = MOVES.get(m.group(2))
    if new is None:
        return m.group(0)
    parent, _, leaf = f"warmcli.{new}".rpartition(".")
    return f"{m.group(1)}from {parent} import {leaf}"


def remap(text: str) -> str:
    return FROM_PKG.sub(_from_pkg, DOTTED.sub(_dotted, text))


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        old = path.read_text()
        new = remap(old)
        if new != old:
            path.write_text(new)
