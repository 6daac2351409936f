"""What warm reports is true: `warm stats` (tables and `--json`), `warm run --json`'s and
`warm verify`'s counts and `WARM_REPORT`'s lines, each checked against what really happened,
counted apart from warm (a `cc` wrapper on PATH that logs each kernel it is handed, the
rows another process committed), with the real CLI in subprocesses, real cc and real files;
`TWO`'s bundle warmed once for the module and copied by each test that starts from it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from tests.conftest import ROOT, Warm
from tests.forked_cli import ForkedWarm, Servers

# One tunable of two candidates: the source bundle the concurrent writer copies from.
TWO = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)
T = Tunable("op", {"a": Kernel(SRC, "k", "Pi", defines={"STEP": 1}),
                   "b": Kernel(SRC, "k", "Pi", defines={"STEP": 2})}, launch, warmup=0, repeats=1)
def workload(rt):
    rt.tune(T, rt.upload(np.zeros(4, dtype=np.float32)), 4)
"""


@pytest.fixture(scope="module")
def two_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> Path:
    """`TWO` warmed once for the module (`warm run two.py -b two.warm -q`, forked, in a
    home of its own): the bundle a test copies where it warmed `TWO` itself."""
    base = tmp_path_factory.mktemp("two")
    (base / "two.py").write_text(TWO)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    done = warm("run", base / "two.py", "-b", base / "two.warm", "-q")
    assert done.returncode == 0, done.stderr
    return base / "two.warm"


# Another process writing the bundle as a production write-back does (`Bundle.put`: two
# kernels and the tune that picks between them, in one transaction), one tune after
# another, the tunes FIRST to LAST (or until it is killed); `ready` is made after the first.
WRITER = """
import dataclasses, hashlib, sys
from warmcli.bundle.store import Bundle
from warmcli.records import tune_key
src, dst, ready, first, last = sys.argv[1:6]
with Bundle.open(src) as s:
    (t0,) = s.tunes()
    kernels = {k.key: (k, s.blob(k.sha256)) for k in s.kernels()}
out = Bundle.open(dst, write=True)
for i in range(int(first), int(last) + 1):
    news, cands = [], []
    for c in t0.candidates:
        k, blob = kernels[c.kernel_key]
        key = k.key[:16] + hashlib.sha256(f"{k.key}{i}".encode()).hexdigest()[:48]  # (symbol's)
        # a made-up key: no content hash its key would be recomputed from (integrity35)
        parts = {n: v for n, v in k.components.items() if n != "kernel"}
        news.append((dataclasses.replace(k, key=key, components=parts), blob))
        cands.append(dataclasses.replace(c, kernel_key=key))
    shape = f"float32[{i}] {i}"
    key = tune_key(t0.operation, shape, t0.device, t0.checksum)
    out.put(news, [dataclasses.replace(t0, shape_key=shape, candidates=tuple(cands), key=key)])
    if i == int(first):
        open(ready, "w").close()
out.close()
"""


def _consistent(doc: dict[str, Any]) -> list[str]:
    """What in one `warm stats --json` document no single state of the bundle could hold
    (every state the writer leaves has two kernels per tune, each named by its tune)."""
    keys = {k["key"] for k in doc["kernels"]}
    named = {k["key"] for k in doc["kernels"] if k["candidates"]}
    used = [c["kernel"] for t in doc["tunes"] for c in t["candidates"]]
    wrong = [f"tune names kernel {k[:8]}, not listed" for k in used if k not in keys]
    wrong += [f"kernel {k[:8]} listed without its tune" for k in keys if k not in named]
    if len(keys) != 2 * len(doc["tunes"]):
        wrong.append(f"{len(keys)} kernels for {len(doc['tunes'])} tunes")
    return wrong


def test_stats_of_a_bundle_another_process_writes_is_one_state(
    warm: Warm, tmp_path: Path, two_once: Path
) -> None:
    src, dst, ready = tmp_path / "src.warm", tmp_path / "dst.warm", tmp_path / "ready"
    shutil.copyfile(two_once, src)  # TWO's bundle
    env = dict(warm.env, PYTHONPATH=str(ROOT))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, src, dst, ready, "1", "2000"], env=env)
    try:
        while not ready.exists():
            assert writer.poll() is None, "the writer ended before its first tune"
            time.sleep(0.02)
        seen = []
        for _ in range(3):
            got = warm("stats", dst, "--json")
            assert got.returncode == 0, got.stderr
            doc = json.loads(got.stdout)
            seen.append((len(doc["tunes"]), _consistent(doc)))
    finally:
        writer.kill()
        writer.wait()
    assert all(not wrong for _, wrong in seen), seen
    assert len({n for n, _ in seen}) > 1 or seen[0][0] >= 2000  # it was written meanwhile


# A CUDA tunable reached on two shapes, the second twice: pre-built without a GPU.
REACHED_TWICE = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = 'extern "C" __global__ void k(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] += S; }'
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, grid=1, block=32, stream=stream)
T = Tunable("op", {"a": Kernel(SRC, "k", "Pi", language="cuda", defines={"S": 1}),
                   "b": Kernel(SRC, "k", "Pi", language="cuda", defines={"S": 2})}, launch)
def workload(rt):
    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.tune(T, x, 4)
    for _ in range(REACHES):
        rt.tune(T, x, 5)
"""


def test_compile_only_verify_counts_a_tune_reached_twice_once(
    warm: Warm, tmp_path: Path, workload_file: Any
) -> None:
    """`warm verify --arch` names each tune the bundle lacks once, and says how many there
    are: one tune reached twice is one tune missing, as its one miss line says."""
    from tests.conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    bundle = tmp_path / "b.warm"
    first = workload_file(REACHED_TWICE.replace("REACHES", "0"), "first.py")
    done = warm("run", first, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    both = workload_file(REACHED_TWICE.replace("REACHES", "2"), "both.py")
    got = warm("verify", bundle, "--workload", both, "--arch", "sm_90", "--json")
    assert got.returncode == 1, got.stderr
    doc = json.loads(got.stdout)
    assert [e["label"] for e in doc["explanations"]] == ["op float32[4] 5"]
    assert doc["missing"] == ["sm_90: 1 tune(s) reached, not recorded in the bundle"]
    assert doc["autotune"]["unrecorded"] == 1


# A tunable whose every candidate fails (its launch function raises), tuned in a thread
# the workload outlives: no pick is ever stored, so production measures it on every start.
FAILS_IN_A_THREAD = """
import threading
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += S; }"
def launch(rt, k, x, n, *, stream=None):
    raise RuntimeError("no launch today")
T = Tunable("op", {"a": Kernel(SRC, "k", "Pi", defines={"S": 1}),
                   "b": Kernel(SRC, "k", "Pi", defines={"S": 2})}, launch)
def workload(rt):
    x = rt.upload(np.zeros(4, dtype=np.float32))
    t = threading.Thread(target=lambda: rt.tune(T, x, 4))
    t.start()
    t.join()
"""


def test_verify_never_calls_complete_a_bundle_missing_a_failed_tune(
    warm: Warm, tmp_path: Path, workload_file: Any
) -> None:
    """The verify pass met a tune the bundle lacks (its miss explained) and failed to
    measure it: the bundle is not complete (strict production refuses that tune), and the
    miss is named on the output, as a kernel that failed to compile in a thread is."""
    bundle, workload = tmp_path / "b.warm", workload_file(FAILS_IN_A_THREAD)
    run = warm("run", workload, "-b", bundle, "--json")
    doc = json.loads(run.stdout)
    assert [e["label"] for e in doc["explanations"]] == ["op float32[4] 4"]
    assert run.returncode == 1 and doc["verified"] is False, doc["missing"]
    assert doc["missing"] == ["host: 1 tune(s) failed (every candidate), not in the bundle"]
    got = warm("verify", bundle, "--workload", workload, "-q")
    assert got.returncode == 1, got.stdout
    assert "the bundle is complete" not in got.stdout
    assert "miss: tune op float32[4] 4: absent" in got.stdout, got.stdout


# Served from a bundle holding the tune's kernels but not the tune: every candidate fails.
SERVE_FAILING_TUNE = """
import runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
x = rt.upload(module["np"].zeros(4, dtype=module["np"].float32))
try:
    rt.tune(module["T"], x, 4)
except warmcli.errors.TuneFailure:
    pass
"""


def test_report_never_says_served_everything_after_a_tune_it_lacked(
    warm: Warm, tmp_path: Path, workload_file: Any
) -> None:
    """WARM_REPORT: a tune the bundle lacked was measured (every candidate failed, the
    process went on): the bundle did not serve everything, and the report names the tune."""
    bundle, workload = tmp_path / "b.warm", workload_file(FAILS_IN_A_THREAD)
    warm("run", workload, "-b", bundle, "--no-verify", "-q")
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_REPORT="1")
    got = subprocess.run(
        [sys.executable, "-c", SERVE_FAILING_TUNE, workload],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "served everything" not in got.stderr, got.stderr
    assert "lacked 0 kernel(s) and 1 tune(s)" in got.stderr, got.stderr
    assert "tune op float32[4] 4 (every candidate failed: nothing stored)" in got.stderr


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("for (int i = 0; i < n; i++) x[i] += 1; ", "a brace, comment or string left open"),
        ("syntax error here }", "unknown type name"),
    ],
)
def test_a_broken_kernel_is_not_called_a_letters_mismatch(
    warm: Warm, tmp_path: Path, workload_file: Any, body: str, said: str
) -> None:
    """A kernel whose source is broken (cut short, a syntax error) fails to compile; its
    letters match its declaration, so warm must not say they do not, neither when it is
    launched nor in the reason `warm stats` shows for a tune's candidate."""
    source = f"""
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
K = Kernel("void k(float *x, int n) {{ {body}", "k", "Pi")
GOOD = Kernel("void k(float *x, int n) {{ x[0] = n; }}", "k", "Pi")
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)
T = Tunable("op", {{"broken": K, "good": GOOD}}, launch)
def workload(rt):
    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.tune(T, x, 4)
    if LAUNCH:
        rt.launch(K, x, 4)
"""
    bundle = tmp_path / "b.warm"
    launched = warm("run", workload_file(source.replace("LAUNCH", "True")), "-b", bundle, "--json")
    assert launched.returncode == 2, launched.stdout
    doc = json.loads(launched.stdout)
    text = doc["error"] + "\n" + doc.get("detail", "")
    assert "do not match" not in text and said in text, text
    tuned = warm("run", workload_file(source.replace("LAUNCH", "False")), "-b", bundle, "-q")
    assert tuned.returncode == 0, tuned.stderr
    (tune,) = warm.json("stats", bundle)["tunes"]
    reason = {c["name"]: c["reason"] for c in tune["candidates"]}["broken"]
    assert "do not match" not in reason and said in reason, reason


def test_check_fails_a_tune_whose_pick_kernel_clean_removed(
    warm: Warm, tmp_path: Path, workload_file: Any, two_once: Path
) -> None:
    """`warm clean` removed a corrupt kernel that a tune picks (the tune kept): production
    hits the tune, then compiles its pick. `warm check` must not call every entry servable."""
    import sqlite3

    bundle = shutil.copyfile(two_once, tmp_path / "b.warm")  # TWO's bundle
    (tune,) = warm.json("stats", bundle)["tunes"]
    with sqlite3.connect(bundle) as conn:  # the pick's binary rots on disk
        (sha,) = conn.execute("SELECT sha256 FROM kernels WHERE key = ?", (tune["pick_kernel"],))
        conn.execute("UPDATE blobs SET data = zeroblob(length(data)) WHERE sha256 = ?", sha)
    conn.close()
    assert warm("clean", bundle).returncode == 0
    assert tune["pick_kernel"] not in {k["key"] for k in warm.json("stats", bundle)["kernels"]}
    serve = "import runpy, sys, warmcli\nrunpy.run_path(sys.argv[1])['workload'](warmcli.runtime())"
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_REPORT="1")
    served = subprocess.run(
        [sys.executable, "-c", serve, workload_file(TWO)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert "lacked 1 kernel(s) and 0 tune(s)" in served.stderr, served.stderr  # what happens
    got = warm("check", bundle, "--json")
    assert got.returncode == 1, got.stdout
    doc = json.loads(got.stdout)
    assert not doc["servable"] and doc["unservable_count"] == 1, doc
    (why,) = doc["unservable"]
    assert why["kind"] == "tune" and why["reason"] == "absent", why
    assert tune["pick_kernel"][:16] in why["detail"], why


def test_stats_of_a_small_bundle_holds_no_writer_while_its_reader_waits(
    warm: Warm, tmp_path: Path, two_once: Path
) -> None:
    """Its snapshot ends once all is read: a `warm stats --json | less` left open never
    keeps a production write-back (or `warm run`) from committing."""
    src, dst, ready = tmp_path / "src.warm", tmp_path / "dst.warm", tmp_path / "ready"
    shutil.copyfile(two_once, src)  # TWO's bundle
    env = dict(warm.env, PYTHONPATH=str(ROOT))

    def write(first: int, last: int) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-c", WRITER, src, dst, ready, str(first), str(last)]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)

    assert write(1, 150).returncode == 0  # its --json is far more than a pipe holds
    stats = warm.popen("stats", dst, "--json", stderr=subprocess.DEVNULL, text=False)
    try:
        assert stats.stdout is not None and stats.stdout.readline() == b"{\n"  # then unread
        wrote = write(151, 151)
        assert wrote.returncode == 0, wrote.stderr
    finally:
        stats.kill()
        stats.wait()
        assert stats.stdout is not None
        stats.stdout.close()
    assert len(warm.json("stats", dst)["tunes"]) == 151


# A kernel the bundle lacks, launched where no C compiler is: the launch fails (caught).
SERVE_WITHOUT_CC = """
import runpy, sys
import numpy as np
import warmcli
from warmcli import Kernel
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime())  # served by the bundle
NEW = Kernel("void k(float *x, int n) { x[0] = n; }", "k", "Pi", defines={"NEW": 1})
try:
    warmcli.runtime().launch(NEW, warmcli.runtime().upload(np.zeros(4, np.float32)), 4)
except warmcli.errors.ToolchainError as exc:
    print("launch failed:", exc, file=sys.stderr)
"""


def test_report_names_a_kernel_it_lacked_where_no_compiler_is(
    warm: Warm, tmp_path: Path, workload_file: Any, two_once: Path
) -> None:
    """A serving machine with no compiler: the bundle serves what it holds; a kernel it
    lacks cannot be built, and the report says so, never that it served everything."""
    bundle, workload = shutil.copyfile(two_once, tmp_path / "b.warm"), workload_file(TWO)
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_REPORT="1", WARM_CC=str(tmp_path / "no"))
    got = subprocess.run(
        [sys.executable, "-c", SERVE_WITHOUT_CC, workload],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0 and "launch failed: cc: compiler" in got.stderr, got.stderr
    assert "served everything" not in got.stderr, got.stderr
    assert "lacked 1 kernel(s) and 0 tune(s)" in got.stderr, got.stderr
    assert "kernel k[NEW=1] (no compiler here: nothing compiled)" in got.stderr, got.stderr
