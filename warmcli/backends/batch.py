"""The batch compiler: a whole compile queue in as few compiler processes as the cores allow.

Units that can share a translation unit (same architecture and options) are split
into at most `jobs` groups, each group is one compiler process (or one NVRTC program
in its thread), and the groups run in parallel (never more than `jobs` at once; `jobs`
is capped at `JOBS_PER_CPU` per usable CPU). A group that fails is bisected until the
kernels that break it are found alone; they are reported with their own compiler log
and every other kernel is kept. A group that *times out* is not bisected (every half
would wait the timeout again): each of its kernels is compiled alone, in parallel,
so a hanging kernel costs about two timeouts in all. Interrupted (Ctrl-C), the
batch stops every compiler it started before it returns. This module owns no
cache: it returns what it built and what failed, and the caller stores it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from warmcli.backends.compiler import (
    DEFAULT_COMPILE_TIMEOUT,
    CompiledGroup,
    CompileFailure,
    Compiler,
    CompileUnit,
    resume_compilers,
    stop_compilers,
)

JOBS_PER_CPU = 4  # --jobs above this many compiler processes per usable CPU is capped


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


def capped_jobs(jobs: int | None) -> int:
    """`jobs` (default: the usable CPUs), at most `JOBS_PER_CPU` per usable CPU."""
    cpus = default_jobs()
    return max(1, min(jobs or cpus, JOBS_PER_CPU * cpus))


def plan_groups(
    units: Sequence[CompileUnit], jobs: int, max_group: int = 64
) -> list[list[CompileUnit]]:
    """Split units into compatible groups: at least one per (arch, options), about `jobs` in
    all, each a contiguous run of the queue (sizes differ by one at most)."""
    classes: dict[tuple[str, tuple[str, ...]], list[CompileUnit]] = defaultdict(list)
    for unit in units:
        classes[(unit.arch, unit.kernel.options)].append(unit)
    total = len(units)
    groups: list[list[CompileUnit]] = []
    for members in classes.values():
        share = max(1, round(jobs * len(members) / total)) if total else 1
        chunks = max(share, -(-len(members) // max_group))
        chunks = min(chunks, len(members))
        # Contiguous runs, in queue (launch) order: a process that serves the first kernels
        # a workload launches finds them in few shared objects, not one object each. Equal
        # counts, one run per job: no kernel's cost is known before it compiles; more runs
        # than jobs pulled from a queue add a program's fixed cost each and, on costs that
        # grow along the queue, pair the costliest runs in one thread; NVRTC's
        # `-split-compile` cost 5-25% more CPU here and orders a cubin's symbols run to run.
        size, extra = divmod(len(members), chunks)
        start = 0
        for i in range(chunks):
            end = start + size + (1 if i < extra else 0)
            groups.append(members[start:end])
            start = end
    return [g for g in groups if g]


def compile_batch(
    compiler: Compiler,
    units: Sequence[CompileUnit],
    *,
    jobs: int | None = None,
    timeout: float | None = None,
    max_group: int = 64,
    on_built: Callable[[list[CompileUnit]], None] | None = None,
) -> BatchResult:
    """Compile every unit; bisect failing groups, split timed-out ones into single kernels;
    at most `jobs` processes at once, each stopped after `timeout` seconds (default
    `DEFAULT_COMPILE_TIMEOUT`)."""
    jobs = capped_jobs(jobs)
    timeout = timeout or DEFAULT_COMPILE_TIMEOUT
    result = BatchResult()
    lock = threading.Lock()
    started = time.perf_counter()

    def run(group: list[CompileUnit]) -> list[list[CompileUnit]]:
        """Compile one group; return the groups to compile next (its halves, its kernels)."""
        try:
            # its digests made here, in the thread that compiled it, beside the other groups
            built = compiler.compile_group(group, timeout=timeout).digested()
        except CompileFailure as failure:
            with lock:
                result.processes += 1
                if len(group) == 1:
                    result.failures[group[0].key] = CompileFailure(
                        failure.log, tuple(group), failure.timed_out
                    )
                    return []
            if failure.timed_out:  # one more timeout at most: every kernel alone, at once
                return [[unit] for unit in group]
            half = len(group) // 2
            return [group[:half], group[half:]]
        with lock:
            result.processes += 1
            result.groups.append(built)
            for unit in group:
                result.built[unit.key] = built
        if on_built is not None:
            on_built(group)
        return []

    groups = plan_groups(units, jobs, max_group)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="warm-compile")
    try:
        pending: set[Future[list[list[CompileUnit]]]] = {pool.submit(run, g) for g in groups}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                pending |= {pool.submit(run, g) for g in future.result()}
    except BaseException:
        stop_compilers()  # interrupted: no compiler outlives the batch
        pool.shutdown(wait=True, cancel_futures=True)
        resume_compilers()
        raise
    pool.shutdown(wait=True)
    result.seconds = time.perf_counter() - started
    return result
