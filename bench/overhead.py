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
from typing import NamedTuple

from bench.rows import Row, Size, at_most, median, ms, python, python_peak
from bench.start import WORKLOAD, env_for, warm_run
from warmcli.backends.batch import capped_jobs
from warmcli.bundle.store import Bundle

TARGET = 1.3
CLI_BUDGET = 0.150  # seconds a `warm` command may take beyond `python -c pass`
CLI_RUNS = 11


class Run(NamedTuple):
    wall: float
    compile_s: float  # the batches' walls
    tune_s: float
    compiled: int
    measured: int
    processes: int  # compiler processes
    process_s: float  # the sum of the compiler processes' own walls
    pass_s: dict[str, float]  # each pass's wall, as the run reports it


def one_run(tmp: Path, i: int) -> Run:
    env = env_for(tmp / f"home{i}")
    bundle = tmp / f"run{i}.warm"
    out, wall = python(
        "-m", "warmcli", "run", str(WORKLOAD), "--bundle", str(bundle), "--json", env=env
    )
    passes = json.loads(out)["passes"]
    with Bundle.open(bundle) as opened:
        process_s = sum(k.seconds for k in opened.each_kernel())
    return Run(
        wall,
        sum(p["compilation"]["seconds"] for p in passes),
        sum(p["autotune"]["seconds"] for p in passes),
        sum(p["compilation"]["compiled"] for p in passes),
        sum(p["autotune"]["measured"] for p in passes),
        sum(p["compilation"]["compiler_processes"] for p in passes),
        process_s,
        {p["mode"]: p["seconds"] for p in passes},
    )


def pass_overhead(size: Size) -> Row:
    with tempfile.TemporaryDirectory(prefix="warm-bench-overhead-") as tmp:
        env = env_for(Path(tmp, "floor-home"))
        runs, floors = [], []
        for i in range(max(1, min(size.repeats, 3))):  # alternately: load hits both
            runs.append(one_run(Path(tmp), i))
            floors.append(python("-c", "import numpy.random", env=env)[1])
    ratio = median([r.wall / max(r.compile_s + r.tune_s, 1e-9) for r in runs])
    work = median([r.compile_s + r.tune_s for r in runs])
    floor = median(floors)
    own = median([r.wall for r in runs]) - floor - work
    first = runs[0]
    detail = (
        f"`warm run {WORKLOAD.name}` as a whole process (CLI start, both passes, bundle "
        f"write, verify), median ratio of {len(runs)} fresh runs; the first: wall "
        f"{ms(first.wall)} against compile {ms(first.compile_s)} ({first.compiled} kernels; "
        f"the batch's wall: {first.processes} compiler processes, at most {capped_jobs(None)} "
        f"at once, whose own walls sum to {ms(first.process_s)}) + measurement "
        f"{ms(first.tune_s)} ({first.measured} tunes); its passes' walls: "
        + ", ".join(f"{mode} {ms(seconds)}" for mode, seconds in first.pass_s.items())
        + f", the rest (start, imports, the worker's fork, the bundle's creation, output, "
        f"exit) {ms(first.wall - sum(first.pass_s.values()))}. Bound: a process that only "
        f"imports numpy.random takes {ms(floor)} (median, this run), so no run of this "
        f"workload gets below {(floor + work) / max(work, 1e-9):.2f}x ({ms(floor)} + work "
        f"{ms(work)}) / work; warm's own, beyond that process and the work: {ms(own)}"
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
