"""What the CLI shows, read as a script or a CI log reads it: the real CLI, each command a
process of its own forked from one that imported the CLI once (`tests/forked_cli.py`: stdout
a file, not a terminal), on a real bundle built once by `warm run`; one test runs `warm run`
under a pseudo-terminal for the progress bars, and one writes into a pipe its reader closed
(both started as `python -m warmcli`).
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import ForkedWarm, Servers

# Candidates that differ only by a number (BLOCK=128 / 1024) or only by options, two shapes
# whose text sorts the wrong way (200x200 before 64x64), a kernel whose label is long.
NAMED = r"""
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= BLOCK; }"

def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)

OP = Tunable("scale", {
    "b1024": Kernel(SRC, "scale", "Pi", defines={"BLOCK": 1024}),
    "b128": Kernel(SRC, "scale", "Pi", defines={"BLOCK": 128}),
    "b128_o1": Kernel(SRC, "scale", "Pi", defines={"BLOCK": 128}, options=("-O1",)),
}, launch, repeats=1)
LONG = Kernel(SRC, "scale", "Pi",
              defines={"BLOCK": 1, **{f"A_LONG_DEFINE_{i}": i for i in range(9)}})

def workload(rt):
    for m in (200, 64):
        rt.tune(OP, rt.buffer((m, m)), m)
    rt.launch(LONG, rt.buffer(4), 4)
"""

SLOW_TUNE = r"""
import time
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void nop(float *x, int n) { x[0] = n * F; }"

def launch(rt, kernel, x, n, *, stream=None):
    time.sleep(0.05)
    rt.launch(kernel, x, n, stream=stream)

OP = Tunable("slow", {f"f{f}": Kernel(SRC, "nop", "Pi", defines={"F": f}) for f in (1, 2, 3)},
             launch, repeats=3)

def workload(rt):
    rt.tune(OP, rt.buffer(8), 8)
"""


@pytest.fixture(scope="module")
def piped(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> ForkedWarm:
    """The CLI with stdout no terminal and no COLUMNS: nothing may wrap (commands forked)."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_") and k != "COLUMNS"}
    env["WARM_HOME"] = str(home)
    return ForkedWarm(Warm(env), forking_servers)


@pytest.fixture(scope="module")
def named(piped: ForkedWarm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("named")
    (base / "named.py").write_text(NAMED)
    path = base / "named.warm"
    proc = piped("run", base / "named.py", "--bundle", path, "--verbose", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    (base / "run.txt").write_text(proc.stdout)
    return path


def rows(text: str) -> list[str]:
    return text.splitlines()


def test_piped_output_has_one_line_per_row_and_no_padding(piped: ForkedWarm, named: Path) -> None:
    run_text = (named.parent / "run.txt").read_text()
    stats = piped("stats", named).stdout
    for text in (run_text, stats):
        assert all(line == line.rstrip() for line in rows(text)), "trailing spaces"
    long_label = "scale[A_LONG_DEFINE_0=0,A_LONG_DEFINE_1=1,"
    assert any(long_label in line and "A_LONG_DEFINE_8=8,BLOCK=1]" in line for line in rows(stats))
    commands = [line for line in rows(run_text) if line.lstrip().startswith("$ ")]
    sources = [[w for w in c.split() if w.endswith(".c")] for c in commands]  # (batch.c, f.c)
    assert commands and all(" -o " in c for c in commands) and all(sources)
    lines = rows(stats)
    for i, line in enumerate(lines):  # a table's rule is as wide as its header
        if line.strip() and set(line.strip()) == {"─"}:
            assert len(line.rstrip()) >= len(lines[i - 1].rstrip())
    shown = piped.with_env(COLUMNS="60")("stats", named).stdout
    assert max(len(line) for line in rows(shown)) <= 60  # COLUMNS, when set, is honoured


def test_numbers_sort_as_numbers(piped: ForkedWarm, named: Path) -> None:
    doc = piped.json("stats", named)
    shapes = [t["shape"] for t in doc["tunes"]]
    assert shapes[0].startswith("float32[64x64]") and shapes[1].startswith("float32[200x200]")
    labels = [k["label"] for k in doc["kernels"]]
    assert labels.index("scale[BLOCK=128]") < labels.index("scale[BLOCK=1024]")
    text = piped("stats", named).stdout
    assert text.index("[64x64]") < text.index("[200x200]")
    assert text.index("scale[BLOCK=128]") < text.index("scale[BLOCK=1024]")


def test_kernels_are_named_apart_and_picks_link_to_them(piped: ForkedWarm, named: Path) -> None:
    doc = piped.json("stats", named)
    kernels = {k["key"]: k for k in doc["kernels"]}
    same_defines = [k for k in kernels.values() if k["defines"] == {"BLOCK": "128"}]
    assert sorted(k["candidates"][0] for k in same_defines) == ["scale/b128", "scale/b128_o1"]
    assert sorted(tuple(k["options"]) for k in same_defines) == [(), ("-O1",)]
    text = piped("stats", named).stdout
    rows = [line.split() for line in text.splitlines() if " scale[BLOCK=128] " in line]
    assert sorted("-O1" in row for row in rows) == [False, True], rows  # options: a column
    for t in doc["tunes"]:
        picked = next(c for c in t["candidates"] if c["name"] == t["pick"])
        assert t["pick_kernel"] == picked["kernel"] and picked["kernel"] in kernels
        assert f"scale/{t['pick']}" in kernels[t["pick_kernel"]]["candidates"]
    # a batch's kernels share one binary: each shows its share, and the shares add up
    blobs = {k["sha256"]: k["blob_bytes"] for k in kernels.values()}
    assert any(k["shared_by"] > 1 for k in kernels.values())
    assert sum(k["bytes"] for k in kernels.values()) == sum(blobs.values())
    seconds = {k["sha256"]: k["batch_seconds"] for k in kernels.values()}
    assert sum(k["seconds"] for k in kernels.values()) == pytest.approx(sum(seconds.values()))
    contents = re.findall(r"^ host +\S+ +\d+ +([\d,]+)$", text, re.M)
    total = sum(int(n.replace(",", "")) for n in contents)
    assert total == sum(blobs.values())  # the Contents table's binary bytes


def test_explain_narrows_kernels_and_diff_json_has_usage(
    piped: ForkedWarm, named: Path, tmp_path: Path
) -> None:
    explained = piped.json("stats", named, "--explain", "scale")
    assert len(explained["kernels"]) == 3  # its three candidates, not the other kernel
    assert all(k["candidates"] for k in explained["kernels"])
    empty = tmp_path / "empty.warm"
    piped.json("clean", piped.json("merge", named, "-o", empty)["out"], "--max-size", "0")
    doc = piped.json("diff", empty, named)
    assert len(doc["kernels"]["only_b"]) == 4
    assert all(k["created"] and k["last_used"] for k in doc["kernels"]["only_b"])


def test_compact_tunes_table_has_a_device_column(piped: ForkedWarm, tmp_path: Path) -> None:
    many = "\n".join(NAMED.splitlines()[:-4]) + (
        "\ndef workload(rt):\n    for m in range(1, 13):\n        rt.tune(OP, rt.buffer(m), m)\n"
    )
    (tmp_path / "many.py").write_text(many)
    path = tmp_path / "many.warm"
    assert piped("run", path.with_suffix(".py"), "--bundle", path, "-q").returncode == 0
    text = piped("stats", path).stdout
    header = next(line for line in rows(text) if line.lstrip().startswith("operation"))
    assert header.split()[:4] == ["operation", "shape", "device", "pick"]
    lines = [line for line in rows(text) if line.lstrip().startswith("scale ") and "[" in line]
    assert len(lines) == 12 and all(" x86_64 " in line or " aarch64 " in line for line in lines)
    shapes = [int(line.split()[1].split("[")[1].rstrip("]")) for line in lines]
    assert shapes == sorted(shapes)


def test_help_shows_flags_and_usage_as_typed(piped: ForkedWarm, named: Path) -> None:
    wide80 = piped.with_env(COLUMNS="80")
    for command in ("run", "stats", "verify", "merge", "diff"):
        text = wide80(command, "--help").stdout
        assert "<bool>" not in text and "{" not in text and "…" not in text, text
        assert max(len(line) for line in rows(text)) <= 80
        assert "--json" in text
    run_help = wide80("run", "--help").stdout
    assert "Usage: warm run [OPTIONS] [WORKLOAD]" in run_help  # optional: or -m MODULE
    assert "--allow-discarded-reads" in run_help
    quiet = piped("verify", named, "-q")
    assert quiet.returncode == 0, quiet.stderr


def test_progress_shows_only_the_bars_a_pass_can_advance(tmp_path: Path) -> None:
    """Under a pseudo-terminal: the tuning bar is drawn while candidates are measured;
    CompileOnly draws no bar, and no bar reads `0/?`."""
    (tmp_path / "slow.py").write_text(SLOW_TUNE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path / "home"), COLUMNS="120", LINES="40", TERM="xterm")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "warmcli", "run", "slow.py", "--bundle", "slow.warm"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=tmp_path,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    shown = b"".join(chunks).decode(errors="replace")
    assert "CompileAndAutotune: candidates measured" in shown
    assert "CompileOnly: kernels" not in shown and "CompileOnly: candidates" not in shown
    assert "0/?" not in shown


def test_messages_say_what_happened(piped: ForkedWarm, tmp_path: Path) -> None:
    from warmcli.backends.opening import cuda_available

    if not cuda_available():  # a CUDA workload here: the error says how to build without a GPU
        saxpy = ROOT / "examples" / "saxpy_cuda.py"
        err = piped("run", saxpy, "--bundle", tmp_path / "s.warm").stderr
        assert "no CUDA device found" in err and "--arch sm_90" in err
    devices = piped.json("devices")
    assert devices["devices"][0]["id"] == "host"
    assert [c["device"] for c in devices["compilers"]] == ["host", "cuda"]
    cc = next(c for c in devices["compilers"] if c["device"] == "host")
    shown = piped("devices").stdout
    assert cc["path"] in shown and cc["version"] in shown
    assert ("pycuda is not installed" in shown) == (not devices["pycuda"])
    (tmp_path / "empty.py").write_text('DEVICE = "host"\ndef workload(rt):\n    pass\n')
    empty = piped("run", tmp_path / "empty.py", "--bundle", tmp_path / "e.warm")
    assert "launched nothing and tuned nothing" in empty.stdout
    assert "-" not in [line.split("·")[-2].strip() for line in rows(empty.stdout) if "·" in line]
    deep = tmp_path / "no" / "such" / "b.warm"
    proc = piped("run", tmp_path / "empty.py", "--bundle", deep)
    assert proc.returncode == 2 and f"no directory {deep.parent.parent}" in proc.stderr
    assert not (tmp_path / "no").exists()
    zero = tmp_path / "zero.warm"
    zero.write_bytes(b"")  # as `mktemp` makes it
    proc = piped("run", tmp_path / "empty.py", "--bundle", zero, "-q")
    assert proc.returncode == 0, proc.stderr
    assert piped.json("stats", zero)["manifest"]["format_version"] >= 1
    (tmp_path / "bad.py").write_text('DEVICE = "host"\ndef workload(rt):\n    raise ValueError\n')
    assert piped("run", tmp_path / "bad.py", "--bundle", tmp_path / "fresh.warm").returncode == 2
    assert not list(tmp_path.glob("fresh.warm*"))  # no bundle, and no lock file of it


BROKEN = r'''
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = """
#ifdef BROKEN
#error broken candidate
#endif
void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= STEP; }"""

def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)

OP = Tunable("scale", {
    "plain": Kernel(SRC, "scale", "Pi", defines={"STEP": 1}),
    "broken": Kernel(SRC, "scale", "Pi", defines={"STEP": 1}, options=("-DBROKEN",)),
}, launch, repeats=1)

def workload(rt):
    rt.tune(OP, rt.buffer(8), 8)
'''


def test_a_failed_compile_names_which_candidate(piped: ForkedWarm, tmp_path: Path) -> None:
    """Two candidates with the same defines, one with an option that breaks it: the note
    says which one (its options and key), and the key is the failed candidate's kernel."""
    (tmp_path / "broken.py").write_text(BROKEN)
    path = tmp_path / "broken.warm"
    proc = piped("run", tmp_path / "broken.py", "--bundle", path, "-q")
    assert proc.returncode == 0, proc.stderr
    note = next(line for line in rows(proc.stdout) if "compile of" in line)
    assert "scale[STEP=1] -DBROKEN (key " in note
    tune = piped.json("stats", path)["tunes"][0]
    failed = next(c for c in tune["candidates"] if c["name"] == "broken")
    assert failed["status"] == "failed" and f"(key {failed['kernel'][:8]})" in note


@pytest.mark.parametrize("args", [("stats", "--json"), ("stats",), ("verify", "--json")])
def test_a_reader_that_goes_away_is_no_error(
    piped: ForkedWarm, named: Path, args: tuple[str, ...]
) -> None:
    """`warm stats --json | head`: the pipe closed before warm writes is exit 1 with nothing
    on stderr (no traceback, no `Broken pipe` error line), as Python's own tools do."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "warmcli", args[0], str(named), *args[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=piped.env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before warm writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1 and err == "", err


def test_a_compiler_named_wrong_is_one_line(piped: ForkedWarm) -> None:
    """`warm devices` with a CUDA compiler warm does not know: one line, exit 2, text or JSON."""
    foo = piped.with_env(WARM_CUDA_COMPILER="foo")
    for extra in ((), ("--json",)):
        proc = foo("devices", *extra)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "'foo' is not a CUDA compiler" in proc.stderr + proc.stdout


def test_a_pycuda_that_fails_to_load_is_named_in_one_line(warm: Warm, tmp_path: Path) -> None:
    """A pycuda built against other CUDA headers than the driver's warns, then raises at
    import (as PyCUDA does): warm says why in its one error line, and prints no warning."""
    fake = tmp_path / "fake-site" / "pycuda"  # a stand-in named as such: pycuda's failure
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "driver.py").write_text(
        "import warnings\n"
        "warnings.warn('Failed to import the CUDA driver interface, with an error message "
        "indicating that the version of your CUDA header does not match')\n"
        "raise ImportError('_driver.so: undefined symbol: cuArrayCreate_v2')\n"
    )
    broken = Warm(dict(warm.env, PYTHONPATH=str(fake.parent)))
    proc = broken("run", ROOT / "examples" / "saxpy_cuda.py", "-b", tmp_path / "s.warm")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Warning" not in proc.stderr, proc.stderr
    assert "undefined symbol: cuArrayCreate_v2" in proc.stderr and "--arch sm_90" in proc.stderr
