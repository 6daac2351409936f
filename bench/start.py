"""Cold start against hot start of the host example (rows `hot_start`, `hot_vs_disk`).

The bundle is made by the real CLI (`warm run examples/matmul_host.py`). Each start
is a fresh process (`bench/first_result.py`) timed from after its imports to the
workload's first result: cold has no bundle and an empty `WARM_HOME` (it compiles
kernel by kernel and tunes, as the workload would without warm), hot loads the
bundle with `use_bundle` on the machine that warmed it (its `WARM_HOME` remembers
the compiler's version line). Interpreter start-up and `import warmcli` are the same on both sides
and are reported apart, not counted. The hot start's bundle-loading part is its
first run minus a second run on the same runtime (the workload's own compute);
it is held against just reading the same blobs from the SQLite file. The CUDA
example needs a GPU to execute, so only the host one runs here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from bench.rows import ROOT, Row, Size, at_least, at_most, median, ms, python

WORKLOAD = ROOT / "examples" / "matmul_host.py"
CHILD = ROOT / "bench" / "first_result.py"
CUDA_NOTE = "the CUDA example is not timed: executing it needs a GPU"
HOT_TARGET = 50.0
DISK_TARGET = 2.0


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _start(env: dict[str, str], bundle: Path | None) -> dict[str, float]:
    args = [str(CHILD), str(WORKLOAD), *([str(bundle)] if bundle else [])]
    out, _ = python(*args, env=env)
    return json.loads(out)


def starts(size: Size) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="warm-bench-start-") as tmp:
        env = _env(Path(tmp, "home"))
        bundle = Path(tmp, "host.warm")
        python("-m", "warmcli", "run", str(WORKLOAD), "--bundle", str(bundle), env=env)
        _, interpreter = python("-c", "pass", env=env)
        # Cold: nothing of warm's on disk, not even a remembered compiler version.
        cold = [_start(_env(Path(tmp, f"cold{i}")), None) for i in range(size.cold_starts)]
        hot = [_start(env, bundle) for _ in range(size.hot_starts)]
    if any(h["compiled"] or h["measured"] for h in hot):
        raise RuntimeError(f"a hot start compiled or measured: {hot}")
    # Best of each side: noise on a shared machine only ever adds time.
    cold_s = min(c["first"] for c in cold)
    hot_s = min(h["first"] for h in hot)
    again = min(h["again"] for h in hot)
    loading = max(hot_s - again, 0.0)
    disk = min(h["disk"] or 0.0 for h in hot)
    imports = median([h["import"] for h in hot + cold])
    c0 = cold[0]
    start_detail = (
        f"{WORKLOAD.name}, best of {len(cold)} cold / {len(hot)} hot fresh processes: "
        f"cold {ms(cold_s)} (compiled {c0['compiled']}, measured {c0['measured']} tunes), "
        f"hot {ms(hot_s)} (loaded {hot[0]['loaded']}, {hot[0]['hits']} tune hits, compiled 0); "
        f"not counted on either side: interpreter start {ms(interpreter)}, "
        f"warm's imports {ms(imports)}; {CUDA_NOTE}"
    )
    disk_detail = (
        f"hot start's loading part {ms(loading)} (first run {ms(hot_s)} minus a second run "
        f"on the same runtime {ms(again)}, best of each) against reading the "
        f"{hot[0]['loaded']} served kernels' blobs with sqlite3 {ms(disk)}"
    )
    return [
        at_least("hot_start", cold_s / hot_s, HOT_TARGET, start_detail),
        at_most("hot_vs_disk", loading / max(disk, 1e-9), DISK_TARGET, disk_detail),
    ]
