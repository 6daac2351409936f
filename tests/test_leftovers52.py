"""Stop 52's leftovers, mended: a tune whose candidates' launch function meets a barrier
across two threads of one runtime (each thread tuning the same shape) hung for ever since
`tune_flight` (review52g): the measurer waited at the barrier for the other thread, which
waited for the measurer's pick. A wait now lasts `LONGEST_WAIT` at most, then the waiter
measures too, as every thread did before (its barrier let go). And a URL written with one
slash (`https:/u:PW@h/x.warm`, read as a path) was said whole, its password too, in the one
line saying there is no such bundle (review52c's leftover): now as the URL it meant is
(`https:/u:***@h/x.warm`). Real host runtime, real compiler, the real CLI (forked)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)

from warmcli import Kernel, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.runtime import tune_flight

SRC = "void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"


def test_a_barrier_across_threads_in_a_launch_function_is_no_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tune_flight, "LONGEST_WAIT", 0.2)  # (2 s in use: the same path)
    both = threading.Barrier(2)  # no timeout: a hang, were neither let go

    def launch(rt, kernel, x, n, *, stream=None):
        both.wait()  # each candidate's run meets the other thread's
        rt.launch(kernel, x, n, stream=stream)

    steps = {f"s{s}": Kernel(SRC, "add", "Pi", defines={"STEP": s}) for s in (1, 2)}
    tunable = Tunable("barrier", steps, launch, warmup=1, repeats=1, restore=())
    rt = Runtime(HostDevice(), None, misses=None)
    picks: list[str | None] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            picks.append(
                rt.tune(tunable, rt.upload(np.zeros(4, np.float32)), 4, stream=rt.stream())
            )
        except BaseException as exc:  # said below
            errors.append(exc)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "the measurer and its waiter hung"
    finally:
        both.abort()  # (a hang's threads let go, whatever the test found)
        rt.close()
    assert errors == [] and len(picks) == 2 and None not in picks, (errors, picks)


@pytest.mark.parametrize(
    "given, said",
    [
        ("https:/u:PW52@h/x.warm", "https:/u:***@h/x.warm"),
        ("S3:/k:PW52@b/x.warm", "S3:/k:***@b/x.warm"),
        ("http:/PW52@h/x.warm?sig=PW52", "http:/***@h/x.warm?***"),
    ],
)
def test_a_url_written_with_one_slash_never_shows_its_secret(
    warm: Warm, given: str, said: str
) -> None:
    proc = warm("stats", given)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "PW52" not in proc.stderr + proc.stdout, proc.stderr  # was said whole
    assert proc.stderr == f"warm: error: {said}: no such bundle\n", proc.stderr
