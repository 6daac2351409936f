"""`warm run --pycuda`: the run's action with PyCUDA's modules resolving to warm's.

Under `--arch` (GPU-less) every PyCUDA module is a shape-only stand-in in the workload's own
process (`warmcli.pycuda.hook`); a `spawn` or `forkserver` worker the workload starts has
none, so `pycuda` there is a package that says so as it is imported
(`warmcli.warming.worker_names.lacking_in_workers`), and the run's error says so too where a
worker imported it but its error did not come back whole (a process pool broken by a worker
that failed to unpickle its task, importing the workload file). Without `--pycuda`, a GPU-less
run (and `warm verify --workload --arch`'s replay) still takes `warmcli.pycuda.autoinit` as the
stand-in's, which needs no GPU; a run with neither imports none of them. It prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from warmcli.errors import WarmError

# What a `spawn` or `forkserver` child of a `--pycuda --arch` workload lacks (the README:
# "A child process is not seen").
NO_STANDINS = (
    "warm run --pycuda --arch's PyCUDA stand-ins are in the workload's own process only, not "
    "in a spawn or forkserver child (nor is what a child launches warmed): launch there or "
    "in its threads"
)


def with_pycuda(enabled: bool, gpu_less: bool, action: Callable[[], Any]) -> Any:
    """`action` with PyCUDA's modules resolving to warm's (`--pycuda`), else as it is; with
    `gpu_less`, a worker the workload starts by `spawn` or `forkserver`, which has none of
    them, says so where it imports pycuda, and so does the run's error once one did. Without
    `--pycuda`, a `gpu_less` action still finds `warmcli.pycuda.autoinit` a stand-in."""
    if not enabled and not gpu_less:  # (PyCUDA's stand-ins not even imported: ~10 ms)
        return action()
    from warmcli.pycuda.hook import own_autoinit, pycuda_modules

    if not enabled:
        with own_autoinit():
            return action()
    from warmcli.warming.worker_names import lacking_imported, lacking_in_workers

    if gpu_less:
        lacking_in_workers("pycuda", f"No module named 'pycuda' in this child: {NO_STANDINS}")
    try:
        with pycuda_modules(gpu_less):
            return action()
    except WarmError as exc:
        if gpu_less and exc.args and NO_STANDINS not in str(exc) and lacking_imported("pycuda"):
            exc.args = (
                f"{str(exc.args[0]).rstrip('.')}; a child process imported pycuda: {NO_STANDINS}",
            )
        raise
