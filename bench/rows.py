"""What one benchmark reports, and the timing helpers every family shares.

A `Row` is one figure: a ratio measured side by side in this run, the target it
is held to, whether it met it (`None` when it could not run here, with the reason
in `detail`), and the figures behind it. Absolute times only ever appear in
`detail`; pass or fail is decided on ratios and counts. `Size` says how big each
family runs: `FULL` for `make bench`, `TINY` for the smoke test. Nothing here
runs a benchmark.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    """One benchmark figure, as `bench/results.json` holds it."""

    name: str
    ratio: float | None
    target: str
    met: bool | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def at_least(name: str, ratio: float, target: float, detail: str) -> Row:
    """A row whose ratio must reach `target` (a speed-up)."""
    return Row(name, round(ratio, 3), f"≥ {target:g}×", ratio >= target, detail)


def at_most(name: str, ratio: float, target: float, detail: str, what: str = "") -> Row:
    """A row whose ratio must stay within `target` (a cost relative to a reference)."""
    label = f"≤ {target:g}×" + (f" ({what})" if what else "")
    return Row(name, round(ratio, 3), label, ratio <= target, detail)


def skipped(name: str, target: str, why: str) -> Row:
    return Row(name, None, target, None, why)


@dataclass(frozen=True)
class Size:
    """How big each family runs."""

    kernels: int  # compile variants per language
    cold_starts: int
    hot_starts: int
    launches: int  # per timed dispatch loop
    scale_kernels: int
    scale_tunes: int
    repeats: int  # repeats of the short in-process timings (best or median taken)
    generated: int  # kernels of the generated workload whose starts are timed
    serve: tuple[int, ...]  # kernels of the generated workloads whose serving is timed


FULL = Size(64, 5, 9, 20_000, 10_000, 100_000, 5, 200, (50, 800, 3200))
TINY = Size(2, 1, 1, 200, 40, 400, 1, 3, (4, 8))


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """The fastest of `repeats` timed calls of `run`, in seconds."""
    times = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def median(values: list[float]) -> float:
    return statistics.median(values)


def python(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[str, float]:
    """Run this interpreter on `args`; (stdout, wall seconds). A failure raises with its log."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc.stdout, seconds


# Runs the command given as its arguments with its output discarded and prints "exit code,
# wall seconds, peak resident KiB, CPU seconds" of that process (the peak: of it or of the
# largest process it started and waited for; the CPU: of all of them). The bench process
# is large after building a bundle, and Linux hands a process's peak RSS on to a child
# across fork and exec: a child started from here would report at least the bench's own
# size. Started from this small launcher it inherits only the launcher's (`launcher_floor`).
_LAUNCHER = """
import os, sys, time
null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
started = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=null)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - started
cpu = usage.ru_utime + usage.ru_stime
print(os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss, cpu)
"""


def _launched(command: list[str], env: dict[str, str] | None) -> tuple[int, float, int, float]:
    launcher = [sys.executable, "-S", "-c", _LAUNCHER]
    done = subprocess.run(
        [*launcher, *command], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    code, seconds, kib, cpu = done.stdout.split()
    return int(code), float(seconds), int(kib) * 1024, float(cpu)  # KiB on Linux


def python_peak(*args: str, env: dict[str, str] | None = None) -> tuple[int, float, int, float]:
    """Run this interpreter on `args`, output discarded; (exit code, wall seconds, peak
    resident memory in bytes of that process, or of the largest it started, by the
    kernel's own accounting, CPU seconds of them all). It is started through a small
    launcher so that none of this process's size is counted: at least `launcher_floor()`."""
    return _launched([sys.executable, *args], env)


def launcher_floor() -> int:
    """The least peak `python_peak` can report: what a trivial program run through the
    launcher reports (the launcher's own size, inherited across fork and exec)."""
    return _launched(["/bin/true"], None)[2]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs"
