"""The CUDA compile race (rows `compile_cuda`, `compile_cuda_nvrtc_*`): warm against the rest.

CUDA, the race, one run, 64 sm_90 variants, the same best-of-N on every side: warm with
NVRTC (its default where installed, PTX kept), warm with nvcc, the best hand-written
NVRTC batching (the same merged translation units: one program in one thread, or one
program per core in threads with the kernels dealt round robin or grouped as warm groups
them), NVRTC one program per kernel one after another (CuPy's `RawKernel` on a cold
cache), and one `nvcc --cubin` per kernel two at a time (PyCUDA's `SourceModule`, with
warm's own nvcc command line). warm gives its programs NVRTC's `-minimal` where its gate
lets it (the same bytes; the fixed cost with it is in the detail); the hand-written sides
pass what a user writes, without it. NVRTC is loaded and initialised (one empty program)
before any side is timed, and a first warm process (not timed) leaves NVRTC's version
line in the warm home every round of warm then uses: each round is a cold process on a
machine warm ran on before (whether it found the line is said); every NVRTC side passes
the same `-I` folders; the sides run in rounds (each round runs every side once) and
each keeps its best round. The hand-written batching compared is the one with the best
median round (then its best round, as every side: the same N draws). Rows: warm (NVRTC)
against nvcc per kernel, against the hand-written batching, against NVRTC per kernel;
every side's kernels per second and CPU seconds in the detail; warm against the
hand-written batching grouped as it groups (warm's own time outside its batch compiler,
measured, and that side's programs' CPU from round to round; its NVRTC version read,
cold and remembered, measured apart); what bounds warm against the
round-robin dealing: each program's CPU in its thread, warm's runs against dealt kernels
(a batching's wall is its costliest program's); what bounds the per-kernel ratio: an
NVRTC program's fixed cost and a kernel's cost inside a merged program, both in CPU
time, and cores × the per-kernel loop's CPU over one merged program's, measured in the
rounds.

It owns nothing past one call and prints nothing; the variants, warm's cold batch and
the per-kernel process loop are `bench.compile`'s.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, cast

from bench.compile import (
    ARCH,
    CUDA_EMPTY,
    RUNS,
    cold_probes,
    per_kernel_loop,
    standalone_source,
    variants,
    warm_batch,
)
from bench.rows import Row, Size, at_least, median, skipped
from warmcli.backends.batch import RUN, default_jobs, plan_groups
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.toolchain import ToolchainError, is_remembered

if TYPE_CHECKING:
    from warmcli.backends.base import Device
    from warmcli.backends.cuda.nvcc import NvccCompiler

RACE = ("compile_cuda", "compile_cuda_nvrtc_batching", "compile_cuda_nvrtc_per_kernel")
NVRTC_BATCH_TARGET = 1.0  # warm (NVRTC) against the best hand-written NVRTC batching
NVRTC_KERNEL_TARGET = 4.0  # warm (NVRTC) against NVRTC one program per kernel (CuPy's cold path)
NVCC_TARGET = 4.0  # warm (NVRTC) against one nvcc per kernel, two at a time (PyCUDA's cold path)
WARM = "warm (NVRTC)"
NVRTC_LOOP = "NVRTC one program per kernel, serial (CuPy's cold path)"
NVCC_LOOP = "one nvcc per kernel, 2 at a time (PyCUDA's cold path)"


def nvrtc_program(
    source: str, arch: str, includes: Sequence[str], extra: Sequence[str] = ()
) -> bytes:
    """What a user writes by hand: one NVRTC program, compiled, its cubin read."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"k.cu", 0, [], [])
    try:
        options = [f"--gpu-architecture={arch}".encode(), *(f"-I{d}".encode() for d in includes)]
        options += [o.encode() for o in extra]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"hand-written NVRTC compile failed: {err}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = bytearray(size)  # fresh and writable (never a shared bytes object)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return bytes(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


Programs = list[tuple[float, list[float]]]  # per round: (seconds, each program's thread CPU)


def nvrtc_batched(
    groups: Sequence[Sequence[CompileUnit]], includes: Sequence[str], rounds: Programs
) -> float:
    """Seconds for one hand-merged program per group, one thread each; the round's seconds
    and each program's CPU seconds in its thread are appended to `rounds`."""
    from warmcli.backends.cuda.nvcc import translation_unit

    def program(source: str) -> float:
        cpu = time.thread_time()
        nvrtc_program(source, ARCH, includes)
        return time.thread_time() - cpu

    sources = [translation_unit(group) for group in groups]
    started = time.perf_counter()
    with ThreadPoolExecutor(len(sources)) as pool:
        cpus = list(pool.map(program, sources))
    seconds = time.perf_counter() - started
    rounds.append((seconds, cpus))
    return seconds


def hand_batchings(units: Sequence[CompileUnit], jobs: int) -> dict[str, list[list[CompileUnit]]]:
    """The hand-written batchings raced: one program; one per core, the kernels dealt round
    robin (units[i::p]); and one per core as warm groups them (`plan_groups`: the queue
    dealt in runs), so warm's grouping and warm's own cost can be told apart."""
    n, p = len(units), min(jobs, len(units))
    out = {f"hand-written NVRTC, 1 program of {n} in 1 thread": [list(units)]}
    if p > 1:
        each = -(-n // p)
        out[f"hand-written NVRTC, {p} programs of {each} dealt round robin in {p} threads"] = [
            list(units[i::p]) for i in range(p)
        ]
        out[f"hand-written NVRTC, {p} programs of {each} grouped as warm does in {p} threads"] = (
            plan_groups(units, p)
        )
    return out


def _rounds(
    sides: dict[str, Callable[[], float]], rounds: int
) -> dict[str, list[tuple[float, float]]]:
    """Every side's (seconds, this process's CPU seconds) over `rounds` rounds, each round
    running every side once (the CPU of an in-process compile counts; a child's does not)."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, run in sides.items():
            cpu = time.process_time()
            seconds = run()
            times[name].append((seconds, time.process_time() - cpu))
    return times


def _cpu(run: Callable[[], object], repeats: int = 3) -> float:
    """The least CPU seconds of `run` in this thread: load-independent, unlike the clock."""
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        run()
        best = min(best, time.thread_time() - started)
    return best


def program_costs(
    units: Sequence[CompileUnit], includes: Sequence[str]
) -> tuple[float, float, float | None]:
    """(CPU seconds of one program's fixed cost, of one kernel inside a merged program,
    of the fixed cost with `-minimal` or None where warm never gives it): an empty
    program, and one program of every unit less that, per unit."""
    from warmcli.backends.cuda.minimal import MINIMAL, minimal_safe
    from warmcli.backends.cuda.nvcc import translation_unit
    from warmcli.backends.cuda.nvrtc import takes_minimal

    fixed = _cpu(lambda: nvrtc_program(CUDA_EMPTY, ARCH, includes))
    minimal = None
    if takes_minimal() and minimal_safe(units):
        minimal = _cpu(lambda: nvrtc_program(CUDA_EMPTY, ARCH, includes, (MINIMAL,)))
    merged = translation_unit(units)
    whole = _cpu(lambda: nvrtc_program(merged, ARCH, includes), repeats=2)
    return fixed, max(whole - fixed, 0.0) / len(units), minimal


def version_read(home: str | None = None) -> float:
    """CPU seconds of warm's NVRTC identity in a cold process: read (an empty program, the
    one program warm compiles that no hand-written batching does, before its first group)
    where `home` is None, else found in that warm home (the line remembered there)."""
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler

    def read() -> None:
        with cold_probes(home):
            _ = NvrtcCompiler().toolchain

    return _cpu(read)


def remembered(home: str) -> bool:
    """Whether NVRTC's version line is remembered in the warm home `home`."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    path = find_nvrtc()
    with cold_probes(home):
        return path is not None and is_remembered("nvrtc", path)


def _programs(rounds: Programs) -> str:
    """The programs' CPU seconds in their threads in the side's fastest round."""
    return " + ".join(f"{c:.2f}" for c in min(rounds)[1])


def _spread(rounds: Programs) -> str:
    """The least and the most CPU seconds a side's programs took together in a round."""
    sums = [sum(cpus) for _, cpus in rounds] or [0.0]
    return f"{min(sums):.2f}–{max(sums):.2f}"


def _minimal(fixed: float | None) -> str:
    """What `-minimal` does to warm's programs here, said in the detail."""
    if fixed is None:
        return " (warm gives these kernels no -minimal: this NVRTC or their text rules it out)"
    return (
        f" (warm's programs get -minimal, which these kernels cannot observe: the same "
        f"bytes, a fixed cost of {fixed * 1000:.0f} ms; the hand-written sides do without)"
    )


def compile_cuda(size: Size) -> list[Row]:
    """The compile race on the same variants, best of the same N on every side."""
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    try:
        nvcc_device = ArchDevice(ARCH, compiler="nvcc", ptx="auto")
        nvcc = cast("NvccCompiler", nvcc_device.compiler("cuda"))
        if find_nvrtc() is None:
            raise ToolchainError("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)")
        nvrtc_device = ArchDevice(ARCH, compiler="nvrtc", ptx="auto")
        nvrtc_device.compiler("cuda")
    except (ToolchainError, ValueError) as exc:
        return [skipped(name, "-", f"skipped: {exc}") for name in RACE]
    # NVRTC loaded and initialised (its first program) once for every side, not timed.
    nvrtc_program(CUDA_EMPTY, ARCH, ())
    # warm's home on this machine, where a first process (not timed) left NVRTC's version
    # line: every round of warm is a cold process on a machine warm has run on before.
    with tempfile.TemporaryDirectory(prefix="warm-bench-machine-") as machine:
        version_read(machine)
        return _race(size, nvcc, nvrtc_device, machine)


def _race(size: Size, nvcc: NvccCompiler, nvrtc_device: Device, machine: str) -> list[Row]:
    """The rounds and the rows of `compile_cuda`, warm's home being `machine`."""
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.backends.cuda.nvrtc import include_dirs

    kernels = variants("cuda", size.kernels)
    n, jobs, runs = len(kernels), default_jobs(), min(RUNS, size.repeats)
    sources = [standalone_source(k) for k in kernels]
    includes = include_dirs()
    units = [CompileUnit(f"{i:016x}" * 4, k, ARCH) for i, k in enumerate(kernels)]

    def command(path: Path) -> list[str]:
        cmd = list(nvcc.command(ARCH, ()))
        return [*cmd[:-3], "-o", "k.cubin", path.name]

    hits: list[bool] = []
    outside: list[tuple[float, float]] = []  # warm (NVRTC): (seconds, those outside its batch)

    def warm(compiler: str) -> float:  # a fresh device: its compiler made and probed cold
        if compiler == "nvrtc":
            hits.append(remembered(machine))
        device = ArchDevice(ARCH, compiler=compiler, ptx="auto")
        seconds, _, _, inside = warm_batch(device, kernels, jobs, home=machine)
        if compiler == "nvrtc":
            outside.append((seconds, seconds - inside))
        return seconds

    def per_kernel() -> float:
        started = time.perf_counter()
        for source in sources:
            nvrtc_program(source, ARCH, includes)
        return time.perf_counter() - started

    hands = hand_batchings(units, jobs)
    programs: dict[str, Programs] = {name: [] for name in hands}
    sides: dict[str, Callable[[], float]] = {
        WARM: lambda: warm("nvrtc"),
        "warm (nvcc)": lambda: warm("nvcc"),
        **{
            name: (lambda g=groups, p=programs[name]: nvrtc_batched(g, includes, p))
            for name, groups in hands.items()
        },
        NVRTC_LOOP: per_kernel,
        NVCC_LOOP: lambda: per_kernel_loop(command, sources, ".cu", jobs=2),
    }
    # Round-robin: each round runs every side once, so a load that comes and goes on a
    # shared machine falls on every side alike; the best of the rounds is kept per side.
    times = _rounds(sides, runs)
    seconds = {name: min(t for t, _ in rounds) for name, rounds in times.items()}
    warm_nvrtc, nvrtc_loop, nvcc_loop2 = (seconds[k] for k in (WARM, NVRTC_LOOP, NVCC_LOOP))
    # The best hand-written batching is the one whose rounds are the fastest in the middle
    # (the median), then its best round as every side's: picking the least of all its
    # batchings' rounds would give that side twice the draws of every other.
    hand_name = min(
        (k for k in seconds if k.startswith("hand-written")),
        key=lambda k: median([t for t, _ in times[k]]),
    )
    hand = seconds[hand_name]
    figures = "; ".join(
        f"{name} {n / t:.1f} kernels/s{' (the best hand-written)' if name == hand_name else ''}"
        for name, t in seconds.items()
    )
    cpu = {k: min(c for _, c in rounds) for k, rounds in times.items()}
    as_warm = next(k for k in hands if "as warm does" in k) if len(hands) > 1 else hand_name
    one = next(iter(hands))  # one program: the least CPU any batching of these kernels needs
    fixed, per_kernel_cost, minimal = program_costs(units, includes)
    bound = jobs * (fixed + per_kernel_cost) / per_kernel_cost
    read, known = version_read(), version_read(machine)
    found = f"{sum(hits)} of {len(hits)}"
    fastest = min(outside)
    dealt = next((k for k in hands if "round robin" in k), None)
    balance = ""
    if dealt is not None:  # what warm's runs cost against round robin, program by program
        runs_cpu, dealt_cpu = (max(min(programs[k])[1]) for k in (as_warm, dealt))
        own = known if all(hits) else read
        balance = (
            f"each program's CPU in its thread (fastest round): grouped as warm does "
            f"{_programs(programs[as_warm])} s, dealt round robin {_programs(programs[dealt])} "
            f"s; a batching's wall is its costliest program's (one core each), so grouping "
            f"as it does warm reaches about max(round robin) / (max(as warm) + its version "
            f"read) = {dealt_cpu / (runs_cpu + own):.2f}× the round-robin dealing (it knows no "
            f"kernel's cost before compiling it); "
        )
    detail = (
        f"{n} {ARCH} variants on {jobs} core(s) (load average {os.getloadavg()[0]:.1f}: "
        f"other processes share them), best of {runs} each: {figures}; CPU seconds "
        f"(load-independent): warm (NVRTC) {cpu[WARM]:.2f}, the best hand-written batching "
        f"{cpu[hand_name]:.2f}, hand-written grouped as warm does {cpu[as_warm]:.2f}, one "
        f"program {cpu[one]:.2f}, NVRTC per kernel {cpu[NVRTC_LOOP]:.2f} (cores this process "
        f"got: warm {cpu[WARM] / warm_nvrtc:.2f}, the best hand-written "
        f"{cpu[hand_name] / hand:.2f}, per kernel {cpu[NVRTC_LOOP] / nvrtc_loop:.2f}; "
        f"in CPU warm is "
        f"{cpu[hand_name] / cpu[WARM]:.2f}× the best hand-written batching: the wall ratio "
        f"also follows the cores each side's best round got on a shared machine); "
        f"warm against the hand-written batching grouped as it groups (the queue dealt in "
        f"runs of {RUN}, A B B A ..., so the kernels a workload launches first share one "
        f"object): {seconds[as_warm] / warm_nvrtc:.2f}× (the same programs, warm's with "
        f"-minimal, and warm's own work: outside its batch compiler (queueing and keying, its "
        f"toolchain, filing what it built) {fastest[1] * 1000:.1f} ms of its fastest round's "
        f"{fastest[0] * 1000:.0f} ms; warm's CPU less that side's "
        f"{(cpu[WARM] - cpu[as_warm]) * 1000:.0f} ms, where that side's programs alone took "
        f"{_spread(programs.get(as_warm, []))} s CPU from round to round); NVRTC's version "
        f"read: {read * 1000:.1f} ms CPU in the first process on a machine (an empty "
        f"program before warm's first), {known * 1000:.1f} ms once remembered in warm's "
        f"home (found remembered in {found} warm rounds); {balance}"
        f"an NVRTC program costs {fixed * 1000:.0f} ms CPU fixed + {per_kernel_cost * 1000:.0f} "
        f"ms per kernel merged{_minimal(minimal)}, so against one program per kernel no "
        f"batching exceeds cores × (fixed + kernel) / kernel = {bound:.1f}×, and measured in "
        f"these rounds cores × CPU(per kernel) / CPU(one program) = "
        f"{jobs * cpu[NVRTC_LOOP] / cpu[one]:.1f}× (with every core free to this process); "
        f"every side gets the same -I folders and options; "
        f"nvcc {nvcc.toolchain.path}, {nvrtc_device.compiler('cuda').toolchain.version}"
    )
    return [
        at_least("compile_cuda", nvcc_loop2 / warm_nvrtc, NVCC_TARGET, detail),
        at_least("compile_cuda_nvrtc_batching", hand / warm_nvrtc, NVRTC_BATCH_TARGET, detail),
        at_least(
            "compile_cuda_nvrtc_per_kernel", nvrtc_loop / warm_nvrtc, NVRTC_KERNEL_TARGET, detail
        ),
    ]
