"""What the tests of two warms over one bundle share (`test_upgrade39`, `test_upgrade40`):
the production script that serves a workload (`SERVE`: its results' digest, what it compiled
and tuned, as JSON), a file's digest, and `TwoWarms`, the CLI of either warm (the checkout
given) run from a folder that is no warm checkout, so `python -m warmcli` is the one on
PYTHONPATH. Real processes throughout; nothing here is a fake."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

SERVE = """
import hashlib, json, runpy, sys, warmcli
rt = warmcli.runtime("host")
ys = runpy.run_path(sys.argv[1])["workload"](rt)
digest = hashlib.sha256(b"".join(rt.read(y).tobytes() for y in ys)).hexdigest()
done = warmcli.report()
print(json.dumps({"digest": digest, "compiled": len(done.kernels),
                  "tuned": sorted(t.name.split()[0] for t in done.tunes)}))
"""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class TwoWarms:
    """Either warm's CLI over `folder` (its own `WARM_HOME`), the workload at `folder/wl.py`."""

    def __init__(self, folder: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        self.env = dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")
        self.folder = folder
        self.workload = folder / "wl.py"

    def cli(self, code: Path, *args: object, **env: str) -> subprocess.CompletedProcess[str]:
        """`python -m warmcli ARGS` of the warm checked out at `code`."""
        return subprocess.run(
            [sys.executable, "-m", "warmcli", *map(str, args)],
            capture_output=True, text=True, timeout=300, cwd=self.folder,
            env=dict(self.env, PYTHONPATH=str(code), **env),
        )  # fmt: skip
