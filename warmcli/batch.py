"""The batch compiler: a whole compile queue in as few compiler processes as the cores allow.

Units that can share a translation unit (same architecture and options) are split
into at most `jobs` groups, each group is one compiler process (or one NVRTC program
in its thread), and the groups run in parallel (never more than `jobs` at once). A
group that fails is bisected until the kernels that break it are found alone; they
are reported with their own compiler log and every other kernel is kept. This module owns no cache:
it returns what it built and what failed, and the caller stores it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from warmcli.compiler import CompiledGroup, CompileFailure, Compiler, CompileUnit


@dataclass
class BatchResult:
    """What one batch compile produced."""

    built: dict[str, CompiledGroup] = field(default_factory=dict)
    failures: dict[str, CompileFailure] = field(default_factory=dict)
    groups: list[CompiledGroup] = field(default_factory=list)
    processes: int = 0
    seconds: float = 0.0


def default_jobs() -> int:
    """Compiler processes at once: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def plan_groups(
    units: Sequence[CompileUnit], jobs: int, max_group: int = 64
) -> list[list[CompileUnit]]:
    """Split units into compatible groups: at least one per (arch, options), about `jobs` in all."""
    classes: dict[tuple[str, tuple[str, ...]], list[CompileUnit]] = defaultdict(list)
    for unit in units:
        classes[(unit.arch, unit.kernel.options)].append(unit)
    total = len(units)
    groups: list[list[CompileUnit]] = []
    for members in classes.values():
        share = max(1, round(jobs * len(members) / total)) if total else 1
        chunks = max(share, -(-len(members) // max_group))
        chunks = min(chunks, len(members))
        for i in range(chunks):
            groups.append(members[i::chunks])
    return [g for g in groups if g]


def compile_batch(
    compiler: Compiler,
    units: Sequence[CompileUnit],
    *,
    jobs: int | None = None,
    timeout: float | None = None,
    max_group: int = 64,
    on_built: Callable[[int], None] | None = None,
) -> BatchResult:
    """Compile every unit; bisect failing groups; at most `jobs` processes at once."""
    jobs = jobs or default_jobs()
    result = BatchResult()
    lock = threading.Lock()
    started = time.perf_counter()

    def run(group: list[CompileUnit]) -> None:
        try:
            built = compiler.compile_group(group, timeout=timeout)
        except CompileFailure as failure:
            with lock:
                result.processes += 1
            if len(group) == 1:
                with lock:
                    result.failures[group[0].key] = CompileFailure(
                        failure.log, tuple(group), failure.timed_out
                    )
                return
            half = len(group) // 2
            run(group[:half])
            run(group[half:])
            return
        with lock:
            result.processes += 1
            result.groups.append(built)
            for unit in group:
                result.built[unit.key] = built
        if on_built is not None:
            on_built(len(group))

    groups = plan_groups(units, jobs, max_group)
    if len(groups) == 1:
        run(groups[0])
    elif groups:
        with ThreadPoolExecutor(max_workers=min(jobs, len(groups))) as pool:
            for future in [pool.submit(run, g) for g in groups]:
                future.result()
    result.seconds = time.perf_counter() - started
    return result
