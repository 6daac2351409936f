"""Cold start against hot start of the host example (rows `hot_start`, `hot_vs_disk`).

The bundle is made by the real CLI (`warm run examples/matmul_host.py`). Each start
is a fresh process (`bench/first_result.py`) timed from after its imports to the
workload's first result: cold has no bundle and an empty `WARM_HOME` (it compiles
kernel by kernel and tunes, as the workload would without warm), hot loads the
bundle with `use_bundle` on the machine that warmed it (its `WARM_HOME` remembers
the compiler's version line and holds the host library cache). Interpreter
start-up and `import warmcli` are the same on both sides and are reported apart,
not counted.

`hot_vs_disk` holds the hot start against a start that just reads the bundle's
blobs from disk: the blobs the hot start served, read with plain `sqlite3` in a
fresh process of its own (the disk floor), plus the workload's own run with
nothing left to load (its second run on the hot runtime). Its detail also gives
the hot start's loading part alone (first run minus second run) against the disk
floor. The CUDA example needs a GPU to execute, so only the host one runs here.
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
        digests = hot[0]["digests"]
        disk = min(_read(env, bundle, digests) for _ in range(size.hot_starts))
    # Best of each side: noise on a shared machine only ever adds time.
    cold_s = min(c["first"] for c in cold)
    hot_s = min(h["first"] for h in hot)
    again = min(h["again"] for h in hot)
    loading = max(hot_s - again, 0.0)
    imports = median([h["import"] for h in hot + cold])
    c0 = cold[0]
    start_detail = (
        f"{WORKLOAD.name}, best of {len(cold)} cold / {len(hot)} hot fresh processes: "
        f"cold {ms(cold_s)} (compiled {c0['compiled']}, measured {c0['measured']} tunes), "
        f"hot {ms(hot_s)} (loaded {hot[0]['loaded']}, {hot[0]['hits']} tune hits, compiled 0); "
        f"not counted on either side: interpreter start {ms(interpreter)}, "
        f"warm's imports {ms(imports)}; {CUDA_NOTE}"
    )
    floor = disk + again
    disk_detail = (
        f"hot start {ms(hot_s)} against just reading the {len(digests)} served blobs "
        f"(sqlite3, fresh process) {ms(disk)} plus the workload's run with nothing to load "
        f"{ms(again)} = {ms(floor)}; the hot start's loading part alone {ms(loading)} "
        f"(first run minus second run) is {loading / max(disk, 1e-9):.1f}× the blob read"
    )
    return [
        at_least("hot_start", cold_s / hot_s, HOT_TARGET, start_detail),
        at_most("hot_vs_disk", hot_s / max(floor, 1e-9), DISK_TARGET, disk_detail),
    ]


def _read(env: dict[str, str], bundle: Path, digests: list[str]) -> float:
    out, _ = python(str(CHILD), "--read", str(bundle), *digests, env=env)
    return float(json.loads(out)["disk"])
