"""Stop 54's mutation review (the runtime, the warming passes, production and the CLI's
verdicts): the rules whose mutant no earlier test caught, each held here by what a user sees
through the public API (one host runtime, its few kernels compiled once for the module), a
production process or the real CLI. Each test's doc says what the mutant did instead.

- Launch verdicts: under `CompileAndAutotune` a read is refused as under `CompileOnly`; a
  launch is counted queued, discarded or executed by its verdict; one shard of N queues each
  kernel (a tunable of one candidate is answered, never measured).
- Tunes: a served pick whose launch function raised after launching is raised, never measured
  again; a pick timed on a build the bundle no longer holds is measured again and written back
  alone (a candidate's time the median of its samples); a GPU-less tune whose every candidate
  fails fails; a candidate that raised mid-measuring leaves the next the inputs as they were.
- Production: strict mode's words, its warning with no bundle, its report of what it refused,
  a locked bundle raised under it; no write-back pending in a process that writes none back.
- `warm run` / `warm diff`: a failed run keeps what it stored, unrecorded; a later run drops a
  kernel whose binary fails its sha256; `warm diff` over a malformed row exits 1.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import (
    DiscardedReadError,
    Kernel,
    ProcessMode,
    ProcessModeOverride,
    Runtime,
    StreamMode,
    Tunable,
)
from warmcli.backends.host import HostDevice
from warmcli.execution.stream_mode import default_for
from warmcli.runtime.shard import Shard

SRC = "void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += U; }"


def inc(u: int) -> Kernel:
    return Kernel(SRC, "inc", "Pi", defines={"U": u})


def launch(rt: Runtime, k: Kernel, x: Any, *, stream: Any = None) -> None:
    rt.launch(k, x, x.shape[0], stream=stream)


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    runtime = Runtime(HostDevice())
    yield runtime
    runtime.close()


@pytest.mark.parametrize("mode", [ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE])
def test_a_read_under_either_warming_mode_is_refused(rt: Runtime, mode: ProcessMode) -> None:
    x = rt.buffer(4)
    with ProcessModeOverride(mode), pytest.raises(DiscardedReadError, match=mode.value):
        rt.read(x)
    assert default_for(mode) is StreamMode.DISCARD
    assert rt.read(x).shape == (4,)  # read freely once the pass is over


def test_each_launch_is_counted_by_its_verdict(rt: Runtime) -> None:
    x, counted = rt.buffer(4), []
    for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE, ProcessMode.EXECUTE):
        with ProcessModeOverride(mode) as collector:
            launch(rt, inc(1), x)
        e = collector.reader().execution
        counted.append((e.queued, e.discarded, e.executed))
    assert counted == [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    assert rt.read(x).tolist() == [1.0] * 4  # only the executed launch wrote


def test_a_tunable_of_one_candidate_is_answered_not_measured(rt: Runtime) -> None:
    x = rt.buffer(4)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        assert rt.tune(Tunable("one", {"only": inc(1)}, launch), x) == "only"
    a = collector.reader().autotune
    assert (a.registered, a.measured, a.candidates_measured) == (0, 0, 0)


def test_each_kernel_is_queued_by_exactly_one_of_three_shards() -> None:
    kernels = [inc(u) for u in range(9)]
    queued = 0
    for index in range(3):
        shard = Runtime(HostDevice(), shard=Shard(index, 3))
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
            for k in kernels:
                launch(shard, k, shard.buffer(4))
        queued += collector.reader().compilation.queued
        shard.close()
    assert queued == len(kernels)


def _served_pick(rt: Runtime, tmp: Any, tunable: Tunable, x: Any) -> tuple[Runtime, str]:
    """`tunable` measured on `x` by `rt` and stored in a bundle at `tmp`; a runtime serving
    that bundle, and the pick it holds."""
    from warmcli.bundle.store import Bundle

    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        pick = rt.tune(tunable, x)
    with Bundle.open(tmp / "b.warm", write=True) as bundle:
        rt.persist(bundle)
    assert pick is not None
    return Runtime(HostDevice(), Bundle.open(tmp / "b.warm")), pick


def test_a_served_pick_whose_launch_function_raises_after_launching_raises(
    rt: Runtime, tmp_path: Any
) -> None:
    """A launch function that launched the bundle's pick, then raised, wrote the buffers: its
    error is the caller's, never a stale pick measured again from buffers a launch wrote."""
    two = {f"c{u}": inc(u) for u in (1, 2)}
    x = rt.buffer(4)
    served, _ = _served_pick(rt, tmp_path, Tunable("after", two, launch), x)

    def launch_then_refuse(rt: Runtime, k: Kernel, x: Any, *, stream: Any = None) -> None:
        launch(rt, k, x, stream=stream)
        raise ValueError("refused after launching")

    with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
        with pytest.raises(ValueError, match="refused after launching"):
            served.tune(Tunable("after", two, launch_then_refuse), served.buffer(4))
    assert collector.reader().autotune.measured == 0
    served.close()


def test_a_served_pick_measured_on_a_build_the_bundle_no_longer_holds_is_measured_again(
    rt: Runtime, tmp_path: Any
) -> None:
    """The bundle's pick was timed on a build it no longer holds (not this one's key): its
    timing is not this binary's, so a serving process measures it again, never takes it.
    (Each candidate's time, as stored, is the median of its samples; the tune measured again
    is written back, though its runtime built nothing.)"""
    from dataclasses import replace

    from warmcli.bundle.store import Bundle

    two = {f"c{u}": inc(u) for u in (3, 4)}
    x = rt.buffer(4)
    served, pick = _served_pick(rt, tmp_path, Tunable("gone", two, launch, repeats=4), x)
    served.close()
    with Bundle.open(tmp_path / "b.warm", write=True) as bundle:
        (tune,) = [t for t in bundle.tunes() if t.operation == "gone"]
        # each candidate's time is the median of its four samples (not their least)
        assert all(c.seconds == statistics.median(c.samples) for c in tune.candidates), tune
        elsewhere = tuple(
            replace(c, kernel_key="ab" * 32) if c.name == pick else c for c in tune.candidates
        )
        bundle.put(tunes=[replace(tune, candidates=elsewhere)])
    again = Runtime(HostDevice(), Bundle.open(tmp_path / "b.warm"))
    with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
        again.tune(Tunable("gone", two, launch), again.buffer(4))
    a = collector.reader().autotune
    assert (a.measured, a.hits) == (1, 0)
    with Bundle.open(tmp_path / "b.warm", write=True) as bundle:  # its kernels served: the
        assert again.persist(bundle) == (0, 1)  # tune alone written back
        assert [t.pick for t in bundle.tunes() if t.operation == "gone"] != [None]
    again.close()


def test_a_gpu_less_tune_whose_every_candidate_fails_to_compile_fails() -> None:
    """A pre-build without a GPU (`--arch`) records a tune pending for a GPU to measure only
    where a candidate built: every one failing fails the tune, naming each (pending, a GPU
    machine's first call found nothing it could run)."""
    from warmcli import TuneFailure
    from warmcli.backends.cuda.arch import ArchDevice

    src = 'extern "C" __global__ void k(float *x) { x[0] = nonsense%d; }'
    bad = {f"c{i}": Kernel(src % i, "k", "P", language="cuda") for i in range(2)}
    rt = Runtime(ArchDevice("sm_90"))
    try:
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
            with pytest.raises(TuneFailure, match=r"every candidate failed(.|\n)*nonsense1"):
                rt.tune(Tunable("bad", bad, lambda rt, k, x, *, stream=None: None), rt.buffer(4))
        assert collector.reader().autotune.pending == 0
    finally:
        rt.close()


def test_a_candidate_that_raised_mid_measuring_leaves_the_next_its_inputs(rt: Runtime) -> None:
    """A candidate whose launch function raised on its third timed run, having written, is
    excluded, and the buffers are put back before the next: that one is checked against the
    reference from the inputs as they were (left written, it failed its check: 2.0 != 1.0)."""
    calls = itertools.count()
    raising = Kernel(SRC.replace("+= U", "+= 1.0f * U"), "inc", "Pi", defines={"U": 1})

    def go(rt: Runtime, k: Kernel, x: Any, *, stream: Any = None) -> None:
        launch(rt, k, x, stream=stream)
        if k is raising and next(calls) == 2:
            raise ValueError("refused after writing")

    three = {"ref": inc(1), "raising": raising, "good": inc(1.0)}  # each adds 1
    tunable = Tunable("raised", three, go, check="ref")
    x = rt.buffer(4)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        assert rt.tune(tunable, x) in ("ref", "good")
    a = collector.reader().autotune
    assert (a.candidates_measured, a.candidates_failed) == (2, 1)
    assert rt.read(x).tolist() == [0.0] * 4


STRICT = r"""
import json, sys, warmcli
from warmcli import Kernel, StrictMissError
from warmcli.bundle.store import Bundle

k = Kernel("void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
for word in ("1", "true", "yes", "on", "raise", "warn", "0", "false", "no", "off", ""):
    warmcli.use_bundle(None, strict=word)  # each word its ConfigError names, taken
warmcli.use_bundle(None, strict="warn")
rt = warmcli.runtime("host")
rt.launch(k, rt.buffer(4), 4)  # compiled, no bundle to keep it: warned
print(warmcli.report().pending)  # a process that writes nothing back has none pending
with Bundle.open(sys.argv[1], write=True):
    pass
warmcli.use_bundle(sys.argv[1], strict=True)
rt = warmcli.runtime("host")
for attempt in range(2):
    try:
        rt.launch(k, rt.buffer(4), 4)
    except StrictMissError:
        pass
print(json.dumps([m.name for m in warmcli.report().refused]))
import sqlite3, warmcli.bundle.file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = 0.3  # (as test_review41f's locked reads: nothing timed)
held = sqlite3.connect(sys.argv[1], isolation_level=None)
held.execute("BEGIN EXCLUSIVE")  # a writer stopped mid-write
try:
    warmcli.use_bundle(sys.argv[1], strict=True)
    print("loaded none: runs cold")
except warmcli.BundleError as exc:
    print(type(exc).__name__)
"""


def test_strict_mode_takes_its_words_warns_without_a_bundle_and_reports_what_it_refused(
    warm: Any, tmp_path: Any
) -> None:
    """A production process under strict mode: every word the `WARM_STRICT` error names is
    taken ("on" refused as no word at all), `warn` with no bundle loaded logs the compile it
    could not keep (silent, a user asking to be told was not) and counts none pending a
    write-back (one, though nothing is written back), and `report()` names the kernel
    strict mode refused, once (its list empty, the report said nothing was refused); a bundle
    another process keeps locked past the wait is raised (`BundleLocked`), not run cold."""
    proc = subprocess.run(
        [sys.executable, "-c", STRICT, str(tmp_path / "b.warm")],
        capture_output=True, text=True, env=warm.env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warm: strict: kernel inc: no-bundle: " in proc.stderr, proc.stderr
    pending, refused, locked = proc.stdout.splitlines()
    assert pending == "0"
    assert json.loads(refused) == ["inc"]
    assert locked == "BundleLocked"


FAILS_MEASURING = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void one(float *x) { x[0] = 1.0f; }", "one", "P")
calls = []


def workload(rt):
    rt.launch(K, rt.buffer(1))
    calls.append(1)
    if len(calls) == 2:  # the measuring pass, its kernel built
        raise RuntimeError("the workload failed")
"""


def test_a_run_that_failed_once_it_stored_keeps_its_new_bundle_unrecorded(
    warm: Any, tmp_path: Any
) -> None:
    """A run into a new bundle whose workload raised in the measuring pass, once its kernel
    was built: what it stored is kept, as its error line says, and no record says the run
    finished (a failed pass persisted as a finished one's recorded it: a shard's merge took
    it whole).
    `warm diff` of it and a copy whose kernel row is malformed exits 1 (0, as though both
    were sound); its kernel's binary corrupted, a later run over it drops that kernel, reached
    or not (left, every process refused it and `warm verify` failed the bundle)."""
    (tmp_path / "w.py").write_text(FAILS_MEASURING)
    bundle = tmp_path / "b.warm"
    proc = warm("run", tmp_path / "w.py", "-b", bundle, "--no-verify")
    assert proc.returncode == 2, proc.stderr
    assert f"1 kernel(s) and 0 tune(s) stored in {bundle} before it are kept" in proc.stderr
    with contextlib.closing(sqlite3.connect(bundle)) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM manifest WHERE key = 'run'").fetchone() == (0,)
        with conn:  # its kernel's binary corrupted: a run over it drops that row
            conn.execute("UPDATE blobs SET data = CAST(zeroblob(size) AS BLOB)")
    malformed = Path(shutil.copyfile(bundle, tmp_path / "malformed.warm"))
    with contextlib.closing(sqlite3.connect(malformed)) as conn, conn:
        conn.execute("UPDATE kernels SET components = 'not JSON'")
    proc = warm("diff", bundle, malformed)  # a corrupt entry: named, exit 1
    assert (proc.returncode, "corrupt" in proc.stdout) == (1, True), proc
    (tmp_path / "idle.py").write_text('DEVICE = "host"\n\ndef workload(rt):\n    pass\n')
    proc = warm("run", tmp_path / "idle.py", "-b", bundle, "--no-verify", "-q")
    assert proc.returncode == 0, proc.stderr
    with contextlib.closing(sqlite3.connect(bundle)) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (0,)
