"""The benchmark families, in the order they run, and the rows each one yields.

A family is a function of a `Size` returning its rows. A family that raises
yields its rows with `met` null and the error in `detail`, so one broken family
never hides the others' figures. Nothing here prints.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable

from bench import compile as compile_rows
from bench import dispatch, overhead, race, scale, serve, shard, start
from bench.rows import Row, Size

Family = Callable[[Size], list[Row]]

FAMILIES: dict[str, tuple[Family, tuple[str, ...]]] = {
    "compile": (
        lambda s: [*race.compile_cuda(s), compile_rows.compile_host(s)],
        (*race.RACE, "compile_host"),
    ),
    "start": (start.starts, ("hot_start", "hot_start_generated", "hot_vs_floor")),
    "cuda_start": (start.cuda_start, ("hot_start_cuda", "hot_start_cuda_generated")),
    "serve": (serve.serve_per_kernel, ("serve_per_kernel",)),
    "import": (start.imports, ("import",)),
    "dispatch": (
        lambda s: [dispatch.dispatch_host(s), dispatch.dispatch_cuda(s)],
        ("dispatch_host", "dispatch_cuda"),
    ),
    "scale": (
        scale.scale,
        ("scale_open", "bundle_size", "scale_stats", "stats_json_scale", "verify_scale"),
    ),
    "overhead": (
        lambda s: [overhead.cli_start(s), overhead.pass_overhead(s)],
        ("cli_start", "pass_overhead"),
    ),
    "shard": (lambda s: [shard.shard_speedup(s)], ("shard_speedup",)),
}


def run(size: Size, only: Iterable[str] | None = None) -> list[Row]:
    rows: list[Row] = []
    for name, (family, names) in FAMILIES.items():
        if only and name not in only:
            continue
        try:
            rows += family(size)
        except Exception as exc:
            last = traceback.format_exception_only(exc)[-1].strip()
            rows += [Row(n, None, "-", None, f"error: {last}") for n in names]
    return rows
