"""Whole fresh processes: cold against hot start, hot against the floor, and the imports.

Rows `hot_start` (the host example), `hot_start_generated` (a generated workload of
`Size.generated` tiny kernels), `hot_vs_floor`, `import` and, on a GPU, `hot_start_cuda`
(the CUDA example) and `hot_start_cuda_generated`. Every start is a fresh
process (`python -m bench.first_result`) timed whole, from `exec` to exit: interpreter
start, imports, the bundle's opening, the workload's first result. Cold has no bundle
and an empty `WARM_HOME` (it compiles and tunes kernel by kernel, as the workload would
without warm); hot loads the bundle `warm run` made (the real CLI) on the machine that
warmed it. The floor is what no cache can beat: a process that only imports numpy
(`python -m bench.floor`, launched as the hot child is) plus the workload's own run with
every kernel already in memory (its second run inside the hot processes). The floor's
processes run right after each hot one, so load on the machine hits both sides alike.
What bounds `hot_vs_floor` is measured beside the floor, alternately with it: a process
that imports numpy.random and warm's serving names (`SERVING`, as `python -m bench.floor
serving`) and does nothing else; no hot process imports less, so (that process + the
run) / floor is the least the row can reach with warm's imports as they are, and the
detail splits the hot process's excess over the floor into those imports, the first
result (opening the bundle, loading kernels, and one run more than the floor's) and the
rest, itself split into what is measured apart on the machine's monotonic clock, which
the children read too: the workload file's import, the exit (from the hot child's last
line, warm's exit handler then the interpreter's teardown, against the floor's from its
last line) and the start (to the child's first line, against the floor's), and what is
left of it.
`import` holds `import warmcli` against `import numpy`, fresh processes, medians,
interleaved. Medians throughout: on a shared machine a figure is noisy, and the two
sides of a ratio are always measured in the same run, alternately. Every process imports
from bytecode, as an installed package does (numpy's is compiled when it is installed):
warm's is written once, to a cache folder beside the bench's temporary files
(`PYTHONPYCACHEPREFIX`), never into the checkout, even where the caller's environment
says not to write bytecode.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import generated
from bench.rows import ROOT, Row, Size, at_least, at_most, median, ms, python, skipped

WORKLOAD = ROOT / "examples" / "matmul_host.py"
CUDA_WORKLOAD = ROOT / "examples" / "matmul_cuda.py"
CHILD = "bench.first_result"  # run with -m: imported from bytecode, as a production module is
CUDA_NOTE = "the CUDA example: `hot_start_cuda`, on a GPU"
HOST_TARGET = 3.0
GENERATED_TARGET = 40.0
FLOOR_TARGET = 1.25
IMPORT_TARGET = 1.15
IMPORT_RUNS = 11
# What a workload imports to be served: the `import` row's third figure, and the floor's bound.
SERVING = "import numpy.random; from warmcli import Kernel, Runtime, Tunable, use_bundle"
FLOOR = "bench.floor"  # numpy.random imported, its first and last line's clock printed
# warm's bytecode, shared by every bench process (outside the checkout).
PYCACHE = Path(tempfile.gettempdir(), "warm-bench-pycache")


def env_for(home: Path) -> dict[str, str]:
    """The environment of a fresh process with `home` as its `WARM_HOME`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a production process imports from bytecode
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env["WARM_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return env


def start(env: dict[str, str], workload: Path, bundle: Path | None) -> dict[str, float]:
    """One fresh process's start: its JSON, with `wall` (the whole process) added, and its
    start (to its first line), exit handlers and teardown (after its last), in seconds."""
    spawned = time.perf_counter()
    out, wall = python("-m", CHILD, str(workload), *([str(bundle)] if bundle else []), env=env)
    result, handled = out.splitlines()
    child = json.loads(result)
    ended, exited = spawned + wall, float(handled)
    start_s, handlers = child["started"] - spawned, exited - child["ended"]
    return {**child, "wall": wall, "start": start_s, "handlers": handlers, "down": ended - exited}


def floor_process(env: dict[str, str]) -> tuple[float, float, float]:
    """A process that only imports numpy.random: (wall, start to its first line, exit after
    its last), in seconds, on the clock `start` reads."""
    spawned = time.perf_counter()
    out, wall = python("-m", FLOOR, env=env)
    first, last = map(float, out.split())
    return wall, first - spawned, spawned + wall - last


def warm_run(env: dict[str, str], workload: Path, bundle: Path) -> None:
    python("-m", "warmcli", "run", str(workload), "--bundle", str(bundle), env=env)


def _compare(
    tmp: Path,
    name: str,
    workload: Path,
    cold_n: int,
    hot_n: int,
    beside: Callable[[dict[str, str]], None] | None = None,
) -> dict[str, object]:
    """Cold and hot starts, alternately; `beside(env)` runs right after each hot one."""
    env = env_for(tmp / f"{name}-home")
    bundle = tmp / f"{name}.warm"
    warm_run(env, workload, bundle)
    cold, hot = [], []
    for i in range(max(cold_n, hot_n)):  # alternately: load on the machine hits both sides
        if i < cold_n:  # nothing of warm's on disk, not even a remembered compiler version
            cold.append(start(env_for(tmp / f"{name}-cold{i}"), workload, None))
        if i < hot_n:
            hot.append(start(env, workload, bundle))
            if beside is not None:
                beside(env)
    if any(h["compiled"] or h["measured"] for h in hot):
        raise RuntimeError(f"a hot start compiled or measured: {hot}")
    return {"cold": cold, "hot": hot}


def _compare_generated(tmp: Path, size: Size, cuda: bool = False) -> dict[str, object]:
    """`_compare` of the generated workload of `Size.generated` kernels (CUDA's if `cuda`),
    with half the cold starts: each compiles every kernel, one by one."""
    name = "generated-cuda" if cuda else "generated"
    path = generated.write(tmp / f"{name.replace('-', '_')}.py", size.generated, cuda=cuda)
    return _compare(tmp, name, path, max(1, size.cold_starts // 2), size.hot_starts)


def _m(starts: list[dict[str, float]], key: str) -> float:
    return median([s[key] for s in starts])


def starts(size: Size) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="warm-bench-start-") as tmp_name:
        tmp = Path(tmp_name)
        floors: list[tuple[float, float, float]] = []
        servings: list[float] = []

        def beside(env: dict[str, str]) -> None:  # alternately: load hits every side alike
            floors.append(floor_process(env))
            servings.append(python("-m", FLOOR, "serving", env=env)[1])

        host = _compare(tmp, "host", WORKLOAD, size.cold_starts, size.hot_starts, beside)
        gen = _compare_generated(tmp, size)
        env = env_for(tmp / "host-home")
        floor_imports, serving_imports = median([f[0] for f in floors]), median(servings)
        floor_start, floor_exit = median([f[1] for f in floors]), median([f[2] for f in floors])
        interpreter = median([python("-c", "pass", env=env)[1] for _ in range(size.hot_starts)])
    rows = [
        _cold_hot(name, what, result, target, f"); interpreter alone {ms(interpreter)}")
        for name, what, result, target in (
            ("hot_start", WORKLOAD.name, host, HOST_TARGET),
            ("hot_start_generated", f"{size.generated} generated kernels", gen, GENERATED_TARGET),
        )
    ]
    hot = host["hot"]
    assert isinstance(hot, list)
    hot_s, again = _m(hot, "wall"), _m(hot, "again")
    floor = floor_imports + again
    warm_imports = serving_imports - floor_imports
    first = _m(hot, "first")  # the floor runs the workload once, as the hot process's `again`
    rest = hot_s - floor - warm_imports - first
    exit_s = _m(hot, "handlers") + _m(hot, "down")
    loading, started = _m(hot, "workload"), _m(hot, "start")
    left = rest - loading - (exit_s - floor_exit) - (started - floor_start)
    floor_detail = (
        f"{WORKLOAD.name}: hot process {ms(hot_s)} against the floor {ms(floor)} = a process "
        f"that imports numpy {ms(floor_imports)} + the workload's run with its kernels "
        f"already in memory {ms(again)}; of the excess {ms(hot_s - floor)}: warm's serving "
        f"imports {ms(warm_imports)} (a process that only imports numpy.random and warm's "
        f"serving names: {ms(serving_imports)}), the first result {ms(first)} (opening "
        f"the bundle, loading kernels, one run more than the floor's), the rest {ms(rest)}: "
        f"the workload file's import {ms(loading)}, exit {ms(exit_s)} (warm's handler "
        f"{ms(_m(hot, 'handlers'))}, teardown {ms(_m(hot, 'down'))}) against the floor's "
        f"{ms(floor_exit)}, start to the first line {ms(started)} against the floor's "
        f"{ms(floor_start)}, left {ms(left)}; bound by warm's imports alone: "
        f"{(serving_imports + again) / floor:.2f}×; medians; {CUDA_NOTE}"
    )
    rows.append(at_most("hot_vs_floor", hot_s / floor, FLOOR_TARGET, floor_detail))
    return rows


def cuda_start(size: Size) -> list[Row]:
    """`hot_start_cuda`: the CUDA example's cold and hot starts, whole fresh processes, as
    `hot_start` times the host example's (the CUDA context's creation on both sides); and
    `hot_start_cuda_generated`, the same of `Size.generated` CUDA kernels, as
    `hot_start_generated`."""
    from warmcli.backends.opening import cuda_available

    if not cuda_available():
        return [
            skipped("hot_start_cuda", f"≥ {HOST_TARGET:g}×", "skipped: no GPU"),
            skipped("hot_start_cuda_generated", f"≥ {GENERATED_TARGET:g}×", "skipped: no GPU"),
        ]
    with tempfile.TemporaryDirectory(prefix="warm-bench-cuda-start-") as tmp_name:
        tmp = Path(tmp_name)
        result = _compare(tmp, "cuda", CUDA_WORKLOAD, size.cold_starts, size.hot_starts)
        gen = _compare_generated(tmp, size, cuda=True)
    return [
        _cuda_row("hot_start_cuda", CUDA_WORKLOAD.name, result, HOST_TARGET),
        _cuda_row(
            "hot_start_cuda_generated",
            f"{size.generated} generated CUDA kernels",
            gen,
            GENERATED_TARGET,
        ),
    ]


def _cuda_row(name: str, what: str, result: dict[str, object], target: float) -> Row:
    """A CUDA cold/hot row of `what` on the GPU, with the bound the CUDA context puts on it."""
    cold, hot = result["cold"], result["hot"]
    assert isinstance(cold, list) and isinstance(hot, list)
    # what serving adds to the first run: the first result less opening and a second run
    serving = _m(hot, "first") - _m(hot, "opened") - _m(hot, "again")
    bound = _m(cold, "wall") / (_m(hot, "wall") - max(serving, 0.0))
    more = (
        f", a second run {ms(_m(hot, 'again'))}; the bundle and the GPU opened in "
        f"{ms(_m(hot, 'opened'))} of the first, so serving added {ms(serving)}); bound: a hot "
        f"start serving in no time at all reaches {bound:.2f}×"
    )
    return _cold_hot(name, f"{what} on the GPU", result, target, more)


def _cold_hot(name: str, what: str, result: dict[str, object], target: float, more: str) -> Row:
    """A cold/hot row of `_compare`'s `result`, its detail ending with `more`."""
    cold, hot = result["cold"], result["hot"]
    assert isinstance(cold, list) and isinstance(hot, list)
    cold_s, hot_s = _m(cold, "wall"), _m(hot, "wall")
    detail = (
        f"{what}, whole fresh processes, median of {len(cold)} cold / {len(hot)} hot: "
        f"cold {ms(cold_s)} (compiled {cold[0]['compiled']}, measured "
        f"{cold[0]['measured']} tunes), hot {ms(hot_s)} (loaded {hot[0]['loaded']}, "
        f"{hot[0]['hits']} tune hits, compiled 0; of it imports {ms(_m(hot, 'imports'))}, "
        f"to first result {ms(_m(hot, 'first'))}{more}"
    )
    return at_least(name, cold_s / hot_s, target, detail)


def imports(size: Size) -> list[Row]:
    """`import warmcli` against `import numpy`, fresh processes, alternately, medians."""
    env = env_for(Path(tempfile.gettempdir(), "warm-bench-import-home"))
    runs = IMPORT_RUNS if size.repeats > 1 else 1
    numpy_s, warm_s, serving_s = [], [], []
    python("-c", SERVING, env=env)  # writes the bytecode caches: untimed
    for _ in range(runs):
        numpy_s.append(python("-c", "import numpy", env=env)[1])
        warm_s.append(python("-c", "import warmcli", env=env)[1])
        serving_s.append(python("-c", SERVING, env=env)[1])
    n, w, s = median(numpy_s), median(warm_s), median(serving_s)
    detail = (
        f"median of {runs} fresh processes each: `import warmcli` {ms(w)}, `import numpy` "
        f"{ms(n)}; what a workload imports to be served (`{SERVING}`) {ms(s)}"
    )
    return [at_most("import", w / n, IMPORT_TARGET, detail, "of import numpy")]
