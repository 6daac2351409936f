"""review60c: the serving hot path's merged changes (stop 60), hostile cases.

A lock `BundleLookup._kernel` takes for a served kernel is never left held by an exception
raised at the first instruction after it is taken (a Ctrl-C's `KeyboardInterrupt` is raised
where the interpreter next checks, which may be right after a lock's `acquire()` returned, outside
a `try` begun on the next line; a `with` guards its body from the instruction after `__enter__`).
A collector a `Registrations` registered with is in its `_with` whatever a Ctrl-C cut short:
its keys are let go with their owner (fba36960), though `register_settled` adds it once (90754c18).
A Ctrl-C as a tune begins measuring leaves no tune counted measuring (else every kernel served
after is clocked), and one in a clocked `get` leaves that thread's later compiles clocked.
Each case's `KeyboardInterrupt` is raised by a trace function at one instruction (real parts
else: a real bundle, the real C compiler, a production process)."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from conftest import Warm
from test_serve_fast_paths import _stored

from warmcli.execution.statistics import Registrations, StatisticsCollector


def _interrupt_at_first_instruction_when(ready: Callable[[], object], code: Any) -> Any:
    """A trace function raising `KeyboardInterrupt` (once) at the first instruction of `code`
    run while `ready()` holds (a lock held, a tune measuring): a signal's exception where the
    next check may raise it."""
    fired = [False]

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode" and not fired[0] and ready():
            fired[0] = True
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call" and frame.f_code is code:
            frame.f_trace_opcodes = True
            return local
        return None

    return tracer


def test_a_ctrl_c_right_after_the_lookups_lock_is_taken_leaves_it_free(tmp_path: Path) -> None:
    from warmcli.backends.host.device import HostDevice
    from warmcli.bundle.store import Bundle
    from warmcli.runtime.lookup import BundleLookup

    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 2)
    device = HostDevice()
    with Bundle.open(path) as bundle:
        lookup = BundleLookup(device, bundle, None, False, Registrations(device.id, "compilation"))  # type: ignore[arg-type]
        code = BundleLookup._kernel.__code__
        sys.settrace(_interrupt_at_first_instruction_when(lookup._lock.locked, code))
        try:
            with pytest.raises(KeyboardInterrupt):
                lookup._kernel(records[0].key)
        finally:
            sys.settrace(None)
        # Before: acquire() then `try:` (067df30f): the lock stayed held, so every later
        # lookup of the process (the next served kernel) waited for good.
        assert not lookup._lock.locked()
        served = lookup._kernel(records[1].key)
        assert served is not None and served.key == records[1].key


def _interrupt_first_call_of(code: Any) -> Any:
    """A trace function raising `KeyboardInterrupt` as `code` is first called (once)."""
    fired = [False]

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call" and frame.f_code is code and not fired[0]:
            fired[0] = True
            raise KeyboardInterrupt
        return None

    return tracer


def test_a_ctrl_c_in_adding_a_collector_still_lets_its_keys_go() -> None:
    collector = StatisticsCollector()
    registrations = Registrations("host:0", "compilation")
    at = ("host:0", "compilation", registrations.owner)
    sys.settrace(_interrupt_first_call_of(weakref.WeakSet.add.__code__))
    try:
        with pytest.raises(KeyboardInterrupt):
            registrations.register_settled(collector, "k1", "loaded")
    finally:
        sys.settrace(None)
    registrations.register_settled(collector, "k2", "loaded")  # the next kernel served
    assert collector._seen[at] == {"k1", "k2"}
    del registrations
    gc.collect()
    # Before: `_added` named the collector before the add the Ctrl-C cut short, so no later
    # key added it: its 2 keys were kept for good once their owner was gone.
    assert at not in collector._seen


def test_a_ctrl_c_as_a_tune_begins_measuring_leaves_none_counted() -> None:
    from warmcli.runtime import tune_clock

    assert not tune_clock.measuring
    sys.settrace(
        _interrupt_at_first_instruction_when(
            lambda: tune_clock.measuring, tune_clock.measuring_now.__wrapped__.__code__
        )
    )
    try:
        with pytest.raises(KeyboardInterrupt), tune_clock.measuring_now():
            pass
    finally:
        sys.settrace(None)
    # Before: the count went up before its `try` began, so it stayed at 1 for good: every
    # kernel served after (in any thread) was clocked, two Python frames more each.
    assert not tune_clock.measuring


# A production process: a Ctrl-C lands in `KernelCache.get` right after its tune clock began (a
# compile inside a tune's measuring), before its `try`; then a tune's measuring compiles another
# kernel. It prints the seconds that measuring found spent obtaining kernels (left out of the tune).
CLOCK_CUT = """
import json, sys, numpy as np, warmcli
from warmcli import Kernel
from warmcli.runtime import tune_clock
from warmcli.runtime.kernel_cache import KernelCache
K = [Kernel(f"void c{i}(float *x, int n) {{ x[0] += {i}; }}", f"c{i}", "Pi") for i in (1, 2)]
rt = warmcli.runtime("host")
y = rt.upload(np.zeros(8, dtype=np.float32))
fired = []
def local(frame, event, arg):
    if event == "opcode" and not fired and getattr(tune_clock._thread, "inside", False):
        fired.append(1)
        raise KeyboardInterrupt
    return local
def tracer(frame, event, arg):
    if event == "call" and frame.f_code is KernelCache.get.__code__:
        frame.f_trace_opcodes = True
        return local
with tune_clock.measuring_now():
    sys.settrace(tracer)
    try:
        rt.launch(K[0], y, 8)
    except KeyboardInterrupt:
        pass
    sys.settrace(None)
with tune_clock.measuring_now() as obtaining:
    rt.launch(K[1], y, 8)  # compiled here: what a tune leaves out of its seconds
    spent = obtaining()
print(json.dumps({"fired": len(fired), "spent": spent}))
"""


def test_a_ctrl_c_as_a_compile_is_clocked_leaves_later_compiles_clocked(warm: Warm) -> None:
    doc = warm.production(CLOCK_CUT)
    # Before: the thread's `inside` stayed set, so no later compile of that thread was clocked
    # (spent 0.0): each tune it measured counted its kernels' compiles as measuring too.
    assert doc["fired"] == 1 and doc["spent"] > 0, doc
