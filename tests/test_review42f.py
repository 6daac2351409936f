"""review42f: `tests/forked_cli.py`'s forked commands against real `python -m warmcli`
starts, and trial42c's `warm clean --tune` and WARM_REPORT tune line against hostile input.

Forked against started: each case runs one command both ways and compares exit code,
stdout and stderr byte for byte (errors, `--json`, escapes, an ASCII locale, a narrow
terminal, NO_COLOR); a workload run by `warm run` sees the same `sys.path` and the same
modules imported either way (a workload named as a module warm imported early would
otherwise pass vacuously forked, as `test_readme36`'s `decimal.py`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

ASCII = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
CASES: list[tuple[str, tuple[str, ...], dict[str, str]]] = [
    ("version", ("--version",), {}),
    ("help", ("--help",), {}),
    ("no-args", (), {}),
    ("stats-help", ("stats", "--help"), {}),
    ("unknown", ("frobnicate",), {}),
    ("missing-arg", ("stats",), {}),
    ("bad-option-json", ("stats", "{bundle}", "--nope", "--json"), {}),
    ("no-file-json", ("stats", "{tmp}/none.warm", "--json"), {}),
    ("escaped", ("stats", "{tmp}/a\x1b[31m\nb\u2192.warm"), {}),
    ("stats", ("stats", "{bundle}"), {}),
    ("stats-json", ("stats", "{bundle}", "--json"), {}),
    ("verify", ("verify", "{bundle}"), {}),
    ("garbage-json", ("stats", "{tmp}/garbage.warm", "--json"), {}),
    ("ascii-arg", ("stats", "{tmp}/a\u2192.warm"), ASCII),
    ("ascii-help", ("--help",), ASCII),
    ("ascii-stats", ("stats", "{bundle}"), ASCII),
    ("ascii-home", ("stats", "{bundle}"), {**ASCII, "WARM_HOME": "{tmp}/h\u00e9"}),
    ("columns-40", ("stats", "{bundle}"), {"COLUMNS": "40"}),
    ("columns-40-help", ("--help",), {"COLUMNS": "40"}),
    ("no-color", ("verify", "{bundle}"), {"NO_COLOR": "1"}),
    ("bad-variable", ("stats", "{bundle}"), {"WARM_STRICT": "maybe"}),
    ("clean-dry-json", ("clean", "{bundle}", "--older-than", "1d", "--dry-run", "--json"), {}),
]


@pytest.fixture(scope="module")
def bundle(made_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("r42f")
    shutil.copyfile(made_once / "good.warm", base / "b.warm")
    (base / "garbage.warm").write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)
    return base / "b.warm"


def both(warm: Warm, forked: Any, *args: str | Path, cwd: Path | None = None) -> list[Any]:
    """The command started (`python -m warmcli`) and forked: exit code, stdout, stderr."""
    real = warm(*args, **({"cwd": cwd} if cwd else {}))
    fork = forked(warm)(*args, cwd=cwd)
    return [(p.returncode, p.stdout, p.stderr) for p in (real, fork)]


@pytest.mark.parametrize("name,args,extra", CASES, ids=[c[0] for c in CASES])
def test_a_forked_command_says_what_a_started_one_does(
    warm: Warm, forked: Any, bundle: Path, name: str, args: tuple[str, ...], extra: dict[str, str]
) -> None:
    """Byte for byte, as each reads a command's outcome. Before: `warm --help` listed
    `check` last forked (the server imported each command module itself, and `check`'s
    registration loaded the others first); an argument or a variable no ASCII locale can
    encode was a `UnicodeEncodeError` traceback forked (the server took the test's text,
    not the bytes a started process is given), the refusal's one line started."""
    given = {"tmp": bundle.parent, "bundle": bundle}
    warm.env.update({k: v.format(**given) for k, v in extra.items()})
    real, fork = both(warm, forked, *(a.format(**given) for a in args))
    assert fork == real


PROBE = """
import json, os, sys
def workload(rt):
    with open(os.environ["PROBE_OUT"], "a") as out:
        out.write(json.dumps({"path": sys.path[:3], "modules": sorted(sys.modules)}) + "\\n")
"""


def test_a_forked_run_shows_its_workload_what_a_started_one_does(
    warm: Warm, forked: Any, tmp_path: Path
) -> None:
    """`sys.path` and `sys.modules` as a workload of `warm run` sees them, forked and
    started. Before: forked, the path's second entry was '' (the server's `python -c`), not
    the working folder (`python -m`'s), and `decimal`, `fractions`, `socket`, `base64`,
    rich's tables and 50 of warm's modules were imported before the workload (the server
    imported every command's modules): `test_readme36`'s workload named `decimal.py` passed
    forked even with the bug it guards (warm's tuning importing `statistics`) back."""
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "cwd").mkdir()
    views = []  # (the home's remembered compiler lines first filled, as each way then finds
    warm.env["PROBE_OUT"] = str(tmp_path / "first")  # them: a first probe imports what runs it)
    assert warm("run", tmp_path / "probe.py", "-b", tmp_path / "first.warm", "-q").returncode == 0
    for way in ("real", "forked"):
        warm.env["PROBE_OUT"] = str(tmp_path / way)
        run = warm if way == "real" else forked(warm)
        done = run("run", tmp_path / "probe.py", "-b", tmp_path / f"{way}.warm", "-q",
                   cwd=tmp_path / "cwd")  # fmt: skip
        assert done.returncode == 0, done.stderr
        views.append([json.loads(line) for line in (tmp_path / way).read_text().splitlines()])
    (real, *_), (fork, *_) = views
    assert fork["path"] == real["path"]
    assert sorted(set(fork["modules"]) ^ set(real["modules"])) == []


# -- trial42c: `warm clean --tune` and WARM_REPORT's pick --------------------------------------

TUNES = """
import numpy as np
from warmcli import Kernel, Tunable
SRC = "void ax(float *y, const float *x, int n) { for (int i = 0; i < n; i += S) " \\
      "for (int j = i; j < i + S && j < n; j++) y[j] += 2 * x[j]; }"
def launch(rt, k, y, x, n, *, stream=None):
    rt.launch(k, y, x, n, stream=stream)
AX = Tunable("ax", {f"s{s}": Kernel(SRC, "ax", "PPi", defines={"S": s}) for s in (1, 2, 4)},
             launch, check="s1")
def workload(rt):
    for n in (16, 32):
        y, x = rt.upload(np.zeros(n, np.float32)), rt.upload(np.ones(n, np.float32))
        rt.tune(AX, y, x, n)
"""

# A production process tuning cold (no bundle holds its tunes), forking once, then closing:
# how often `tune_pick` ran in the child and in the parent (a profiler watching: nothing of
# warm's replaced), then the pick `warmcli.report()` names afterwards.
COUNTED = """
import json, os, runpy, sys
import warmcli, warmcli.production
work = runpy.run_path(sys.argv[1])
calls = []
def watch(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "tune_pick":
        calls.append(frame.f_code.co_filename)
sys.setprofile(watch)
work["workload"](warmcli.runtime("host"))
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, str(len(calls)).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = int(os.read(read, 64))
warmcli.production.close()  # (as at exit: written back, released)
parent = len(calls)
sys.setprofile(None)
picks = [m.pick for m in warmcli.report().tunes]
print(json.dumps({"child": child, "parent": parent, "picks": picks}))
"""


def test_a_process_without_warm_report_never_makes_a_tune_pick_text(
    warm: Warm, tmp_path: Path
) -> None:
    """The report's pick line costs a production process nothing unless asked for. Before:
    every tune a process measured had its pick text made (candidates sorted, times
    formatted: ~5 µs a tune of 16 candidates) at its close (`production.close`, the exit) and
    again in every forked child (a data loader's workers), WARM_REPORT unset. Now it is
    made when read (the report's line, `Miss.pick`), and `warmcli.report()` still names it
    after the close."""
    (tmp_path / "w.py").write_text(TUNES)
    env = dict(warm.env, WARM_BUNDLE="")  # (none: every tune measured cold)
    env.pop("WARM_REPORT", None)
    done = subprocess.run(
        [sys.executable, "-c", COUNTED, tmp_path / "w.py"],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stdout)
    assert (counted["child"], counted["parent"]) == (0, 0), counted
    assert len(counted["picks"]) == 2 and all(p.startswith("picked s") for p in counted["picks"])


@pytest.mark.parametrize("command", ["clean", "stats"])
def test_a_huge_operation_name_no_bundle_holds_is_refused_in_a_short_line(
    warm: Warm, forked: Any, bundle: Path, tmp_path: Path, command: str
) -> None:
    """`warm clean --tune NAME` (and `warm stats --explain NAME`, the line it copied) of a
    name the bundle holds no tune of: one line, exit 2, nothing changed, the name cut as
    every line cuts a text (`printable.cut`). Before: a 100,000-character name was said
    whole, a 100 KB line (and the JSON error too)."""
    path = tmp_path / "b.warm"
    shutil.copyfile(bundle, path)
    before = path.read_bytes()
    option = "--tune" if command == "clean" else "--explain"
    name = "x\x1b" * 50_000
    run = forked(warm)
    said = run(command, path, option, name)
    assert said.returncode == 2 and said.stdout == "", said.stdout[:300]
    assert said.stderr.count("\n") == 1 and len(said.stderr) < 2_000, said.stderr[:300]
    assert "no tunes for operation 'x\\x1bx" in said.stderr and "100,000 characters" in said.stderr
    doc = json.loads(run(command, path, option, name, "--json").stdout)
    assert doc["exit"] == 2 and len(doc["error"]) < 2_000
    assert path.read_bytes() == before


def test_a_pick_line_of_any_times_and_names_is_one_escaped_line_pure_logic() -> None:
    """What held (pure logic): times of 0, NaN, inf, negative or subnormal make a pick text
    (no ZeroDivisionError), and the report's line escapes a candidate's newline, escape
    and bidi characters and cuts a long text."""
    from warmcli.production_report import Miss, ProductionReport, tune_pick
    from warmcli.records import CandidateMeasurement, TuneRecord

    odd = [0.0, float("nan"), float("inf"), -1e-5, 5e-324, 1e300]
    for best in odd:
        for other in odd:
            named = ("a\n\x1b[31m", "\u202eb" * 300, "c")
            cands = (
                CandidateMeasurement(named[0], "k", "ok", best),
                CandidateMeasurement(named[1], "k", "ok", other),
                CandidateMeasurement(named[2], "k", "failed", reason="x"),
            )
            tune = TuneRecord("f" * 64, "op", "4", "host", "x", "measured", named[0], cands)
            assert tune_pick(tune).startswith(f"picked {named[0]}, ")
            text = str(ProductionReport("b", False, [Miss.measured("host", tune)]))
            line = text.splitlines()[-1]
            assert "\x1b" not in line and "\u202e" not in line and "\\x0a" in line
            assert len(text.splitlines()) == 2 and len(line) < 4_000
