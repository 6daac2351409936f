"""Two user-facing leftovers, fixed.

A compiler's huge log: a failing C compiler (WARM_CC) that prints 200,000 lines made `warm run`
hold all of it, take its time escaping it and print every line (a million lines took 123 s, 40
CPU-s, and printed 20 MB). What warm keeps of a compiler's output is now its first 32 KiB and
last 8 KiB with a line saying how much was left out (`warmcli.backends.kept_output`), read to
the end without being held: the real CLI prints one bounded error holding the compiler's first
errors and its last line; `processes.run` of a child printing 64 MB stays flat in memory (a
fresh Python, its peak measured); NVRTC's log of 3,000 warnings (342 kB) is bounded alike; the
bound itself, line by line.

A read-only bundle that holds all a run reaches: `warm run` failed on it (`cannot write the
bundle (attempt to write a readonly database)`, exit 2) though it had nothing to store, only
the times of use of what it served to stamp (a CI job checking a bundle restored from a
read-only cache). It now exits 0 saying it stored nothing and why, the file and its folder
untouched (a read-only file; a read-only folder without the `.lock`, `--json`); where a
kernel must be stored it fails as before, writing nothing. Run as root without the
capabilities that ignore file modes (`setpriv`), where the tests run as root.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from fake_cc import with_cc
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_trial41b import _as_another_user

from warmcli.backends.kept_output import HEAD_BYTES, TAIL_BYTES, Kept, kept_text

WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"


def workload(rt):
    x = rt.buffer(4)
    for i in range(3):
        rt.launch(Kernel("void f(float *x, int n) { }", "f", "Pi", defines={"ID": i}), x, 4)
"""
LOUD = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "cc (loud) 1.0"; exit 0; fi
echo 'h.c:1: error: the first error' >&2
yes 'h.c:2: error: again' | head -n 200000 >&2
echo 'h.c:3: error: the last line' >&2
exit 1
"""


def test_a_compiler_printing_200000_lines_is_one_bounded_error_with_its_first_errors(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    proc = with_cc(warm, tmp_path, "loudcc", LOUD)(
        "run", workload_file(WORKLOAD), "-b", bundle_path
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = proc.stderr
    assert len(err.encode()) < 4 * (HEAD_BYTES + TAIL_BYTES), len(err)  # was 4 MB
    assert "Traceback" not in err and err.count("warm: error:") == 1, err[:2000]
    assert "h.c:1: error: the first error" in err and "h.c:3: error: the last line" in err
    assert "lines" in err and "of this output here" in err, err[-3000:]
    assert not bundle_path.exists() or "f" not in warm("ls", bundle_path).stdout


def test_a_child_printing_64_mb_is_read_to_its_end_in_flat_memory() -> None:
    code = (
        "import resource\n"
        "from warmcli.backends import processes\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "done = processes.run(['sh', '-c', 'echo first; head -c 67108864 /dev/zero; echo; "
        "echo last >&2; exit 3'], 60)\n"
        "grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print(done.returncode, done.timed_out, grown, len(done.out), done.err.strip())\n"
        "print(done.out[:6] == 'first\\n', 'warm left out 67,067,911 bytes' in done.out)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    status, timed_out, grown, length, err = first.split()
    assert (status, timed_out, err) == ("3", "False", "last"), first
    assert int(grown) < 32 << 10, f"peak grew {grown} kB reading 64 MB"  # held whole: 128 MB+
    assert int(length) <= HEAD_BYTES + TAIL_BYTES + 100, length
    assert second == "True True", (
        proc.stdout
    )  # (64 MB + 7 bytes: 32 and 8 kB of them kept, no line break near a cut)


def test_the_bound_keeps_whole_lines_and_counts_those_left_out() -> None:
    lines = [f"line {i}: {'x' * (i % 50)}\n".encode() for i in range(20_000)]
    data = b"".join(lines)
    small = Kept()
    small.add(b"a\r\nb\rc\xff")
    assert small.text() == "a\nb\nc\ufffd"  # as text mode reads a pipe, nothing left out
    kept = Kept()
    for start in range(0, len(data), 4093):  # read in pieces that cut lines
        kept.add(data[start : start + 4093])
    text = kept.text()
    head, marker, tail = text.partition("\n[... warm left out ")
    assert marker and tail, text[-500:]
    said, _, tail = tail.partition(" of this output here ...]\n")
    left = len(data) - len(head) - len(tail)
    assert said == f"{20_000 - head.count(chr(10)) - tail.count(chr(10)):,} lines, {left:,} bytes"
    assert data.startswith(head.encode()) and data.endswith(tail.encode())
    assert head.endswith("\n") and tail.startswith("line "), (head[-80:], tail[:80])
    assert HEAD_BYTES - 100 < len(head) <= HEAD_BYTES and TAIL_BYTES - 100 < len(tail) <= TAIL_BYTES
    assert kept_text(data.decode()) == text  # a log read whole (NVRTC's), bounded alike
    assert kept_text("short\nlog") == "short\nlog"


def test_nvrtcs_log_of_3000_warnings_is_bounded_with_its_first_and_last() -> None:
    from warmcli.backends.cuda.nvrtc import _nvrtc, _Program, find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    body = "".join(f"  int unused{i};\n" for i in range(3000))
    program = _Program(_nvrtc(), f'extern "C" __global__ void k() {{\n{body}}}\n', "k.cu")
    try:
        ok, log = program.compile(["--gpu-architecture=compute_75"])
    finally:
        program.close()
    assert ok and len(log.encode()) <= HEAD_BYTES + TAIL_BYTES + 100, len(log)  # was 342 kB
    assert log.startswith("k.cu(2): warning") and '"unused0"' in log, log[:200]
    assert '"unused2999"' in log and "of this output here" in log, log[-400:]


SOME = """
import os
from warmcli import Kernel

DEVICE = "host"
K = [Kernel("void f(float *x, int n) { x[0] = ID; }", "f", "Pi", defines={"ID": i}) for i in (1, 2)]


def workload(rt):
    x = rt.buffer(4)
    for kernel in K[: int(os.environ.get("SOME", "1"))]:
        rt.launch(kernel, x, 4)
"""


def test_a_read_only_bundle_holding_all_a_run_reaches_is_run_over_and_left_as_it_was(
    warm: Warm, tmp_path: Path
) -> None:
    workload = tmp_path / "some.py"
    workload.write_text(SOME)
    folder = tmp_path / "cache"
    folder.mkdir()
    bundle = folder / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    before = bundle.read_bytes()
    (folder / "b.warm.lock").unlink()  # a cache keeps the bundle only

    def run(*args: str, some: str = "1") -> subprocess.CompletedProcess[str]:
        command = [*_as_another_user(), sys.executable, "-m", "warmcli", "run", str(workload)]
        env = dict(warm.env, SOME=some)
        return subprocess.run(
            [*command, "-b", str(bundle), *args], capture_output=True, text=True, env=env
        )

    folder.chmod(0o555)  # the bundle writable, its folder not (no journal, no lock made)
    try:
        done = run("--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["stored"] == {"kernels": 0, "tunes": 0} and report["verified"] is True
        assert "cannot create the write lock" in report["read_only"], report["read_only"]
        done = run("-q", some="2")  # one kernel more: it must be stored, and cannot be
        assert done.returncode == 2, done.stdout + done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith("warm: error: ") and "not writable" in line, line
    finally:
        folder.chmod(0o755)
    assert bundle.read_bytes() == before and [p.name for p in folder.iterdir()] == ["b.warm"]
    bundle.chmod(0o444)  # the file read-only, its folder writable
    done = run("-q")
    assert done.returncode == 0, done.stderr
    assert "stored 0 new kernel(s) and 0 new tune(s) (it is read-only here" in done.stdout
    assert "the bundle is complete" in done.stdout and not done.stderr, done.stdout
    workload.write_text(SOME + "# another workload: its run recorded by none (not written)\n")
    done = run("-q")
    assert done.returncode == 0 and "(it is read-only here" in done.stdout, done.stderr
    assert bundle.read_bytes() == before
