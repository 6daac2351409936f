"""One start of a workload in a fresh process, timed to its first result (run as a script).

`python bench/first_result.py WORKLOAD [BUNDLE]` imports warm and numpy (with
`numpy.random`, which the example uses: import time is not warm's), then, timed:
loads the bundle (if given) with `use_bundle`, takes the production runtime for
the host and runs the workload once under `Execute` (its first result), then
runs it once more on the same runtime (everything already loaded: what is left
is the workload's own compute and dispatch). It prints one JSON object of seconds
and counts, with the sha256 of every blob the bundle served; it never writes the
bundle.

`python bench/first_result.py --read BUNDLE SHA256...` is the disk floor, in a
fresh process of its own with the same imports: open the SQLite file read-only and
read those blobs with plain `sqlite3`, nothing else; it prints the seconds.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import json  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy.random  # noqa: E402, F401  (the example's first use would import it, timed)

from warmcli import production  # noqa: E402
from warmcli.process_mode import default_collector  # noqa: E402
from warmcli.workload import load_workload  # noqa: E402


def read_blobs(path: Path, digests: list[str]) -> float:
    """Seconds to open the SQLite file and read these blobs, nothing else."""
    started = time.perf_counter()
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    for digest in digests:
        conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
    conn.close()
    return time.perf_counter() - started


def main(workload_path: str, bundle_path: str | None) -> dict[str, object]:
    imported = time.perf_counter()
    workload = load_workload(workload_path)
    begin = time.perf_counter()
    if bundle_path:
        production.use_bundle(bundle_path)
    rt = production.runtime("host")
    workload.function(rt)
    rt.synchronize()
    first = time.perf_counter()
    workload.function(rt)
    rt.synchronize()
    again = time.perf_counter()
    stats = default_collector().reader().total()
    digests: list[str] = []
    if bundle_path:
        bundle = production.bundle()
        assert bundle is not None
        records = [bundle.kernel(k) for k in rt.kernels.loaded_from_bundle()]
        digests = sorted({r.sha256 for r in records if r is not None})
    return {
        "import": imported - STARTED,
        "first": first - begin,
        "again": again - first,
        "digests": digests,
        "compiled": stats.compilation.compiled,
        "loaded": stats.compilation.loaded,
        "measured": stats.autotune.measured,
        "hits": stats.autotune.hits,
    }


if __name__ == "__main__":
    if sys.argv[1] == "--read":
        print(json.dumps({"disk": read_blobs(Path(sys.argv[2]), sys.argv[3:])}))
    else:
        print(json.dumps(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)))
