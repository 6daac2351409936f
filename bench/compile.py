"""The compile race (rows `compile_cuda*`) and the host batch (row `compile_host`).

The variants are a tiled matmul over tile × unroll × element type: kernels that
truly differ (different defines), never duplicates. warm's side is a fresh
`KernelCache` on a fresh device with no bundle: every variant queued, then one
`flush` (the batch compiler: about as many programs or compiler processes as
cores), with the toolchain probes forgotten first (and no remembered version
line) so their cost is counted.

CUDA, the race, one run, 64 sm_90 variants, the same best-of-N on every side:
warm with NVRTC (its default where installed, PTX kept), warm with nvcc, the best
hand-written NVRTC batching (the same merged translation units: one program in
one thread, or one program per core in threads with the kernels dealt round robin
or grouped as warm groups them), NVRTC one program per kernel one
after another (CuPy's `RawKernel` on a cold cache), and one `nvcc --cubin` per
kernel two at a time (PyCUDA's `SourceModule`, with warm's own nvcc command
line). NVRTC is loaded and initialised (one empty program) before any side is
timed; every NVRTC side passes the same `-I` folders; the sides run in rounds (each
round runs every side once) and each keeps its best round. The hand-written batching
compared is the one with the best median round (then its best round, as every side:
the same N draws). Rows: warm (NVRTC) against nvcc per kernel, against the
hand-written batching, against NVRTC per kernel; every side's kernels per second
and CPU seconds in the detail; warm against the hand-written batching grouped as it
groups (what is left is warm's own cost); what bounds the per-kernel ratio: an NVRTC
program's fixed cost and a kernel's cost inside a merged program, both in CPU time,
and cores × the per-kernel loop's CPU over one merged program's, measured in the rounds.

Host: what a cold `SourceModule`-style loop does, one `cc` per kernel in a fresh
temporary folder with the very command line warm's compiler builds, run *two at a
time* (on 2 cores a serial loop against warm's parallel batch would not be a fair
comparison), against warm's batch; the best of the same N runs on each side, every
run cold. The serial loop is reported beside it, once, and so is the floor: one
compiler process on an empty kernel. What bounds the ratio is measured in the
compilers' CPU time: batching removes each kernel's process start-up (the floor's),
never the compiler's own work on the kernel.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from bench.rows import Row, Size, at_least, median, skipped
from warmcli.backends.base import Device
from warmcli.backends.batch import default_jobs, plan_groups
from warmcli.backends.compiler import Compiler, CompileUnit
from warmcli.backends.toolchain import ToolchainError, probe
from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride
from warmcli.kernel import Kernel
from warmcli.runtime.kernel_cache import KernelCache

TARGET = 15.0
RUNS = 3  # on each side, each from a cold start: a fresh cache, fresh temporary folders
ARCH = "sm_90"
TILES = (8, 16, 24, 32)
UNROLLS = (1, 2, 4, 8)

CUDA_TYPES = ("float", "double", "int", "long long")
CUDA_SOURCE = r"""
extern "C" __global__ void matmul(const T *A, const T *B, T *C, int M, int N, int K) {
    __shared__ T As[TILE][TILE];
    __shared__ T Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    T acc = 0;
    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        As[ty][tx] = (row < M && t * TILE + tx < K) ? A[row * K + t * TILE + tx] : (T)0;
        Bs[ty][tx] = (col < N && t * TILE + ty < K) ? B[(t * TILE + ty) * N + col] : (T)0;
        __syncthreads();
        for (int k = 0; k < TILE; k += UNROLL)
            for (int u = 0; u < UNROLL; u++) acc += As[ty][k + u] * Bs[k + u][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""
CUDA_EMPTY = 'extern "C" __global__ void empty() {}\n'

C_TYPES = ("float", "double", "int", "long")
C_SOURCE = r"""
#define MIN(a, b) ((a) < (b) ? (a) : (b))
void matmul(const T *A, const T *B, T *C, int M, int N, int K) {
    for (int i = 0; i < M * N; i++) C[i] = 0;
    for (int i0 = 0; i0 < M; i0 += TILE)
        for (int k0 = 0; k0 < K; k0 += TILE)
            for (int j0 = 0; j0 < N; j0 += TILE)
                for (int i = i0; i < MIN(i0 + TILE, M); i++)
                    for (int k = k0; k < MIN(k0 + TILE, K); k++) {
                        const T a = A[i * K + k];
                        int j = j0;
                        for (; j + UNROLL <= MIN(j0 + TILE, N); j += UNROLL)
                            for (int u = 0; u < UNROLL; u++)
                                C[i * N + j + u] += a * B[k * N + j + u];
                        for (; j < MIN(j0 + TILE, N); j++) C[i * N + j] += a * B[k * N + j];
                    }
}
"""
C_EMPTY = "void empty(void) {}\n"
T = TypeVar("T")


def variants(language: str, count: int) -> list[Kernel]:
    """`count` distinct matmul kernels (tile × unroll × element type)."""
    source, types = (CUDA_SOURCE, CUDA_TYPES) if language == "cuda" else (C_SOURCE, C_TYPES)
    grid = itertools.product(TILES, UNROLLS, types)
    return [
        Kernel(source, "matmul", "PPPiii", language=language, defines=dict(T=t, TILE=s, UNROLL=u))
        for s, u, t in itertools.islice(grid, count)
    ]


def standalone_source(kernel: Kernel) -> str:
    """The kernel as a user hands it to SourceModule: its defines written above its source."""
    return "".join(f"#define {k} {v}\n" for k, v in kernel.defines) + kernel.source


@contextlib.contextmanager
def cold_probes() -> Iterator[None]:
    """A cold process has probed no compiler yet and remembers no version line: make this
    one pay for that too (an empty `WARM_HOME` for the block)."""
    from warmcli.backends.cuda import nvcc, nvrtc

    probe.cache_clear()
    nvcc.supported_sms.cache_clear()
    nvrtc.supported_sms.cache_clear()
    nvrtc.identity.cache_clear()
    saved = os.environ.get("WARM_HOME")
    with tempfile.TemporaryDirectory(prefix="warm-bench-home-") as home:
        os.environ["WARM_HOME"] = home
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("WARM_HOME", None)
            else:
                os.environ["WARM_HOME"] = saved


def warm_batch(
    device: Device, kernels: Sequence[Kernel], jobs: int | None = None
) -> tuple[float, int, int]:
    """Seconds to queue and batch-compile every kernel; (seconds, compiled, processes)."""
    with cold_probes():
        started = time.perf_counter()
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
            cache = KernelCache(device, jobs=jobs)
            for kernel in kernels:
                cache.queue(kernel)
            cache.flush()
        seconds = time.perf_counter() - started
    stats = collector.reader().compilation
    if stats.failed or stats.compiled != len(kernels):
        raise RuntimeError(f"batch compiled {stats.compiled}/{len(kernels)}, {stats.failed} failed")
    return seconds, stats.compiled, stats.compiler_processes


Command = Callable[[Path], list[str]]


def _one_process(command: Command, source: str, suffix: str) -> None:
    with tempfile.TemporaryDirectory(prefix="warm-bench-") as tmp:
        path = Path(tmp, "k" + suffix)
        path.write_text(source)
        proc = subprocess.run(command(path), cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"baseline compile failed:\n{proc.stderr[-2000:]}")


def per_kernel_loop(command: Command, sources: Sequence[str], suffix: str, jobs: int = 1) -> float:
    """Seconds for one compiler process per source, `jobs` at a time."""
    started = time.perf_counter()
    if jobs == 1:
        for source in sources:
            _one_process(command, source, suffix)
    else:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda s: _one_process(command, s, suffix), sources))
    return time.perf_counter() - started


def _with_children_cpu(run: Callable[[], T]) -> tuple[T, float]:
    """`run()` and the CPU seconds of the child processes it waited for (the compilers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _compare(
    name: str,
    device: Device,
    compiler: Compiler,
    command: Command,
    suffix: str,
    empty: str,
    size: Size,
) -> Row:
    kernels = variants(compiler.language, size.kernels)
    sources = [standalone_source(k) for k in kernels]
    cores = default_jobs()
    # Best of N on each side, the same N: noise on a shared machine only ever adds time.
    runs = min(RUNS, size.repeats)
    warm_runs = [_with_children_cpu(lambda: warm_batch(device, kernels)) for _ in range(runs)]
    (batch, compiled, processes), batch_cpu = min(warm_runs)
    pair, pair_cpu = min(
        _with_children_cpu(lambda: per_kernel_loop(command, sources, suffix, jobs=2))
        for _ in range(runs)
    )
    loop = per_kernel_loop(command, sources, suffix)
    floors = [
        _with_children_cpu(lambda: per_kernel_loop(command, [empty], suffix))
        for _ in range(min(3, size.repeats))
    ]
    floor, floor_cpu = median([f for f, _ in floors]), min(c for _, c in floors)
    n = len(kernels)
    # What batching can remove is each kernel's process start-up (the floor); the
    # compiler's own work on each kernel stays: the CPU figures bound the ratio on equal cores.
    left = max(pair_cpu - n * floor_cpu, 1e-9)
    detail = (
        f"{n} variants on {cores} core(s), {compiler.toolchain.path}, best of {runs} each: "
        f"warm batch {batch:.2f} s in {processes} process(es) ({n / batch:.1f} kernels/s); "
        f"baseline one process per kernel two at a time {pair:.2f} s ({n / pair:.1f} "
        f"kernels/s); one at a time {loop:.2f} s ({loop / batch:.1f}× warm, once); "
        f"per-kernel floor (an empty kernel) {floor:.2f} s; compiler CPU seconds "
        f"(load-independent): baseline {pair_cpu:.2f} = {n} × {pair_cpu / n * 1000:.0f} ms, of "
        f"which process start-up (the floor's {floor_cpu * 1000:.0f} ms) is "
        f"{n * floor_cpu:.2f}; warm {batch_cpu:.2f} ({batch_cpu / n * 1000:.0f} ms per kernel "
        f"merged); what bounds the ratio: removing every start-up leaves the compiler's own "
        f"{left / n * 1000:.0f} ms per kernel, so on equal cores no batching exceeds "
        f"{pair_cpu / left:.1f}× (CPU baseline / CPU left; warm {pair_cpu / batch_cpu:.1f}×): "
        f"{TARGET:g}× would need the compiler itself to build a kernel "
        f"{TARGET * left / pair_cpu:.0f}× faster, with other flags, so another binary"
    )
    assert compiled == n
    return at_least(name, pair / batch, TARGET, detail)


RACE = ("compile_cuda", "compile_cuda_nvrtc_batching", "compile_cuda_nvrtc_per_kernel")
NVRTC_BATCH_TARGET = 1.0  # warm (NVRTC) against the best hand-written NVRTC batching
NVRTC_KERNEL_TARGET = 4.0  # warm (NVRTC) against NVRTC one program per kernel (CuPy's cold path)
NVCC_TARGET = 4.0  # warm (NVRTC) against one nvcc per kernel, two at a time (PyCUDA's cold path)
WARM = "warm (NVRTC)"
NVRTC_LOOP = "NVRTC one program per kernel, serial (CuPy's cold path)"
NVCC_LOOP = "one nvcc per kernel, 2 at a time (PyCUDA's cold path)"


def nvrtc_program(source: str, arch: str, includes: Sequence[str]) -> bytes:
    """What a user writes by hand: one NVRTC program, compiled, its cubin read."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"k.cu", 0, [], [])
    try:
        options = [f"--gpu-architecture={arch}".encode(), *(f"-I{d}".encode() for d in includes)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"hand-written NVRTC compile failed: {err}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def nvrtc_batched(groups: Sequence[Sequence[CompileUnit]], includes: Sequence[str]) -> float:
    """Seconds for one hand-merged program per group, one thread each."""
    from warmcli.backends.cuda.nvcc import translation_unit

    sources = [translation_unit(group) for group in groups]
    started = time.perf_counter()
    with ThreadPoolExecutor(len(sources)) as pool:
        list(pool.map(lambda src: nvrtc_program(src, ARCH, includes), sources))
    return time.perf_counter() - started


def hand_batchings(units: Sequence[CompileUnit], jobs: int) -> dict[str, list[list[CompileUnit]]]:
    """The hand-written batchings raced: one program; one per core, the kernels dealt round
    robin (units[i::p]); and one per core as warm groups them (contiguous runs of the queue,
    `plan_groups`), so warm's grouping and warm's own cost can be told apart."""
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


def program_costs(units: Sequence[CompileUnit], includes: Sequence[str]) -> tuple[float, float]:
    """(CPU seconds of one program's fixed cost, of one kernel inside a merged program):
    an empty program, and one program of every unit less that, per unit."""
    from warmcli.backends.cuda.nvcc import translation_unit

    fixed = _cpu(lambda: nvrtc_program(CUDA_EMPTY, ARCH, includes))
    merged = translation_unit(units)
    whole = _cpu(lambda: nvrtc_program(merged, ARCH, includes), repeats=2)
    return fixed, max(whole - fixed, 0.0) / len(units)


def compile_cuda(size: Size) -> list[Row]:
    """The compile race on the same variants, best of the same N on every side."""
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.backends.cuda.nvrtc import find_nvrtc, include_dirs

    try:
        nvcc_device = ArchDevice(ARCH, compiler="nvcc", ptx="auto")
        nvcc = nvcc_device.compiler("cuda")
        if find_nvrtc() is None:
            raise ToolchainError("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)")
        nvrtc_device = ArchDevice(ARCH, compiler="nvrtc", ptx="auto")
        nvrtc_device.compiler("cuda")
    except (ToolchainError, ValueError) as exc:
        return [skipped(name, "-", f"skipped: {exc}") for name in RACE]
    # NVRTC loaded and initialised (its first program) once for every side, not timed.
    nvrtc_program(CUDA_EMPTY, ARCH, ())

    kernels = variants("cuda", size.kernels)
    n, jobs, runs = len(kernels), default_jobs(), min(RUNS, size.repeats)
    sources = [standalone_source(k) for k in kernels]
    includes = include_dirs()
    units = [CompileUnit(f"{i:016x}" * 4, k, ARCH) for i, k in enumerate(kernels)]

    def command(path: Path) -> list[str]:
        cmd = list(nvcc.command(ARCH, ()))
        return [*cmd[:-3], "-o", "k.cubin", path.name]

    def warm(compiler: str) -> float:  # a fresh device: its compiler made and probed cold
        return warm_batch(ArchDevice(ARCH, compiler=compiler, ptx="auto"), kernels, jobs)[0]

    def per_kernel() -> float:
        started = time.perf_counter()
        for source in sources:
            nvrtc_program(source, ARCH, includes)
        return time.perf_counter() - started

    hands = hand_batchings(units, jobs)
    sides: dict[str, Callable[[], float]] = {
        WARM: lambda: warm("nvrtc"),
        "warm (nvcc)": lambda: warm("nvcc"),
        **{name: (lambda g=groups: nvrtc_batched(g, includes)) for name, groups in hands.items()},
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
    fixed, per_kernel_cost = program_costs(units, includes)
    bound = jobs * (fixed + per_kernel_cost) / per_kernel_cost
    detail = (
        f"{n} {ARCH} variants on {jobs} core(s) (load average {os.getloadavg()[0]:.1f}: "
        f"other processes share them), best of {runs} each: {figures}; CPU seconds "
        f"(load-independent): warm (NVRTC) {cpu[WARM]:.2f}, the best hand-written batching "
        f"{cpu[hand_name]:.2f}, hand-written grouped as warm does {cpu[as_warm]:.2f}, one "
        f"program {cpu[one]:.2f}, NVRTC per kernel {cpu[NVRTC_LOOP]:.2f} (cores this process "
        f"got: warm {cpu[WARM] / warm_nvrtc:.2f}, per kernel {cpu[NVRTC_LOOP] / nvrtc_loop:.2f}); "
        f"warm against the hand-written batching grouped as it groups (contiguous runs of the "
        f"queue, so the kernels a workload launches first share one object): "
        f"{seconds[as_warm] / warm_nvrtc:.2f}× (what is left is warm's own cost: keying, "
        f"its toolchain probed cold, the PTX read); "
        f"an NVRTC program costs {fixed * 1000:.0f} ms CPU fixed + {per_kernel_cost * 1000:.0f} "
        f"ms per kernel merged, so against one program per kernel no batching exceeds "
        f"cores × (fixed + kernel) / kernel = {bound:.1f}×, and measured in these rounds "
        f"cores × CPU(per kernel) / CPU(one program) = "
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


def compile_host(size: Size) -> Row:
    from warmcli.backends.host import HostDevice

    device = HostDevice()
    compiler = device.compiler("c")

    def command(path: Path) -> list[str]:
        return compiler.command([], str(path), str(path.with_suffix(".so")))  # type: ignore[attr-defined]

    try:
        return _compare("compile_host", device, compiler, command, ".c", C_EMPTY, size)
    finally:
        device.close()
