"""Five small things today's reviews left (polish39).

Real parts only: the CLI in subprocesses (each `warm` command a fork of a process that
imported the CLI once, `tests/forked_cli.py`), the system cc, NVRTC for `--arch sm_90` (no
GPU), real SQLite files; driver processes that land a signal with `sys.settrace`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_leftovers39 import cuda_small  # noqa: F401  (the CUDA example warmed for sm_90, once)


def test_check_of_a_cuda_small_bundle_without_a_gpu_claims_no_pass(
    warm: Warm,
    cuda_small: Path,  # noqa: F811
) -> None:
    """`warm check cuda.warm` (only `--arch sm_90` kernels) with no GPU and no `--arch`
    said "every entry checked is servable here" (exit 0, `servable: true`), though it
    checked nothing. It says nothing could be checked here and how to check it; exit 0
    (README: entries with no device here never fail), `--json`'s `servable` null."""
    done = warm("check", cuda_small)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "servable here" not in done.stdout, done.stdout
    assert "nothing could be checked here" in done.stdout, done.stdout
    assert "(--arch sm_90 checks them)" in done.stdout, done.stdout  # its arch, since stop 54
    doc = json.loads(warm("check", cuda_small, "--json").stdout)
    assert doc["servable"] is None and doc["checked"] == {"kernels": 0, "tunes": 0}, doc
    assert doc["not_checked"] == {"cuda": {"kernels": 8, "tunes": 6}}, doc
    armed = json.loads(warm("check", cuda_small, "--arch", "sm_90", "--json").stdout)
    assert armed["servable"] is False and armed["checked"] == {"kernels": 8, "tunes": 6}


# A driver: `held_interrupts` around nothing, with one signal sent (by a trace function, at
# the first line run in warmcli/interrupted.py) while the handlers are half swapped: on the
# way in (SIGINT held, SIGTERM not yet: a SIGTERM sent) or on the way out (SIGINT back,
# SIGTERM still held: a SIGINT sent). It prints whether a KeyboardInterrupt came out of the
# block, whether every handler is back, and whether a later SIGINT still interrupts.
SWAP_DRIVER = """
import json, os, signal, sys
from warmcli.interrupted import held_interrupts

def term(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGHUP, term)
ORIGINAL = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: term,
            signal.SIGHUP: term}
phase, sent = sys.argv[1], []

def half_swapped():
    int_back = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    term_back = signal.getsignal(signal.SIGTERM) is term
    if phase == "in":
        return not int_back and term_back
    return int_back and not term_back

def tracer(frame, event, arg):
    if not frame.f_code.co_filename.endswith("interrupted.py"):
        return None
    return local

def local(frame, event, arg):
    if event == "line" and not sent and half_swapped():
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM if phase == "in" else signal.SIGINT)
    return local

raised = False
try:
    sys.settrace(tracer)
    try:
        with held_interrupts():
            pass
    finally:
        sys.settrace(None)
    for _ in range(100):  # a signal still pending is answered here
        pass
except KeyboardInterrupt:
    raised = True
back = all(signal.getsignal(s) is h for s, h in ORIGINAL.items())
later = False
try:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
        pass
except KeyboardInterrupt:
    later = True
print(json.dumps({"sent": bool(sent), "raised": raised, "back": back, "later": later}))
"""


@pytest.mark.parametrize("phase", ["in", "out"])
def test_a_signal_while_held_interrupts_swaps_its_handlers_loses_none(
    tmp_path: Path, phase: str
) -> None:
    """A SIGTERM landing between `held_interrupts`' first two `signal.signal` calls raised
    KeyboardInterrupt from its setup, outside its `try`: SIGINT stayed on its holding
    handler, and every later Ctrl-C of the process was swallowed; a SIGINT landing as it
    restored them left SIGTERM and SIGHUP held for good. The signals are blocked while the
    handlers are swapped: the one sent is answered (a KeyboardInterrupt) and every handler
    is back."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", SWAP_DRIVER, phase],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout)
    assert said == {"sent": True, "raised": True, "back": True, "later": True}, said


TAGGED = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, int n) {{ for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f + V; }}"


def launch(rt, kernel, y, n, tag, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


KS = {{f"v{{i}}": Kernel(SRC, "f", "Pi", defines={{"V": 0, "W": i}}) for i in range(2)}}
T = Tunable("big", KS, launch, key=lambda y, n, tag: tag)


def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8, '"' + "x" * ({inner}) + '"')  # JSON text of a str: tagged "str:"
"""


@pytest.mark.parametrize("over", [0, 1])
def test_a_tagged_key_str_at_the_limit_is_kept_and_one_past_it_refused_in_one_line(
    warm: Warm, workload_file, tmp_path: Path, over: int
) -> None:
    """A `key=` str that reads as JSON (`'"xx..."'`) is tagged `str:` (4 characters) in its
    tune key: one of MAX_KEY_TEXT - 4 characters is kept (the tagged text is exactly the
    limit, read back whole by verify), one character more is refused as any too-long key
    (exit 2, one line naming the limit), saying the tag made it longer than it gave."""
    from warmcli.runtime.tune_spec import MAX_KEY_TEXT

    given = MAX_KEY_TEXT - 4 + over
    bundle = tmp_path / "t.warm"
    script = workload_file(TAGGED.format(inner=given - 2))
    done = warm("run", script, "-b", bundle, "-q")
    if not over:
        assert done.returncode == 0, done.stderr[:2000]
        assert warm("verify", bundle).returncode == 0
        doc = json.loads(warm("stats", bundle, "--json").stdout)
        assert [t["status"] for t in doc["tunes"]] == ["measured"], doc["tunes"]
        return
    assert done.returncode == 2, done.stderr[:2000]
    [line] = done.stderr.strip().splitlines()
    assert len(line) < 600, line[:600]
    assert f"its tune key's text is {MAX_KEY_TEXT + 1} characters" in line, line
    assert f"a str of {given}, tagged 'str:'" in line, line
    assert f"over the {MAX_KEY_TEXT} a bundle holds" in line, line
    assert not bundle.exists() or warm("verify", bundle).returncode == 0


# A driver: `warm ARGS` run in this process (its worker forked from it), SIGINT sent once
# the first time a line holding TEXT is about to run in function FUNC of a file ending FILE.
LATE_DRIVER = """
import linecache, os, runpy, signal, sys
FILE, FUNC, TEXT = sys.argv[1:4]
sys.argv = ["warm", *sys.argv[4:]]
sent = []

def tracer(frame, event, arg):
    code = frame.f_code
    return local if code.co_name == FUNC and code.co_filename.endswith(FILE) else None

def local(frame, event, arg):
    if event == "line" and not sent:
        if TEXT in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
    return local

sys.settrace(tracer)
runpy.run_module("warmcli", run_name="__main__")
"""


def _late(
    warm: Warm, where: tuple[str, str, str], *args: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LATE_DRIVER, *where, *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(warm.env, PYTHONPATH=str(ROOT), WARM_EXAMPLE_KERNELS="5"),
        cwd=ROOT,
        timeout=300,
    )


def _held(bundle: Path) -> tuple[int, int]:
    conn = sqlite3.connect(bundle)
    try:
        count = "SELECT count(*) FROM {}"
        kernels, tunes = (conn.execute(count.format(t)).fetchone()[0] for t in ("kernels", "tunes"))
    finally:
        conn.close()
    return kernels, tunes


# Where `warm run`'s worker is just past its last store's commit, or about to end.
LATE = {
    "marked": ("runtime/persist.py", "persist", "kernels.mark_persisted("),
    "recorded": ("runtime/runtime.py", "persist", "self.tune_registrations.record("),
    "counted": ("warming/passes.py", "persist", "note_stored("),
    "returned": ("warming/passes.py", "warm_bundle", "return report"),
    "printing": ("cli/run.py", "worker", "if as_json:"),
}


@pytest.mark.parametrize("where", LATE)
def test_run_interrupted_as_its_last_store_commits_says_what_it_kept(
    warm: Warm, tmp_path: Path, where: str
) -> None:
    """SIGINT landing in `warm run` once its last store committed but before it was
    counted said "warm: interrupted: 0 kernel(s) and 0 tune(s) stored are kept" (exit 130)
    of a bundle holding them all. The commit and its count are one step (an interrupt held
    until both are done): whenever it lands, what it says is what the bundle holds."""
    bundle = tmp_path / "late.warm"
    done = _late(warm, LATE[where], "run", EXAMPLES / "many_kernels_host.py", "-b", bundle, "-q")
    assert done.returncode == 130, done.stdout[-1000:] + done.stderr[-2000:]
    kernels, tunes = _held(bundle)
    assert kernels and tunes, (kernels, tunes)
    said = f"warm: interrupted: {kernels} kernel(s) and {tunes} tune(s) stored are kept"
    assert done.stderr.strip().splitlines()[-1] == said, done.stderr[-2000:]


def _problems(warm: Warm, bundle: Path) -> list[str]:
    done = warm("verify", bundle, "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1, done.stdout[-1500:]
    return doc["integrity"]["problems"]


@pytest.mark.parametrize("where", ["head", "tail"])
def test_verify_tells_a_cubin_blobs_kind_by_its_first_bytes_and_a_corrupt_one_once(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    where: str,
) -> None:
    """`warm verify` read every CUDA blob whole (and hashed it) once more to tell its kind
    (review39): its blob-bound time about doubled (1,000 cubins of 512 KB: 0.75 s of CPU
    before, 1.7 s after). It reads each one's first bytes, and the whole blob only where
    they say it is not of its kind: a cubin blob corrupt in its header or its body is named
    once, as not matching its sha256 (never also as no cubin), and a cubin row holding PTX
    is still named as such."""
    bundle = tmp_path / "c.warm"
    bundle.write_bytes(cuda_small.read_bytes())
    cut = (  # (`||` makes text: cast back to a blob)
        "X'00000000' || substr(data, 5)"
        if where == "head"
        else "substr(data, 1, length(data) - 4) || X'DEADBEEF'"
    )
    cut = f"CAST({cut} AS BLOB)"
    with sqlite3.connect(bundle) as conn:
        [sha] = conn.execute(
            "SELECT sha256 FROM kernels WHERE arch = 'sm_90' ORDER BY sha256 LIMIT 1"
        ).fetchone()
        conn.execute(f"UPDATE blobs SET data = {cut} WHERE sha256 = ?", (sha,))
    conn.close()
    problems = _problems(warm, bundle)
    assert problems == [f"blob {sha[:16]} does not match its sha256"], problems
    with sqlite3.connect(bundle) as conn:  # every cubin row pointed at its PTX twin's blob
        conn.execute(
            "UPDATE kernels SET sha256 = (SELECT c.sha256 FROM kernels c WHERE c.arch = "
            "'compute_90' AND c.symbol = kernels.symbol) WHERE arch = 'sm_90'"
        )
    conn.close()
    problems = _problems(warm, bundle)
    wrong = [p for p in problems if "PTX, not a cubin for sm_90: its row's kind is wrong" in p]
    assert len(wrong) == 8, problems


# A driver: `warm ARGS` run in this process, each `Bundle.blob` read (in its worker too)
# appended to the file in WARM_TEST_READS as the blob's sha256, one a line.
READS_DRIVER = """
import os, runpy, sys
from warmcli.bundle.store import Bundle
read = Bundle.blob

def counted(self, sha256):
    with open(os.environ["WARM_TEST_READS"], "a") as out:
        out.write(sha256 + "\\n")
    return read(self, sha256)

Bundle.blob = counted
sys.argv = ["warm", *sys.argv[1:]]
runpy.run_module("warmcli", run_name="__main__")
"""


def test_a_rewarm_reads_a_shared_cubin_blob_once_per_pass_not_once_per_kernel(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
) -> None:
    """Re-warming an `--arch sm_90` bundle read each cubin row's blob whole (and hashed it)
    to tell whether it is a cubin of its SM (review39), once per kernel: a batch's blob,
    shared by its kernels, was read once for each (2,000 kernels: 0.92 s of CPU before,
    1.23 s after). Its verdict is kept per (blob, arch): each blob is read once by the
    warming passes and once by the verify pass's fresh runtimes."""
    bundle, reads = tmp_path / "again.warm", tmp_path / "reads.txt"
    bundle.write_bytes(cuda_small.read_bytes())
    args = ["run", str(EXAMPLES / "saxpy_cuda.py"), "--arch", "sm_90", "-b", str(bundle), "-q"]
    done = subprocess.run(
        [sys.executable, "-c", READS_DRIVER, *args],
        capture_output=True,
        text=True,
        env=dict(warm.env, PYTHONPATH=str(ROOT), WARM_TEST_READS=str(reads)),
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    assert "the bundle is complete" in done.stdout, done.stdout
    with sqlite3.connect(bundle) as conn:
        cubins = {r[0] for r in conn.execute("SELECT sha256 FROM kernels WHERE arch = 'sm_90'")}
    conn.close()
    counts = {sha: 0 for sha in cubins}
    for line in reads.read_text().split():
        if line in counts:
            counts[line] += 1
    assert len(cubins) >= 1 and all(n <= 2 for n in counts.values()), counts
