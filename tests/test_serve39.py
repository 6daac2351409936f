"""serve39: a build judged once per toolchain is still judged by its own components.

`BundleLookup.record` keeps one `why_not` verdict per target for the rows a hot start
serves (built by the target's own toolchain, arch and backend, their components naming
that toolchain); a row whose components name another toolchain is judged by itself,
whatever was served before it in the same process. A real bundle made by `warm run`
(host cc), one row edited with plain SQL, served by a production process of its own (a
fork of one that imported numpy and warmcli once, `tests/forked_cli.py`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
from warmcli import Kernel

SOURCE = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
KERNELS = [Kernel(SOURCE, "touch", "Pi", defines={"V": i}) for i in range(4)]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for kernel in KERNELS:
        runtime.launch(kernel, buffer, 1)
    runtime.synchronize()
"""
SERVED = (
    "import json, sys, runpy\n"
    "import warmcli\n"
    "from warmcli.execution.process_mode import default_collector\n"
    "runpy.run_path(sys.argv[1])['workload'](warmcli.runtime('host'))\n"
    "c = default_collector().reader().total().compilation\n"
    "print(json.dumps({'loaded': c.loaded, 'compiled': c.compiled}))\n"
)


def test_a_row_naming_another_toolchain_after_served_ones_is_not_served(
    warm: Warm, tmp_path: Path
) -> None:
    """The last row stored (the last launched: its three siblings are served first, the
    verdict on their toolchain kept) names another toolchain in its components: it is
    rebuilt, never served under the verdict kept for the others."""
    workload = tmp_path / "four.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stderr[-2000:]
    assert warm.production(SERVED, workload, bundle=bundle) == {"loaded": 4, "compiled": 0}
    conn = sqlite3.connect(bundle)
    conn.execute(
        "UPDATE kernels SET components = json_set(components, '$.toolchain', 'cc:another') "
        "WHERE rowid = (SELECT max(rowid) FROM kernels)"
    )
    conn.commit()
    conn.close()
    assert warm.production(SERVED, workload, bundle=bundle) == {"loaded": 3, "compiled": 1}
