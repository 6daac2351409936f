"""What serving a kernel allocates, and what the `serve_per_kernel` row says of the collector.

Python's cyclic garbage collector runs a collection every 700 tracked objects allocated net
(dicts, lists, tuples, class instances...): every object a served kernel keeps moves the next
collection closer, and a generation-1 one in a small workload's first run costs it ~0.6 ms
(stop 47's 50-kernel figure). A served host kernel keeps its entry in the hit table and its
function, and nothing more (its function is made from its symbol's address: made by
(name, library), ctypes kept the library in a dict of each function's; ctypes never unloads a
library, and the device holds each it loaded). `rt.can_build`'s module is imported on its first
use, not by a serving process. The bench's fresh process times the collector's collections
during the first run (`bench.first_result`'s `collected`), never disabling it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

N = 60
FIRST = 20  # launched first: what a process does once is done by then
WORKLOAD = f"""
from warmcli import Kernel

SOURCE = "void touch(int *p, int n) {{ p[V] = V * 7 + n; }}"
KERNELS = [Kernel(SOURCE, "touch", "Pi", defines={{"V": i}}) for i in range({N})]


def workload(runtime, kernels=KERNELS):
    buffer = runtime.buffer({N}, "int32")
    for kernel in kernels:
        runtime.launch(kernel, buffer, 3)
    runtime.synchronize()
    return buffer
"""
# Runs the first kernels, then counts the tracked objects the others' first launches leave
# alive (the collector off in this measuring process only, after a collection: what is new
# in its lists is kept), and prints that per kernel, the values the kernels wrote, the
# modules imported and the misses.
SERVE = f"""
import gc, json, sys
sys.path.insert(0, sys.argv[1])
import warmcli, served
if len(sys.argv) > 2:
    warmcli.use_bundle(sys.argv[2])
rt = warmcli.runtime("host")
served.workload(rt, served.KERNELS[:{FIRST}])
gc.collect()
gc.disable()
before = {{id(o) for o in gc.get_objects()}}
served.workload(rt, served.KERNELS[{FIRST}:])
kept = len([o for o in gc.get_objects() if id(o) not in before]) / {N - FIRST}
values = rt.read(served.workload(rt)).tolist()
print(json.dumps([kept, values, sorted(sys.modules), len(warmcli.report().misses)]))
"""


def _serve(warm: Warm, folder: Path, bundle: Path | None) -> list:  # type: ignore[type-arg]
    out = subprocess.run(
        [sys.executable, "-c", SERVE, str(folder), *([str(bundle)] if bundle else [])],
        env=warm.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_served_kernel_keeps_two_tracked_objects_and_computes_as_cold(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "served.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert warm("run", tmp_path / "served.py", "-b", bundle, "-q").returncode == 0
    kept, values, modules, misses = _serve(warm, tmp_path, bundle)
    assert misses == 0  # every kernel served from the bundle
    # its hit-table entry and its function; was 3 (the function's dict holding its library)
    assert kept <= 2.5, kept
    assert values == [v * 7 + 3 for v in range(N)]
    assert "warmcli.runtime.buildable" not in modules  # `rt.can_build`'s: not a hit's
    cold = tmp_path / "cold"
    cold_warm = Warm(dict(warm.env, WARM_HOME=str(cold)))
    assert _serve(cold_warm, tmp_path, None)[1] == values  # bit-identical to cold


def test_can_build_still_answers_once_imported_on_use(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(WORKLOAD)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import warmcli, served\n"
        "rt = warmcli.runtime('host')\n"
        "print(rt.can_build(served.KERNELS[0]), 'warmcli.runtime.buildable' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=warm.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_the_bench_process_times_the_collector_in_the_first_run(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert warm("run", tmp_path / "served.py", "-b", bundle, "-q").returncode == 0
    out = subprocess.run(
        [sys.executable, "-m", "bench.first_result", str(tmp_path / "served.py"), str(bundle)],
        env=dict(warm.env, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[0])
    assert result["loaded"] == N and result["compiled"] == 0
    assert 0 <= result["collected"] < result["first"]
    assert 0 <= result["collected_again"] < result["again"] or result["collected_again"] == 0
    assert all(g in (0, 1, 2) for g in result["collections"])
