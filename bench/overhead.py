"""warm's own cost: the CLI's start (row `cli_start`) and the whole `warm run` against the
work it has to do (row `pass_overhead`).

`cli_start`: whole fresh processes, alternately, medians: `warm --version` and `warm
stats SMALL.warm` (the host example's bundle), each less `python -c pass`; the row is
the worse of the two, held to 150 ms beyond the interpreter's own start (its ratio is
that excess over the 150 ms). The detail also gives each one's CPU time (user + system,
the kernel's accounting of that process), which load on a shared machine inflates less.

`pass_overhead`: the real CLI (`warm run examples/matmul_host.py --json`) runs in a
fresh process with a fresh `WARM_HOME` and no bundle: CLI start-up, the `CompileOnly`
and `CompileAndAutotune` passes, the bundle's write and the verify pass, all timed
from the outside. That wall time is held against what its own statistics say the
passes spent compiling (`compilation.seconds`) and measuring (`autotune.seconds`):
what is left is warm's own cost and the process's. The median of a few fresh runs is
taken. What bounds the row is measured in the same run and said in its detail: a
process that only imports what the workload imports (`python -c 'import numpy.random'`)
costs that much before any warm could start, so no `warm run` of this workload gets
below (that process + compile + measurement) / (compile + measurement).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.rows import Row, Size, at_most, median, ms, python, python_peak
from bench.start import WORKLOAD, env_for, warm_run

TARGET = 1.3
CLI_BUDGET = 0.150  # seconds a `warm` command may take beyond `python -c pass`
CLI_RUNS = 11


def one_run(tmp: Path, i: int) -> tuple[float, float, float, int, int]:
    """(wall, compile seconds, measurement seconds, kernels compiled, tunes measured)."""
    env = env_for(tmp / f"home{i}")
    bundle = tmp / f"run{i}.warm"
    out, wall = python(
        "-m", "warmcli", "run", str(WORKLOAD), "--bundle", str(bundle), "--json", env=env
    )
    passes = json.loads(out)["passes"]
    compile_s = sum(p["compilation"]["seconds"] for p in passes)
    tune_s = sum(p["autotune"]["seconds"] for p in passes)
    compiled = sum(p["compilation"]["compiled"] for p in passes)
    measured = sum(p["autotune"]["measured"] for p in passes)
    return wall, compile_s, tune_s, compiled, measured


def pass_overhead(size: Size) -> Row:
    with tempfile.TemporaryDirectory(prefix="warm-bench-overhead-") as tmp:
        env = env_for(Path(tmp, "floor-home"))
        runs, floors = [], []
        for i in range(max(1, min(size.repeats, 3))):  # alternately: load hits both
            runs.append(one_run(Path(tmp), i))
            floors.append(python("-c", "import numpy.random", env=env)[1])
    ratio = median([wall / max(c + t, 1e-9) for wall, c, t, _, _ in runs])
    work = median([c + t for _, c, t, _, _ in runs])
    floor = median(floors)
    own = median([r[0] for r in runs]) - floor - work
    wall, compile_s, tune_s, compiled, measured = runs[0]
    detail = (
        f"`warm run {WORKLOAD.name}` as a whole process (CLI start, both passes, bundle "
        f"write, verify), median ratio of {len(runs)} fresh runs; the first: wall {ms(wall)} "
        f"against compile {ms(compile_s)} ({compiled} kernels) + measurement {ms(tune_s)} "
        f"({measured} tunes). Bound: a process that only imports numpy.random takes "
        f"{ms(floor)} (median, this run), so no run of this workload gets below "
        f"{(floor + work) / max(work, 1e-9):.2f}x ({ms(floor)} + work {ms(work)}) / work; "
        f"warm's own, beyond that process and the work: {ms(own)}"
    )
    return at_most("pass_overhead", ratio, TARGET, detail)


def _timed(args: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """One fresh process of this interpreter on `args`, output discarded: (wall seconds,
    CPU seconds, user + system, from the kernel's accounting of that one process)."""
    code, wall, _, cpu = python_peak(*args, env=env)
    if code != 0:
        raise RuntimeError(f"{' '.join(args)} exited {code}")
    return wall, cpu


def cli_start(size: Size) -> Row:
    """`warm --version` and `warm stats SMALL.warm` beyond `python -c pass`, medians."""
    runs = CLI_RUNS if size.repeats > 1 else 1
    with tempfile.TemporaryDirectory(prefix="warm-bench-cli-") as tmp:
        env = env_for(Path(tmp, "home"))
        small = Path(tmp, "small.warm")
        warm_run(env, WORKLOAD, small)  # also writes the bytecode caches: untimed
        commands = {
            "python -c pass": ("-c", "pass"),
            "warm --version": ("-m", "warmcli", "--version"),
            "warm stats SMALL.warm": ("-m", "warmcli", "stats", str(small)),
        }
        python(*commands["warm stats SMALL.warm"], env=env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(runs):  # alternately: load on the machine hits every command
            for name, args in commands.items():
                times[name].append(_timed(args, env))
    walls = {name: median([w for w, _ in t]) for name, t in times.items()}
    cpus = {name: median([c for _, c in t]) for name, t in times.items()}
    base, base_cpu = walls.pop("python -c pass"), cpus.pop("python -c pass")
    beyond = {name: wall - base for name, wall in walls.items()}
    worst = max(beyond, key=lambda name: beyond[name])
    detail = (
        f"whole fresh processes, median of {runs} each, alternately: python -c pass "
        f"{ms(base)}; beyond it: "
        + ", ".join(f"{name} {ms(extra)}" for name, extra in beyond.items())
        + f"; the row is the worse ({worst}) over the {ms(CLI_BUDGET)} budget; CPU time "
        f"(user + system, which load on the machine inflates less) beyond python -c pass's "
        f"{ms(base_cpu)}: "
        + ", ".join(f"{name} {ms(cpu - base_cpu)}" for name, cpu in cpus.items())
    )
    return at_most(
        "cli_start", beyond[worst] / CLI_BUDGET, 1.0, detail, "of 150 ms beyond python -c pass"
    )
