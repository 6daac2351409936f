"""The batch compiler: a whole compile queue in as few compiler processes as the cores allow.

A kernel whose text could reach past what a shared translation unit isolates (an
`#include`, a pragma, ...: `warmcli.backends.sharing`) is a group of its own, compiled
exactly as alone. The units that can share one (same architecture and options) are split into
about `jobs` groups (more where a group would pass `max_group` kernels), each group is
one compiler process (or one NVRTC program in its thread), and the groups run in
parallel (never more than `jobs` at once; `jobs` is capped at `JOBS_PER_CPU` per usable
CPU). With one group per job the queue is dealt to them in short runs (costs that grow
along the queue fall on every group alike); with more groups than jobs each group is a
contiguous part of the queue. Queue order is kept inside every group. A group that fails
is bisected until the kernels that break it are found alone; they are reported with
their own compiler log and every other kernel is kept. A group that *times out* is not
bisected (every half would wait the timeout again): each of its kernels is compiled
alone, in parallel, so a hanging kernel costs about two timeouts in all. A compile whose scratch
files the temporary folder refuses (full: `TMPDIR` on a small tmpfs) is a `ScratchError` naming
that folder, never bisected (every half would be refused alike). A kernel whose key met a header or
a linked file that is a FIFO or a device (`warmcli.unkeyed.NO_FILE`) is never compiled: its compile
fails naming it (cc would wait on a FIFO until the timeout, and read `/dev/zero` until memory ran
out: 9 GB in 10 s). Interrupted (Ctrl-C), the batch stops every compiler it started, and waits
for every thread it started (one whose start the interrupt cut short too), before it returns.
While the interpreter shuts down (a compile in an atexit callback or a daemon thread),
when no thread pool may start or take work (from the moment Python's shutdown begins, before its
main thread ends), the groups are compiled one after another in the caller's thread.
This module owns no cache: it returns what it built and what failed, and the caller
stores it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait

from warmcli import config
from warmcli.backends.compile_environment import compiler_reads
from warmcli.backends.compiler import (
    DEFAULT_COMPILE_TIMEOUT,
    CompiledGroup,
    CompileFailure,
    Compiler,
    CompileUnit,
)
from warmcli.backends.processes import resume_compilers, stop_compilers
from warmcli.backends.sharing import shares_unit
from warmcli.errors import ScratchError, ToolchainError
from warmcli.kernel import included_headers
from warmcli.printable import printable
from warmcli.records import Record, factory
from warmcli.unkeyed import NO_FILE, reason_of

JOBS_PER_CPU = 4  # --jobs above this many compiler processes per usable CPU is capped
RUN = 2  # queued kernels dealt together when a plan has one group per job


class BatchResult(Record, frozen=False):
    """What one batch compile produced."""

    built: dict[str, CompiledGroup] = factory(dict)
    failures: dict[str, CompileFailure] = factory(dict)
    groups: list[CompiledGroup] = factory(list)
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
    """Split units into compatible groups: first each unit that needs a unit of its own
    (`shares_unit`), alone; the others at least one group per (arch, options, the part of the
    environment it was queued in a compile reads: `compiler_reads`; a group is compiled in its
    first unit's), about `jobs` in all, their sizes differing by one at most. A class that fits
    in its share of `jobs` is dealt to its groups in runs of `RUN` queued kernels, in snake
    order; one that needs more groups than that (over `max_group` kernels a group) is cut in
    contiguous groups."""
    classes: dict[tuple[object, ...], list[CompileUnit]] = defaultdict(list)
    groups: list[list[CompileUnit]] = []
    read: dict[int, config.Pairs] = {}  # by the environment (one object for a queue's units)
    for unit in units:
        if shares_unit(unit.kernel):
            if (part := read.get(id(unit.environ))) is None:
                part = read[id(unit.environ)] = compiler_reads(unit.environ)
            classes[(unit.arch, unit.kernel.options, part)].append(unit)
        else:
            groups.append([unit])
    total = len(units) - len(groups)
    for members in classes.values():
        share = max(1, round(jobs * len(members) / total)) if total else 1
        least = -(-len(members) // max_group)
        chunks = min(max(share, least), len(members))
        # Queue (launch) order is kept inside every group, so a process serving the first
        # kernels a workload launches finds them in few shared objects. One group per job,
        # dealt: no kernel's cost is known before it compiles, and costs follow the queue
        # (a workload's variants grow along it), so contiguous halves put the costliest
        # kernels in one program, the batch's wall; runs dealt A B B A ... spread that trend
        # as round robin does while the first run still shares one object (the bench's 64
        # variants, each kernel's CPU measured alone: costliest group over the mean 1.007
        # in 2 groups and 1.02 in 4 with runs of 2 in snake order, round robin 1.04 and
        # 1.17, contiguous 1.07 and 1.18, A B A B in runs of 2 1.10 and 1.11). More groups
        # than jobs are pulled from a queue and balance themselves: cut contiguously, a
        # prefix of the queue stays in one object. More groups than needed add a program's
        # fixed cost each; NVRTC's `-split-compile` cost 5-25% more CPU here and orders a
        # cubin's symbols run to run.
        cut = _deal(members, chunks, RUN) if least <= share else _cut(members, chunks)
        groups.extend(cut)
    return [g for g in groups if g]


def _sizes(count: int, chunks: int) -> list[int]:
    """`chunks` sizes adding up to `count`, differing by one at most."""
    size, extra = divmod(count, chunks)
    return [size + (1 if i < extra else 0) for i in range(chunks)]


def _cut(members: Sequence[CompileUnit], chunks: int) -> list[list[CompileUnit]]:
    """Contiguous groups of the queue, in order."""
    groups, start = [], 0
    for size in _sizes(len(members), chunks):
        groups.append(list(members[start : start + size]))
        start += size
    return groups


def _deal(members: Sequence[CompileUnit], chunks: int, run: int) -> list[list[CompileUnit]]:
    """The queue dealt in runs of `run` kernels to `chunks` groups in snake order (A B B A
    A B ...), a group that is full skipped (its run's rest goes to the next)."""
    room = _sizes(len(members), chunks)
    groups: list[list[CompileUnit]] = [[] for _ in range(chunks)]
    start, lap = 0, 0
    while start < len(members):
        for g in range(chunks) if lap % 2 == 0 else reversed(range(chunks)):
            take = min(run, room[g], len(members) - start)
            groups[g].extend(members[start : start + take])
            room[g] -= take
            start += take
        lap += 1
    return groups


def _no_file(compiler: Compiler, group: list[CompileUnit]) -> CompileFailure | None:
    """The failure of a group with a kernel whose key met a header or a file it links that is a
    FIFO or a device (`NO_FILE`), naming it; None where none did (or its compiler is not found:
    its compile says)."""
    try:
        identity = compiler.toolchain.identity
    except ToolchainError:
        return None
    for unit in group:
        if (why := reason_of(included_headers(unit.kernel, identity))).startswith(NO_FILE):
            header = printable(why[len(NO_FILE) :])  # (a header's name is the workload's text)
            return CompileFailure(
                f"kernel {unit.kernel.label}: not compiled: a file it reads (a header, or one "
                f"it links) is no regular file: {header}, which the compiler would wait on or "
                "read for ever; name a regular file",
                tuple(group),
            )
    return None


def compile_batch(
    compiler: Compiler,
    units: Sequence[CompileUnit],
    *,
    jobs: int | None = None,
    timeout: float | None = None,
    max_group: int = 64,
    on_built: Callable[[list[CompileUnit], CompiledGroup], None] | None = None,
) -> BatchResult:
    """Compile every unit; bisect failing groups, split timed-out ones into single kernels;
    at most `jobs` processes at once, each stopped after `timeout` seconds (default
    `DEFAULT_COMPILE_TIMEOUT`). `on_built(group, built)` as each group is built, in the
    thread that compiled it."""
    jobs = capped_jobs(jobs)
    timeout = timeout or DEFAULT_COMPILE_TIMEOUT
    result = BatchResult()
    lock = threading.Lock()
    started = time.perf_counter()

    def run(group: list[CompileUnit]) -> list[list[CompileUnit]]:
        """Compile one group; return the groups to compile next (its halves, its kernels)."""
        try:
            if no_file := _no_file(compiler, group):  # never started: it would not end
                raise no_file
            # its digests made here, in the thread that compiled it, beside the other groups;
            # what it reads of the environment (`LIBRARY_PATH`...) as its units were queued in
            with config.read_in(group[0].environment):
                built = compiler.compile_group(group, timeout=timeout).digested()
        except OSError as exc:  # its scratch files (a compiler's start is a CompileFailure)
            raise scratch_refused(exc) from None
        except CompileFailure as failure:
            with lock:
                result.processes += 1
                if len(group) == 1:  # its log names its functions as its source does
                    result.failures[group[0].key] = CompileFailure(
                        failure.log.replace(group[0].prefix, ""), tuple(group), failure.timed_out
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
        if on_built is not None:  # in this thread too, beside the other groups' compiles
            on_built(group, built)
        return []

    groups = plan_groups(units, jobs, max_group)
    if not threading.main_thread().is_alive():  # shutting down: an atexit callback's compile,
        _one_by_one(groups, run)  # or a daemon thread's; no thread pool starts now
        result.seconds = time.perf_counter() - started
        return result
    from concurrent.futures import ThreadPoolExecutor  # here: at shutdown its import raises

    # each of its threads as it starts, before it takes a group: one whose `start()` a Ctrl-C
    # cut short in `submit` runs on unknown to the pool, which never waits for it
    threads: list[threading.Thread] = []
    pool = ThreadPoolExecutor(
        max_workers=jobs,
        thread_name_prefix="warm-compile",
        initializer=lambda: threads.append(threading.current_thread()),
    )
    refused: list[list[CompileUnit]] = []  # the groups no pool's thread took: compiled here

    def start(todo: list[list[CompileUnit]]) -> set[Future[list[list[CompileUnit]]]]:
        started = set()
        for group in todo:
            try:
                if not refused:
                    started.add(pool.submit(run, group))
                    continue
            except RuntimeError:  # Python's shutdown began (its pools refuse new work before
                pass  # the main thread ends: a daemon thread's compile then), or no thread starts
            refused.append(group)
        return started

    try:
        pending = start(groups)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                pending |= start(future.result())
        _one_by_one(refused, run)
    except BaseException:
        stop_compilers()  # interrupted: no compiler outlives the batch
        pool.shutdown(wait=True, cancel_futures=True)
        for thread in threads:  # and no compile, nor its scratch folder (the pool's own)
            thread.join()
        resume_compilers()
        raise
    pool.shutdown(wait=True)
    result.seconds = time.perf_counter() - started
    return result


def scratch_refused(exc: OSError) -> ScratchError:
    """A compiler's scratch files refused: said with the folder, which TMPDIR chooses, and
    what to do (more room there; a higher limit on open files, which no folder gives)."""
    import errno
    import tempfile

    why = exc.strerror or type(exc).__name__
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return ScratchError(f"cannot compile: {why}: raise the limit (ulimit -n)")
    try:
        folder = tempfile.gettempdir()
    except OSError:  # none usable: none was named
        folder = "the temporary folder"
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    return ScratchError(
        f"cannot compile: the temporary folder {folder} refused the compiler's files ({why}): "
        f"set TMPDIR to a folder {'with room' if full else 'warm may write'}"
    )


def _one_by_one(
    groups: list[list[CompileUnit]], run: Callable[[list[CompileUnit]], list[list[CompileUnit]]]
) -> None:
    """Each group and what it leaves to compile next, in this thread, one after another."""
    todo = list(groups)
    try:
        while todo:
            todo[1:1] = run(todo.pop(0))
    except BaseException:
        stop_compilers()  # interrupted: no compiler outlives the batch
        resume_compilers()
        raise
