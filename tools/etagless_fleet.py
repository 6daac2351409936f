"""A fleet served by a store that sends no ETag: `python -m http.server` on 127.0.0.1.

`python tools/etagless_fleet.py [N [ROOT]]` warms the host example into a bundle (the real
CLI), serves its folder with Python's own `http.server` (`Last-Modified`, no `ETag`), and
starts N (default 20) production processes one after another, each a fresh interpreter
serving the example with `WARM_BUNDLE` naming that URL, all sharing one `WARM_HOME` (one
machine). It prints how many GETs the server answered with the whole bundle (`200` in its
log) and with none (`304`), and the median wall time of a production process. Given ROOT
(a folder holding another warm's `warmcli`, `git archive REV warmcli | tar -x -C ROOT`),
N processes of that warm (`PYTHONPATH=ROOT`, a home of their own, a copy of the bundle at
a URL of its own) alternate with this one's, so the load of a shared machine hits both
sides alike, and both are said. The first
process starts `RACY_WAIT` seconds after the bundle was written, as a fleet's does long
after a push (a copy fetched within seconds of its store's change is not trusted by its
`Last-Modified`). Owns its temporary folder; never changes warm's files.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RACY_WAIT = 6.0
SERVE = (
    f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
    "import warmcli, matmul_host\n"
    "matmul_host.workload(warmcli.runtime('host'))\n"
)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(count: int, against: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="warm-etagless-") as tmp:
        base = Path(tmp)
        (base / "store").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        bundle = ["-b", str(base / "store" / "b.warm"), "-q"]
        built = subprocess.run(
            [sys.executable, "-m", "warmcli", "run", str(EXAMPLES / "matmul_host.py"), *bundle],
            env=dict(env, WARM_HOME=str(base / "warm-home")),
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            sys.exit(built.stderr)
        port = _port()
        with open(base / "server.log", "w") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                cwd=base / "store",
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        shutil.copy2(base / "store" / "b.warm", base / "store" / "a.warm")  # (its time too)
        sides = {"b": dict(env, WARM_HOME=str(base / "fleet-b"))}
        if against:
            path = os.pathsep.join(filter(None, (str(against), env.get("PYTHONPATH"))))
            sides["a"] = dict(env, WARM_HOME=str(base / "fleet-a"), PYTHONPATH=path)
        walls: dict[str, list[float]] = {side: [] for side in sides}
        try:
            time.sleep(RACY_WAIT)
            for _ in range(count):
                for side, side_env in sides.items():
                    url = f"http://127.0.0.1:{port}/{side}.warm"
                    started = time.perf_counter()
                    proc = subprocess.run(
                        [sys.executable, "-c", SERVE],
                        env=dict(side_env, WARM_BUNDLE=url),
                        cwd=base,  # (not the checkout: `-c` imports from its folder first)
                        capture_output=True,
                        text=True,
                    )
                    walls[side].append(time.perf_counter() - started)
                    if proc.returncode != 0:
                        sys.exit(proc.stderr)
        finally:
            server.terminate()
            server.wait()
        text = (base / "server.log").read_text()
        size = (base / "store" / "b.warm").stat().st_size
        for side, name in (("b", "this warm"), ("a", f"the warm in {against}")):
            if side in walls:
                whole = len(re.findall(rf'"GET /{side}\.warm HTTP/1\.[01]" 200 ', text))
                none = len(re.findall(rf'"GET /{side}\.warm HTTP/1\.[01]" 304 ', text))
                print(
                    f"{name}: {count} production processes, bundle {size} bytes: {whole} GETs "
                    f"answered with the whole bundle, {none} with 304; median start "
                    f"{statistics.median(walls[side]) * 1e3:.0f} ms"
                )


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 20,
        Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else None,
    )
