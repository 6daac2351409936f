"""What a new user, reading only the README, hit with workloads of their own.

Through the real CLI in a subprocess, on real files: a workload that ends the process
itself (`os._exit`) leaves no `.lock` beside a bundle it never stored into, and under
`warm verify --workload` it is one line and exit 2, not a silent exit 0; an `--arch`
pre-build whose tune has a candidate that fails to compile passes its verify pass; a
candidate that fails to compile is shown by its compiler's `error:` line; an allowed
discarded read is said once, as a note, not again as a Python warning on stderr; Ctrl-C
while `warm` starts is one line, never a traceback; an unknown CUDA compiler is refused
by every command that takes `--compiler`; `warm verify --workload` takes
`--allow-discarded-reads`, as `warm run` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

EXITS_ITSELF = """\
import os
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
    os._exit(0)
"""

PLAIN = EXITS_ITSELF.replace("    os._exit(0)\n", "").replace("import os\n", "")


def test_a_first_run_ended_by_os_exit_leaves_no_lock_behind(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(EXITS_ITSELF), "-b", bundle_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert not bundle_path.exists()
    assert list(bundle_path.parent.glob("*.lock")) == []


def test_verify_replaying_a_workload_that_ends_the_process_is_an_error(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    assert warm("run", workload_file(PLAIN, "plain.py"), "-b", bundle_path).returncode == 0
    script = workload_file(EXITS_ITSELF)
    proc = warm("verify", bundle_path, "--workload", script)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == (
        "warm: error: the workload ended the process itself (exit status 0, e.g. os._exit) "
        "during Verify (Execute)\n"
    )
    proc = warm("verify", bundle_path, "--workload", script, "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["exit"] == 2 and "ended the process itself" in doc["error"]
    # The replay of a sound workload still verifies, in text and JSON.
    proc = warm("verify", bundle_path, "--workload", workload_file(PLAIN, "plain.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the bundle is complete" in proc.stdout
    doc = warm.json("verify", bundle_path, "--workload", workload_file(PLAIN, "plain.py"))
    assert doc["verified"] is True and doc["missing"] == []


FAILING_CANDIDATE_CUDA = """\
from warmcli import Kernel, Tunable

DEVICE = "cuda"
SRC = 'extern "C" __global__ void inc(float *y, int n) { if (threadIdx.x < n) y[0] += B; }'
BAD = 'extern "C" __global__ void inc(float *y, int n) { y[0] = nope; }'
INC = Tunable(
    "inc",
    {
        **{f"b{b}": Kernel(SRC, "inc", "Pi", language="cuda", defines={"B": b}) for b in (1, 2)},
        "bad": Kernel(BAD, "inc", "Pi", language="cuda"),
    },
    lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, grid=1, block=32, stream=stream),
)

def workload(rt):
    rt.tune(INC, rt.buffer(32, "float32"), 32)
"""


def test_an_arch_prebuild_with_a_candidate_that_fails_to_compile_verifies(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """The verify pass under `--arch` queued the pending tune's failed candidate again and
    named it missing, so such a pre-build could never pass (exit 1)."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    script = workload_file(FAILING_CANDIDATE_CUDA)
    run = ("run", script, "-b", bundle_path, "--arch", "sm_90", "--compiler", "nvrtc", "--no-ptx")
    proc = warm(*run, "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["missing"] == [] and doc["stored"]["tunes"] == 1
    stats = warm.json("stats", bundle_path)
    statuses = {c["name"]: c["status"] for c in stats["tunes"][0]["candidates"]}
    assert statuses == {"b1": "pending", "b2": "pending", "bad": "failed"}


SOME_FAIL = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
GOOD = "void add(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1; }"
BAD = "void add(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1 }"
T = Tunable(
    "somefail",
    {"good": Kernel(GOOD, "add", "Pi"), "bad": Kernel(BAD, "add", "Pi")},
    lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, stream=stream),
)

def workload(rt):
    rt.tune(T, rt.upload(np.ones(8, np.float32)), 8)
"""


def test_a_candidate_that_fails_to_compile_is_shown_with_the_compilers_error_line(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """gcc's log opens with `add.c: In function 'warm_<hash>_add':`: that line was the
    reason `warm stats`, the run's note and `every candidate failed` showed."""
    proc = warm("run", workload_file(SOME_FAIL), "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (note,) = [line for line in proc.stdout.splitlines() if "note: compile of" in line]
    assert "error: expected" in note and "In function" not in note, note
    shown = warm("stats", bundle_path).stdout
    (row,) = [line for line in shown.splitlines() if line.lstrip().startswith("bad ")]
    assert "failed: add.c:1:" in row and "error: expected" in row, row
    # Every candidate failing is one error naming each candidate's error line.
    every = SOME_FAIL.replace('"good": Kernel(GOOD,', '"good": Kernel(BAD + " ",')
    proc = warm("run", workload_file(every, "every.py"), "-b", bundle_path.with_name("e.warm"))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert "every candidate failed" in lines[0], proc.stderr
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["- good", "- bad"]
    assert all("error: expected" in line for line in lines[1:]), proc.stderr


def test_an_allowed_discarded_read_is_said_once_as_a_note_not_again_as_a_python_warning(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    reader = workload_file("def workload(rt):\n    b = rt.buffer(4)\n    rt.read(b)\n")
    proc = warm("run", reader, "-b", bundle_path, "--allow-discarded-reads", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "note: read of Buffer" in line]
    assert len(notes) == 2, proc.stdout  # CompileOnly and CompileAndAutotune
    assert proc.stderr == "", proc.stderr


def test_ctrl_c_at_any_point_of_a_commands_start_is_one_line_never_a_traceback(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """Ctrl-C while `warm` still imported typer (its first ~100 ms) printed Python's
    traceback of the import."""
    import itertools
    import signal
    import subprocess
    import sys
    import time

    assert warm("run", workload_file(PLAIN), "-b", bundle_path).returncode == 0
    seen: list[tuple[float, int, str]] = []
    later = iter((0.55, 0.75, 1.0, 1.4, 2.0, 3.0))  # a loaded machine starts later
    for delay in itertools.chain(
        (0.02, 0.05, 0.08, 0.12, 0.16, 0.2, 0.25, 0.3, 0.4),
        iter(lambda: next(later, None) if not any(c == 130 for _, c, _ in seen) else None, None),
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "warmcli", "stats", str(bundle_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=warm.env,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        if stderr and "warmcli/__main__.py" not in stderr and not stderr.startswith("warm: "):
            continue  # the interpreter's start (site, runpy, `import warmcli`), before `warm`'s
        seen.append((delay, proc.returncode, stderr))
        assert "Traceback" not in stderr, (delay, stderr)
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay, proc.returncode, stderr)
        if proc.returncode == 130:
            assert stderr == "warm: interrupted\n", (delay, stderr)
    assert any(code == 130 for _, code, _ in seen), seen


def test_an_unknown_cuda_compiler_is_refused_by_every_command_even_for_host_work(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`--compiler foo` (or WARM_CUDA_COMPILER=foo) was refused only where a CUDA device
    was opened: `warm run` of a host workload, `check` and `verify` took it, exit 0."""
    script = workload_file(PLAIN)
    assert warm("run", script, "-b", bundle_path).returncode == 0
    message = "warm: error: --compiler 'foo' is not a CUDA compiler: use nvrtc, nvcc or auto\n"
    for args in (
        ("run", script, "-b", bundle_path),
        ("check", bundle_path),
        ("verify", bundle_path, "--workload", script),
        ("devices",),
    ):
        proc = warm(*args, "--compiler", "foo")
        assert (proc.returncode, proc.stderr) == (2, message), (args, proc.stderr)
    proc = warm("check", bundle_path, "--compiler", "foo", "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["exit"] == 2
    warm.env["WARM_CUDA_COMPILER"] = "foo"
    proc = warm("run", script, "-b", bundle_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr == message.replace("--compiler", "WARM_CUDA_COMPILER"), proc.stderr
    del warm.env["WARM_CUDA_COMPILER"]
    assert warm("check", bundle_path, "--compiler", "nvcc").returncode == 0


READS_CUDA = """\
from warmcli import Kernel

DEVICE = "cuda"
SRC = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = 1; }'
K = Kernel(SRC, "k", "P", language="cuda")

def workload(rt):
    x = rt.buffer(32)
    rt.launch(K, x, block=32)
    return rt.read(x)
"""


def test_verify_replays_a_prebuild_that_reads_back_under_allow_discarded_reads(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`warm run --arch sm_90 --allow-discarded-reads` verified such a workload, but
    `warm verify --workload` took no `--allow-discarded-reads` and could only refuse it."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    script = workload_file(READS_CUDA)
    arch = ("--arch", "sm_90", "--compiler", "nvrtc")
    proc = warm("run", script, "-b", bundle_path, *arch, "--allow-discarded-reads", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = warm("verify", bundle_path, "-w", script, *arch)
    assert proc.returncode == 2 and "DiscardedReadError" in proc.stderr, proc.stderr
    proc = warm("verify", bundle_path, "-w", script, *arch, "--allow-discarded-reads", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: read of Buffer(sm_90" in proc.stdout and proc.stderr == ""
    assert "the bundle is complete" in proc.stdout
