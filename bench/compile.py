"""The compile variants and warm's cold batch, shared by the CUDA race (`bench.race`),
and the host batch (row `compile_host`).

The variants are a tiled matmul over tile × unroll × element type: kernels that
truly differ (different defines), never duplicates. warm's side is a fresh
`KernelCache` on a fresh device with no bundle: every variant queued, then one
`flush` (the batch compiler: about as many programs or compiler processes as
cores), with the toolchain probes forgotten first (a cold process; the version lines
warm's home remembers: none, or those of the home the caller names) so their cost
is counted.

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

from bench.rows import Row, Size, at_least, median
from warmcli.backends.base import Device
from warmcli.backends.batch import default_jobs
from warmcli.backends.compiler import Compiler
from warmcli.backends.toolchain import probe
from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride
from warmcli.kernel import Kernel
from warmcli.runtime.kernel_cache import KernelCache

TARGET = 15.0
RUNS = 5  # on each side (best of 5, as the race was first measured), each from a cold start: a
# fresh cache, fresh temporary folders; on a shared machine a program's CPU swings 15-30 %
# from round to round, and 3 rounds left a side's best to chance
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
def cold_probes(home: str | None = None) -> Iterator[None]:
    """A cold process has probed no compiler yet: make this one pay for that too. `home`:
    warm's home for the block (a machine where warm ran before remembers its compilers'
    version lines there); by default an empty one, so no version line is remembered."""
    from warmcli.backends.cuda import nvcc, nvrtc

    probe.cache_clear()
    nvcc.supported_sms.cache_clear()
    nvrtc.supported_sms.cache_clear()
    nvrtc.identity.cache_clear()
    saved = os.environ.get("WARM_HOME")
    with contextlib.ExitStack() as stack:
        if home is None:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="warm-bench-home-"))
        os.environ["WARM_HOME"] = home
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("WARM_HOME", None)
            else:
                os.environ["WARM_HOME"] = saved


def warm_batch(
    device: Device, kernels: Sequence[Kernel], jobs: int | None = None, home: str | None = None
) -> tuple[float, int, int, float]:
    """Seconds to queue and batch-compile every kernel, its compilers probed cold (`home`:
    as `cold_probes`); (seconds, compiled, processes, seconds inside the batch compiler:
    the rest is warm's own work around it, keying, its toolchain, filing what it built)."""
    with cold_probes(home):
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
    return seconds, stats.compiled, stats.compiler_processes, stats.seconds


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
    (batch, compiled, processes, _), batch_cpu = min(warm_runs)
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
    # Batching removes each kernel's process start-up (the floor); the compiler's own work
    # on each kernel stays. warm's CPU less its processes' start-ups is that work, merged:
    # no batching with this compiler and these flags spends less, whence the bound.
    own = max(batch_cpu - processes * floor_cpu, 1e-9)
    detail = (
        f"{n} variants on {cores} core(s), {compiler.toolchain.path}, best of {runs} each: "
        f"warm batch {batch:.2f} s in {processes} process(es) ({n / batch:.1f} kernels/s); "
        f"baseline one process per kernel two at a time {pair:.2f} s ({n / pair:.1f} "
        f"kernels/s); one at a time {loop:.2f} s ({loop / batch:.1f}× warm, once); "
        f"per-kernel floor (an empty kernel) {floor:.2f} s; compiler CPU seconds "
        f"(load-independent): baseline {pair_cpu:.2f} ({pair_cpu / n * 1000:.0f} ms a kernel, "
        f"{floor_cpu * 1000:.0f} ms of it process start-up), warm {batch_cpu:.2f} "
        f"({batch_cpu / pair_cpu * 100:.0f}%), of which the compiler's own work on the "
        f"kernels, start-ups taken out, is {own:.2f} ({own / n * 1000:.0f} ms a kernel): "
        f"what bounds the ratio on equal cores is that work: a batch with no start-up at "
        f"all reaches CPU baseline / CPU own = {pair_cpu / own:.1f}× (warm "
        f"{pair_cpu / batch_cpu:.1f}×); {TARGET:g}× "
        f"would need the compiler to build a kernel in {pair_cpu / n / TARGET * 1000:.0f} ms, "
        f"other flags, so another binary"
    )
    assert compiled == n
    return at_least(name, pair / batch, TARGET, detail)


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
