"""Bad workloads, compile failures, hangs, the --jobs bound and reads under discard, end to end.

Every case runs the real CLI in a subprocess on the host backend. The compiler
hang and the process count use a real `cc` behind a small shell wrapper
(`WARM_CC`) that sleeps on a marker or records how many compilers run at once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_bundle import make_bundle

FAILING = """\
from warmcli import Kernel, Tunable
from warmcli.execution.process_mode import current_process_mode

K = Kernel("void bump(float *x) {{ x[0] += 2.0f; }}", "bump", "P")
SRC = "void op(float *x, int n) {{ for (int i = 0; i < n * R; i++) x[i % n] += 1.0f; }}"
OP = Tunable("op", {{f"r{{r}}": Kernel(SRC, "op", "Pi", defines={{"R": r}}) for r in (1, 2)}},
             lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream))

def workload(rt):
    x = rt.buffer(64)
    rt.launch(K, x)
    rt.tune(OP, x, 64)
    if current_process_mode().value == {mode!r}:
        raise RuntimeError("boom in " + {mode!r})
"""
RAISE_LINE = 14


def one_error_line(proc, *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    first = proc.stderr.splitlines()[0]
    for needle in needles:
        assert needle in first, (needle, proc.stderr)
    return first


@pytest.mark.parametrize(
    ("mode", "label", "stored"),
    [
        ("CompileOnly", "CompileOnly", False),
        ("CompileAndAutotune", "CompileAndAutotune", True),
        ("Execute", "Verify (Execute)", True),
    ],
)
def test_exception_in_each_pass_exits_2_at_its_line_and_keeps_what_was_stored(
    warm: Warm, bundle_path: Path, workload_file, mode: str, label: str, stored: bool
) -> None:
    make_bundle(bundle_path)  # it already holds the kernel inc
    path = workload_file(FAILING.format(mode=mode), f"fails_{mode}.py")
    proc = warm("run", path, "--bundle", bundle_path)
    one_error_line(proc, f"during {label}", f"{path}:{RAISE_LINE}", f"RuntimeError: boom in {mode}")
    doc = warm.json("stats", bundle_path)
    entries = sorted(k["entry"] for k in doc["kernels"])
    if stored:  # what the second pass built and measured before the failure stays stored
        assert entries == ["bump", "inc", "op", "op"]
        [tune] = doc["tunes"]
        assert tune["operation"] == "op" and tune["pick"] in {"r1", "r2"}
    else:
        assert entries == ["inc"] and doc["tunes"] == []


def test_workload_failing_at_import_names_its_line(warm: Warm, workload_file) -> None:
    path = workload_file("import os\nraise KeyError('no config')\n", "imports.py")
    one_error_line(warm("run", path), f"{path}:2", "KeyError")


def test_compile_error_log_has_the_kernels_file_and_line(warm: Warm, workload_file) -> None:
    path = workload_file(
        "from warmcli import Kernel\n"
        "K = Kernel('void bad(float *x) {\\n  x[0] = 1.0f;\\n  x[1] = nope;\\n}', 'bad', 'P')\n"
        "def workload(rt):\n"
        "    rt.launch(K, rt.buffer(4))\n",
        "badkernel.py",
    )
    proc = warm("run", path)
    one_error_line(proc, f"{path}:4", "kernel bad failed to compile")
    assert "bad.c:3:" in proc.stderr and "nope" in proc.stderr


def test_an_undefined_symbol_is_a_compile_error_and_never_stored(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """A host kernel calling a function nothing defines fails to link (naming it) instead of
    being stored as a binary that cannot load; the good kernel of the same batch is stored,
    and check/verify then have nothing unloadable to pass."""
    path = workload_file(
        "from warmcli import Kernel\n"
        "GOOD = Kernel('void g(int *p, int n) { p[0] = n; }', 'g', 'Pi')\n"
        "BAD = Kernel('void nothere(int *p);\\nvoid k(int *p, int n) { nothere(p); }', 'k', 'Pi')\n"
        "def workload(rt):\n"
        "    b = rt.buffer(4, 'int32')\n"
        "    rt.launch(GOOD, b, 1)\n"
        "    rt.launch(BAD, b, 1)\n",
        "undefined.py",
    )
    proc = warm("run", path, "--bundle", bundle_path)
    one_error_line(proc, f"{path}:7", "kernel k failed to compile")
    assert "undefined reference" in proc.stderr and "nothere" in proc.stderr
    assert [k["entry"] for k in warm.json("stats", bundle_path)["kernels"]] == ["g"]


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def compiler_wrapper(tmp_path: Path, before: str, after: str = "") -> Path:
    """A `WARM_CC` that runs `before`, then the real cc on the same arguments, then `after`;
    asked what it is (`--version`, and `-print-search-dirs` for the `as`/`ld` it runs: the
    host identity's probes, no compile), it is the real cc alone."""
    script = tmp_path / "cc-wrapper.sh"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in --version|-print-search-dirs) exec cc "$@";; esac; done\n'
        'for a in "$@"; do case "$a" in *.c) src="$a";; esac; done\n'
        f'{before}\ncc "$@"\nrc=$?\n{after}\nexit $rc\n'
    )
    script.chmod(0o755)
    return script


HANGING = """\
from warmcli import Kernel, Tunable

KS = [Kernel(f"void k{i}(float *x) {{ x[0] += {i}.0f; }}", f"k{i}", "P") for i in range(3)]
SRC = "/* MARK */ void op(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0f; }"
OP = Tunable("op", {"fine": Kernel(SRC.replace("MARK", "ok"), "op", "Pi"),
                    "hangs": Kernel(SRC.replace("MARK", "WARM_TEST_HANG"), "op", "Pi")},
             lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream))
DIRECT = False

def workload(rt):
    x = rt.buffer(16)
    for k in KS:
        rt.launch(k, x)
    rt.tune(OP, x, 16)
    if DIRECT:
        rt.launch(OP.candidates["hangs"], x, 16)
"""


def test_hanging_compile_is_stopped_reported_and_the_run_continues(
    warm: Warm, tmp_path: Path, bundle_path: Path, workload_file
) -> None:
    pids = tmp_path / "hung-pids"
    warm.env["WARM_CC"] = str(
        compiler_wrapper(
            tmp_path,
            f'if grep -q WARM_TEST_HANG "$src"; then sleep 120 & echo $! >> {pids}; wait; fi',
        )
    )
    path = workload_file(HANGING, "hangs.py")
    started = time.monotonic()
    doc = warm.json("run", path, "--bundle", bundle_path, "--compile-timeout", "1", "--jobs", "2")
    assert time.monotonic() - started < 60, "the hung compiler was waited for"
    second = doc["passes"][1]
    assert second["compilation"]["failed"] == 1
    assert second["compilation"]["compiled"] == 4, "every other kernel was built"
    assert any("timed out" in n and "did not finish within 1 s" in n for n in second["notes"])
    assert doc["verified"] is True
    [tune] = warm.json("stats", bundle_path)["tunes"]
    assert tune["pick"] == "fine"
    hung = next(c for c in tune["candidates"] if c["name"] == "hangs")
    assert hung["status"] == "failed" and "did not finish within 1 s" in hung["reason"]
    hung = [int(p) for p in pids.read_text().split()]
    assert hung and not [p for p in hung if alive(p)], "the compiler's children were stopped"

    path.write_text(HANGING.replace("DIRECT = False", "DIRECT = True"))
    proc = warm("run", path, "--bundle", bundle_path, "--compile-timeout", "1")
    one_error_line(proc, "kernel op timed out compiling")
    assert "did not finish within 1 s" in proc.stderr
    assert len(warm.json("stats", bundle_path)["kernels"]) == 4, "nothing stored was lost"


MANY = """\
from warmcli import Kernel, Tunable

SRC = "void op(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"
STEPS = {f"s{s}": Kernel(SRC, "op", "Pi", defines={"STEP": f"{s}.0f"}) for s in range(10)}
OP = Tunable("op", STEPS | {"broken": Kernel(SRC, "op", "Pi", defines={"STEP": "?"})},
             lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream))

def workload(rt):
    x = rt.buffer(8)
    rt.tune(OP, x, 8)
"""


def test_compiler_processes_never_outnumber_jobs(
    warm: Warm, tmp_path: Path, bundle_path: Path, workload_file
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    counts = tmp_path / "counts"
    warm.env["WARM_CC"] = str(
        compiler_wrapper(
            tmp_path,
            f"touch {live}/$$; ls {live} | wc -l >> {counts}; sleep 0.3",
            f"rm -f {live}/$$",
        )
    )
    doc = warm.json("run", workload_file(MANY, "many.py"), "--bundle", bundle_path, "-j", "3")
    second = doc["passes"][1]["compilation"]
    assert second["compiled"] == 10 and second["failed"] == 1
    seen = [int(n) for n in counts.read_text().split()]
    assert len(seen) == second["compiler_processes"] > 3, "the broken kernel was bisected out"
    assert 2 <= max(seen) <= 3, seen


READER = """\
from warmcli.execution.process_mode import current_process_mode

def workload(rt):
    b = rt.buffer(4)
    if current_process_mode().value == "CompileAndAutotune":
        rt.read(b)
"""


def test_read_under_compile_and_autotune_is_an_error_unless_allowed(
    warm: Warm, bundle_path: Path, workload_file
) -> None:
    path = workload_file(READER, "reads_late.py")
    one_error_line(
        warm("run", path, "--bundle", bundle_path), "read of Buffer", "CompileAndAutotune"
    )
    doc = warm.json("run", path, "--bundle", bundle_path, "--allow-discarded-reads")
    first, second = doc["passes"][:2]
    assert first["execution"]["discarded_reads"] == 0
    assert second["execution"]["discarded_reads"] == 1
    assert any("CompileAndAutotune" in n for n in second["notes"])
