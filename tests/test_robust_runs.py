"""`warm run` survives what a workload and its compilers do: crashes, hangs, signals.

Through the real CLI in a subprocess: a tune candidate that segfaults or aborts is
excluded and the run finishes; a workload that crashes outside tuning is one line
and exit 2 with the bundle unchanged; SIGINT or SIGTERM mid compile batch (a
stand-in compiler that hangs, with a child of its own) stops every compiler within
a second and exits 130 keeping what was stored; a SIGKILLed warm leaves no compiler;
a hanging kernel costs about two compile timeouts; `--jobs` is capped per CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_reliability import alive, compiler_wrapper

from warmcli.backends.batch import JOBS_PER_CPU, capped_jobs, default_jobs

CRASHING = """\
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = '''
#include <stdlib.h>
void scale(float *x, int n) {
#if MODE == 1
    *(volatile int *)0 = 1;
#elif MODE == 2
    abort();
#endif
    for (int i = 0; i < n; i++) x[i] *= 2.0f;
}'''
SCALE = Tunable(
    "scale",
    {name: Kernel(SRC, "scale", "Pi", defines={"MODE": mode})
     for name, mode in (("segv", 1), ("fine", 0), ("aborts", 2))},
    lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream),
)

def workload(rt):
    x = rt.buffer(16)
    rt.tune(SCALE, x, 16)
"""


def test_a_crashing_candidate_is_excluded_and_the_run_finishes(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(CRASHING), "--bundle", bundle_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "candidate segv crashed (SIGSEGV); it is excluded" in proc.stderr
    assert "candidate aborts crashed (SIGABRT); it is excluded" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["stored"]["tunes"] == 1
    tuning = doc["passes"][1]
    assert tuning["autotune"]["candidates_failed"] == 2
    assert any("candidate segv crashed (SIGSEGV)" in n for n in tuning["notes"])
    [tune] = warm.json("stats", bundle_path)["tunes"]
    assert tune["pick"] == "fine"
    reasons = {c["name"]: (c["status"], c["reason"]) for c in tune["candidates"]}
    assert reasons["segv"] == ("failed", "crashed (SIGSEGV)")
    assert reasons["aborts"] == ("failed", "crashed (SIGABRT)")


CRASHES_ITSELF = """\
import ctypes

DEVICE = "host"

def workload(rt):
    ctypes.string_at(0)
"""


def test_a_workload_crashing_outside_tuning_is_one_line_and_leaves_the_bundle(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(CRASHES_ITSELF, "crashes.py")
    proc = warm("run", path, "--bundle", bundle_path, "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {
        "error": f"the workload crashed (SIGSEGV) during CompileOnly: nothing was stored in "
        f"{bundle_path}",
        "exit": 2,
    }
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not bundle_path.exists()
    assert warm("run", workload_file(CRASHING), "--bundle", bundle_path).returncode == 0
    before = hashlib.sha256(bundle_path.read_bytes()).hexdigest()
    assert warm("run", path, "--bundle", bundle_path).returncode == 2
    assert hashlib.sha256(bundle_path.read_bytes()).hexdigest() == before


HANGS = """\
from warmcli import Kernel

DEVICE = "host"
HANG = Kernel("/* WARM_TEST_HANG */ void hang(float *x) { }", "hang", "P")
KS = [Kernel(f"void k{i}(float *x) {{ x[0] += {i}.0f; }}", f"k{i}", "P") for i in range(8)]

def workload(rt):
    x = rt.buffer(4)
    for k in KS:
        rt.launch(k, x)
    if HANGING:
        rt.launch(HANG, x)
"""


def _hanging_compiler(warm: Warm, tmp_path: Path) -> Path:
    """A stand-in `WARM_CC` that hangs (and starts a child that hangs) on a marked source;
    the pids of both land in the returned file."""
    pids = tmp_path / "hung-pids"
    warm.env["WARM_CC"] = str(
        compiler_wrapper(
            tmp_path,
            f'if grep -q WARM_TEST_HANG "$src"; then sleep 300 & echo $$ $! >> {pids}; wait; fi',
        )
    )
    return pids


def _start(warm: Warm, *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "warmcli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=warm.env,
        cwd=ROOT,
    )


def _wait_for(path: Path, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, "the compiler never started"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_mid_batch_stops_every_compiler_and_keeps_what_is_stored(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path, signum: int
) -> None:
    path = workload_file(HANGS.replace("if HANGING", "if False"), "fine.py")
    assert warm("run", path, "--bundle", bundle_path).returncode == 0
    pids_file = _hanging_compiler(warm, tmp_path)
    path.write_text(HANGS.replace("KS = [", "KS = [HANG] + [").replace("if HANGING", "if 0"))
    proc = _start(warm, "run", path, "--bundle", bundle_path, "--jobs", "1", "--json")
    compilers = _wait_for(pids_file)
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 1.5, "warm did not stop within a second (and a margin)"
    assert proc.returncode == 130, err
    assert err.strip() == "warm: interrupted: 0 kernel(s) and 0 tune(s) stored are kept"
    assert json.loads(out)["exit"] == 130
    assert not [p for p in compilers if alive(p)], "a compiler outlived warm"
    assert len(warm.json("stats", bundle_path)["kernels"]) == 8, "what was stored is kept"
    assert not Path(f"{bundle_path}-journal").exists()


def test_a_sigkilled_warm_leaves_no_compiler(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    pids_file = _hanging_compiler(warm, tmp_path)
    path = workload_file(HANGS.replace("HANGING", "True"), "hangs.py")
    proc = _start(warm, "run", path, "--bundle", bundle_path, "--jobs", "1")
    compilers = _wait_for(pids_file)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while [p for p in compilers if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in compilers if alive(p)], "a compiler outlived a killed warm"


def test_a_hanging_kernel_costs_about_two_timeouts(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    _hanging_compiler(warm, tmp_path)
    tuned = HANGS.replace("if HANGING:", "rt.tune(OP, x, 4)\n    if False:") + (
        "\nfrom warmcli import Tunable\n"
        'OP = Tunable("op", {"fine": KS[0], "hangs": HANG}, '
        "lambda rt, k, x, n, stream=None: rt.launch(k, x, stream=stream))\n"
    )
    timeout = 3.0
    doc = warm.json(
        "run", workload_file(tuned), "-b", bundle_path, "-j", "2", "--compile-timeout", timeout
    )
    batch = doc["passes"][1]["compilation"]
    assert batch["compiled"] == 8 and batch["failed"] == 1
    # A group timed out, then each of its kernels alone, at once: about two timeouts.
    # Bisecting waited a timeout per level (9 kernels in 2 groups: 3 or 4 timeouts).
    assert batch["seconds"] < 2 * timeout + 2, batch


def test_jobs_are_capped_per_cpu(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    assert capped_jobs(10_000) == JOBS_PER_CPU * default_jobs()  # pure logic
    assert capped_jobs(None) == default_jobs() and capped_jobs(1) == 1
    live, counts = tmp_path / "live", tmp_path / "counts"
    live.mkdir()
    warm.env["WARM_CC"] = str(
        compiler_wrapper(
            tmp_path,
            f"touch {live}/$$; ls {live} | wc -l >> {counts}; sleep 0.5",
            f"rm -f {live}/$$",
        )
    )
    many = "\n".join(
        [
            "from warmcli import Kernel",
            'DEVICE = "host"',
            "def workload(rt):",
            "    x = rt.buffer(4)",
        ]
        + [f'    rt.launch(Kernel("void k{i}(float *x) {{ }}", "k{i}", "P"), x)' for i in range(12)]
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warmcli",
            "run",
            workload_file(many),
            "-b",
            bundle_path,
            "-j",
            "10000",
        ],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=ROOT,
        timeout=120,
        preexec_fn=lambda: os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}),
    )
    assert proc.returncode == 0, proc.stderr
    seen = [int(n) for n in counts.read_text().split()]
    assert max(seen) <= JOBS_PER_CPU, seen  # one CPU: at most JOBS_PER_CPU compilers at once
