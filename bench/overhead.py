"""A `CompileAndAutotune` pass against its own compile and measurement time (row `pass_overhead`).

The host example runs under `CompileOnly` (everything queued), then under
`CompileAndAutotune` on the same runtime, with no bundle. The second pass's wall
time is held against what its statistics say it spent compiling
(`compilation.seconds`) and measuring (`autotune.seconds`): what is left is
warm's own bookkeeping and the workload's Python. The best of a few fresh runs
is taken.
"""

from __future__ import annotations

from bench.rows import Row, Size, at_most, ms
from bench.start import WORKLOAD
from warmcli.host import HostDevice
from warmcli.passes import PassReport, run_pass
from warmcli.process_mode import ProcessMode
from warmcli.runtime import Runtime
from warmcli.workload import load_workload

TARGET = 1.1


def one_pass() -> PassReport:
    workload = load_workload(WORKLOAD)
    runtime = Runtime(HostDevice())
    try:
        run_pass(ProcessMode.COMPILE_ONLY, "CompileOnly", workload, [runtime])
        return run_pass(ProcessMode.COMPILE_AND_AUTOTUNE, "CompileAndAutotune", workload, [runtime])
    finally:
        runtime.close()


def pass_overhead(size: Size) -> Row:
    reports = [one_pass() for _ in range(max(1, min(size.repeats, 3)))]
    best = min(reports, key=lambda r: r.seconds / _work(r))
    compile_s, tune_s = best.total.compilation.seconds, best.total.autotune.seconds
    detail = (
        f"{WORKLOAD.name}: pass {ms(best.seconds)} against compile {ms(compile_s)} "
        f"({best.total.compilation.compiled} kernels, "
        f"{best.total.compilation.compiler_processes} processes) + measurement {ms(tune_s)} "
        f"({best.total.autotune.measured} tunes); best of {len(reports)}"
    )
    return at_most("pass_overhead", best.seconds / _work(best), TARGET, detail)


def _work(report: PassReport) -> float:
    return max(report.total.compilation.seconds + report.total.autotune.seconds, 1e-9)
