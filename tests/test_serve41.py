"""Serving one kernel, hot (bench row `serve_per_kernel`): the bound its detail names.

The bound's "row read and checked" is the runtime's read (`BundleLookup._kernel`: the
row prefetched, then `Bundle.kernel(key, fetched, keyed=True)`), not a listing's, which
also hashes a host row's key again from its components (~1.7 µs a row the runtime never
pays): a row whose components name another kernel is served by the runtime, keyed from
its own kernel, so the bound reads it too. Real CLI (`warm run`), a real bundle, the
system C compiler.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from bench import generated
from bench.serve import _floor

SERVE = """
import json, runpy, sys
from warmcli import production
from warmcli.execution.process_mode import default_collector
rt = production.runtime("host")
runpy.run_path(sys.argv[1])["workload"](rt)
stats = default_collector().reader().total().compilation
print(json.dumps({"compiled": stats.compiled, "loaded": stats.loaded}))
"""


def test_the_bound_reads_rows_as_the_runtime_reads_them(warm: Warm, tmp_path: Path) -> None:
    workload = generated.write(tmp_path / "gen.py", 3)
    bundle = tmp_path / "served.warm"
    made = warm("run", workload, "--bundle", bundle)
    assert made.returncode == 0, made.stderr
    with sqlite3.connect(bundle) as conn:  # one row's components name another kernel
        (comps,) = conn.execute("SELECT components FROM kernels ORDER BY rowid DESC").fetchone()
        other = dict(json.loads(comps), kernel="0" * 64)
        conn.execute(
            "UPDATE kernels SET components = ? WHERE rowid = (SELECT max(rowid) FROM kernels)",
            (json.dumps(other, sort_keys=True),),
        )
    conn.close()
    # The runtime serves it: it keyed the row from its own kernel.
    assert warm.production(SERVE, workload, bundle=bundle) == {"compiled": 0, "loaded": 3}
    figures = _floor(workload, bundle, Path(warm.env["WARM_HOME"]))
    assert len(figures) == 6 and all(0 < f < 1 for f in figures)
