"""The cost of serving one kernel from the bundle, hot, in process (row `serve_per_kernel`).

One bundle is warmed by the real CLI (`warm run`) from the largest generated
workload (`bench.generated`); the smaller ones launch a prefix of the same kernels,
so the bundle serves them all. Each size is started in fresh processes
(`bench.first_result`): the workload's first run (serve every kernel, launch
each once) less its second run (the same launches, everything loaded), divided by
the kernels served, is the cost of serving one. The bundle's opening (and the
runtime's making) comes before the first run and is timed apart, in the detail: it
is once per process, not per kernel. What the first launches do once per process
(the toolchain's identity read, a statement prepared, a blob read and loaded once
for the kernels it holds) is in the kernels' cost; the detail says how much, from
the cost of one more kernel between the smallest and largest size, and what of it no
path skips: the same first uses done plainly in fresh processes (`bench.first_use`, one
beside each start of the smallest size). Medians of a
few processes per size; the row is the worst size against 20 µs, and its detail
says how flat the cost is across sizes, and what bounds it: the part of serving one
kernel no path skips, measured in this process in the same run (its row read and
checked as the runtime reads it, its content hash and key, its blob read and checked
and its module loaded, each once per blob, and its function made from the module).
The kernels' cost includes what Python's cyclic garbage collector takes in the first run
(a user's process pays it: the collector is never disabled or frozen here), and the detail
says how much, per size: the time `bench.first_result` saw in collections during the
first run's launches less during the second run, per kernel (median of the processes),
and the generations collected. A collection is due every 700 objects (Python's default)
the collector tracks, allocated net since the last, whatever allocated them (an import,
the workload's own objects), so whether one lands in a small size's first run moves with
every object allocated before it; a generation-1 collection there costs a 50-kernel
start ~0.6 ms.
"""

from __future__ import annotations

import json
import runpy
import tempfile
import time
from pathlib import Path

from bench import generated
from bench.rows import Row, Size, at_most, median, ms, python, us
from bench.start import env_for, start, warm_run

BUDGET = 20e-6
PROCESSES = 3


def _floor(workload: Path, bundle: Path, home: Path) -> tuple[float, ...]:
    """Per kernel, best of three: the workload's kernel rows read (the prefetch query) and
    each checked and parsed as `Bundle.kernel` does when serving (`keyed`, as the runtime
    reads a row it keyed from its own kernel: a host row's key is not hashed again from its
    components, which `its content hash and key` counts apart); of that, what sqlite3
    takes to hand over a row's values (no check, no bound) and `json.loads` to parse its
    components; each kernel's content hash and key (new kernel objects each time: a hash
    is kept on its kernel); its blob read and checked and its module loaded (once per
    blob, over the kernels; a module is loaded once per process, so the first time is
    its cost: from `home`'s library files, which the warming run wrote, as a served
    process finds them), and its function made from its module (by the host device)."""
    import json
    import sqlite3

    from warmcli.backends.host.device import HostDevice
    from warmcli.backends.host.libraries import DIRECTORY
    from warmcli.bundle.rows import KERNEL_COLUMNS
    from warmcli.bundle.store import Bundle
    from warmcli.kernel import kernel_key

    rows_s = keys_s = raw_s = json_s = blobs_s = functions_s = float("inf")
    plain = f"SELECT {KERNEL_COLUMNS} FROM kernels WHERE backend = ? AND arch = ?"
    conn = sqlite3.connect(f"file:{bundle}?mode=ro", uri=True)
    device = HostDevice()
    device._files._shared = str(home / DIRECTORY)  # the served processes' home, not ours
    with Bundle.open(bundle) as opened:
        some = next(opened.each_kernel())  # which device it holds: no part of serving
        for _ in range(3):
            kernels = runpy.run_path(str(workload))["KERNELS"]
            started = time.perf_counter()
            rows = opened.kernel_rows(some.backend, some.arch, 0, len(kernels))
            records = [opened.kernel(key, {key: row}, keyed=True) for key, row in rows.items()]
            rows_s = min(rows_s, (time.perf_counter() - started) / len(records))
            started = time.perf_counter()
            raw = conn.execute(plain, (some.backend, some.arch)).fetchall()[: len(records)]
            raw_s = min(raw_s, (time.perf_counter() - started) / len(records))
            started = time.perf_counter()
            for row in raw:
                json.loads(row[9])
            json_s = min(json_s, (time.perf_counter() - started) / len(raw))
            started = time.perf_counter()
            for kernel in kernels:
                kernel_key(kernel, some.arch, some.toolchain)
            keys_s = min(keys_s, (time.perf_counter() - started) / len(kernels))
            started = time.perf_counter()
            modules: dict[str, object] = {}
            for record in records:
                if record is not None and record.sha256 not in modules:
                    modules[record.sha256] = device.load_module(opened.blob(record.sha256))
            if blobs_s == float("inf"):  # loaded once per process: the first time is the cost
                blobs_s = (time.perf_counter() - started) / len(records)
            started = time.perf_counter()
            for record, kernel in zip(records, kernels, strict=False):
                if record is not None:
                    device.get_function(modules[record.sha256], record.symbol, kernel)
            functions_s = min(functions_s, (time.perf_counter() - started) / len(records))
    conn.close()
    device.close()
    return rows_s, keys_s, raw_s, json_s, blobs_s, functions_s


# What `bench.first_use` times, as the detail names it.
FIRST_USES = {
    "sha256": "OpenSSL's first sha256",
    "toolchain": "the compiler found on PATH and its version line read",
    "rows": "the first kernel rows' statement prepared and pages read",
    "blob": "the first blob's",
    "dlopen": "the first library's dlopen",
}


def _first_uses(env: dict[str, str], bundle: Path) -> dict[str, float]:
    """One fresh process's first uses that no path skips (`bench.first_use`), in seconds."""
    out, _ = python("-m", "bench.first_use", str(bundle), env=env)
    return json.loads(out)  # type: ignore[no-any-return]


def _generations(collected: list[int]) -> str:
    """A first run's collections, as the detail names them."""
    if not collected:
        return "no collection"
    return f"{len(collected)} collection(s), generation {'/'.join(map(str, collected))}"


def serve_per_kernel(size: Size) -> list[Row]:
    per_kernel: dict[int, float] = {}
    collected: dict[int, tuple[float, list[int]]] = {}  # per kernel, and generations
    opening: list[float] = []
    firsts: list[dict[str, float]] = []  # beside each start of the smallest size
    with tempfile.TemporaryDirectory(prefix="warm-bench-serve-") as tmp_name:
        tmp = Path(tmp_name)
        env = env_for(tmp / "home")
        bundle = tmp / "served.warm"
        biggest = max(size.serve)
        warm_run(env, generated.write(tmp / f"gen{biggest}.py", biggest), bundle)
        rows_s, keys_s, raw_s, json_s, blobs_s, functions_s = _floor(
            tmp / f"gen{biggest}.py", bundle, tmp / "home"
        )
        for n in size.serve:
            workload = generated.write(tmp / f"gen{n}.py", n)
            runs = []
            for _ in range(PROCESSES):
                runs.append(start(env, workload, bundle))
                if n == min(size.serve):  # alternately: load on the machine hits both alike
                    firsts.append(_first_uses(env, bundle))
            if any(r["compiled"] or r["loaded"] != n for r in runs):
                raise RuntimeError(f"{n} kernels: not all served from the bundle: {runs}")
            per_kernel[n] = median([(r["first"] - r["opened"] - r["again"]) / n for r in runs])
            by_gc = sorted(runs, key=lambda r: r["collected"] - r["collected_again"])
            middle = by_gc[len(by_gc) // 2]  # the median process, and what it collected
            spent = (middle["collected"] - middle["collected_again"]) / n
            collected[n] = (spent, middle["collections"])
            opening += [r["opened"] for r in runs]
    worst = max(per_kernel.values())
    sizes = ", ".join(f"{n}: {us(s)}" for n, s in per_kernel.items())
    small, large = min(per_kernel), max(per_kernel)
    low, high = per_kernel[small], per_kernel[large]
    # One more kernel's cost, between the sizes; the rest of the smallest size's is what its
    # first launches pay once per process (the toolchain's identity, a statement prepared,
    # a signature's fast tests made, a blob loaded), whatever the kernels.
    marginal = (high * large - low * small) / (large - small) if large > small else high
    floor = {k: median([f[k] for f in firsts]) for k in FIRST_USES}
    first_uses = ", ".join(f"{what} {us(floor[k])}" for k, what in FIRST_USES.items())
    gc_sizes = ", ".join(f"{n}: {us(s)} ({_generations(g)})" for n, (s, g) in collected.items())
    detail = (
        f"per kernel served (first run less second run, over kernels; median of {PROCESSES} "
        f"fresh processes): {sizes}; of which Python's garbage collector, its collections "
        f"in the first run less in the second, per kernel (the median process): {gc_sizes}; "
        f"largest/smallest {high / low:.2f} (1 = flat); one "
        f"more kernel {us(marginal)}, once per process in the first run "
        f"{(low - marginal) * small * 1e3:.2f} ms (of which what no path skips, done plainly "
        f"in fresh processes, medians: {first_uses}; together {sum(floor.values()) * 1e3:.2f} "
        f"ms); "
        f"the bundle's opening and the runtime's making, "
        f"before the first run and not counted above: median {ms(median(opening))}; bound: "
        f"what no path skips, measured here, per kernel: its row read and checked "
        f"{us(rows_s)} (of which sqlite3 handing over its values, unchecked, {us(raw_s)}, "
        f"and parsing its components' JSON {us(json_s)}), its content hash and key {us(keys_s)}, "
        f"its blob read and checked and its module loaded (once per blob) {us(blobs_s)}, its "
        f"function made {us(functions_s)}; together {us(rows_s + keys_s + blobs_s + functions_s)}"
    )
    return [at_most("serve_per_kernel", worst / BUDGET, 1.0, detail, "of 20 µs per kernel")]
