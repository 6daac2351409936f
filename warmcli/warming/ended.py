"""A runtime whose passes ended, and a thread the workload left running that still uses it.

Each pass waits for the non-daemon threads its workload left running, as Python waits for
them before a process ends; a daemon thread it does not wait for (README: the workload
contract) may still launch or tune on that pass's runtime after the pass ended: its bundle
closed by then, and the pass running then another's. `retire` gives such a thread what Python
gives it: at its next launch or tune there it stops (`SystemExit`, which ends a thread
silently), as Python stops a daemon thread as its process ends, said once in a note (the pass
running then, if any, shows it); nothing of it is counted, looked up in the bundle or stored,
so a good bundle is never called corrupt for it. The thread that ran the passes (the one that
retires the runtime) keeps the runtime as it was. The module never prints.
"""

from __future__ import annotations

import threading
from typing import Any

from warmcli.execution.process_mode import note_reported
from warmcli.runtime.runtime import Runtime


def retire(runtime: Runtime) -> None:
    """From now on, a thread other than this one that launches or tunes on `runtime` is
    stopped there, said once (a runtime retired already stays as it is)."""
    if "launch" in vars(runtime):
        return
    owner, lock, said = threading.get_ident(), threading.Lock(), [False]
    launch, tune = runtime.launch, runtime.tune
    runtime.misses.closed = True  # its misses are no pass's to explain now

    def stop(what: str) -> None:
        if threading.get_ident() == owner:
            return
        with lock:
            first, said[0] = not said[0], True
        if first:
            name = threading.current_thread().name
            note_reported(
                f"thread {name} {what} after its pass ended (a pass waits for no "
                "daemon thread, as Python does not): stopped there, as Python stops a daemon "
                "thread as its process ends; what it launches then is not warmed"
            )
        raise SystemExit  # ends the thread silently, as Python's own hook does

    def late_launch(kernel: Any, *args: Any, **options: Any) -> Any:
        stop(f"launched kernel {getattr(kernel, 'label', type(kernel).__name__)}")
        return launch(kernel, *args, **options)

    def late_tune(tunable: Any, *inputs: Any, **options: Any) -> Any:
        stop(f"tuned {getattr(tunable, 'name', type(tunable).__name__)}")
        return tune(tunable, *inputs, **options)

    vars(runtime).update(launch=late_launch, tune=late_tune)  # the instance's own, shadowing
