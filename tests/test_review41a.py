"""review41a: every note a runtime makes reaches the default collector, which
`warmcli.report()` and the README's `StatisticsReader(default_collector()).notes()` read,
under a user's own `ProcessModeOverride(..., StatisticsCollector())` as under none, and
once. Only a tune check's 'could not tell candidates apart' note did (leftovers41); a failed
compile's, a PTX JIT's, a discarded read's went to the user's collector alone. The real
host compiler in a Python process of its own (a fork of one that imported numpy and
warmcli once, `tests/forked_python.py`); the rule that every note goes through
`note_reported` read off warm's own source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, each process forked)

BAD_COMPILE = """
import json, sys
import warmcli
from warmcli.execution import default_collector
BAD = warmcli.Kernel("void f(float *y) { this is not C; }", "f", "P")
how = sys.argv[1]
mine = {"none": None, "own": warmcli.StatisticsCollector(), "default": default_collector()}[how]
def work():
    rt = warmcli.runtime("host")
    try:
        rt.launch(BAD, rt.buffer(4))
    except warmcli.KernelCompileError:
        pass
if mine is None:
    work()
else:
    with warmcli.ProcessModeOverride(warmcli.ProcessMode.EXECUTE, mine):
        work()
print(json.dumps({
    "default": warmcli.StatisticsReader(default_collector()).notes(),
    "mine": warmcli.StatisticsReader(mine).notes() if mine is not None else [],
}))
"""


@pytest.mark.parametrize("how", ["none", "own", "default"])
def test_a_failed_compiles_note_reaches_the_default_collector_once(warm: Warm, how: str) -> None:
    """Under a user's own collector the note went there alone: the default collector (the
    README's way of reading a process's notes) had none. Now both have it, once each; under
    an override naming the default collector itself, or none, it is there once."""
    shown = warm.production(BAD_COMPILE, how)
    failed = [n for n in shown["default"] if "compile of f" in n and "failed" in n]
    assert len(failed) == 1, shown
    assert shown["default"] == failed, shown  # nothing else, nothing twice
    if how == "own":
        assert shown["mine"] == failed, shown


def _note_calls(path: Path) -> list[str]:
    """Where `path` calls a `.note(...)` (a collector's), as `file:line`."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "note"
    ]


def test_every_note_goes_through_note_reported() -> None:
    """A PTX JIT's note (no GPU here to serve one), a bundle's foreign builds', a build not
    served, a discarded read's, a candidate's crash, a thread's exception: each was
    `active_collector().note(...)`, reaching the user's collector alone. Now `note_reported`
    is the one place a note is made (the collector's own `note` is defined, not called)."""
    calls = [c for p in sorted((ROOT / "warmcli").rglob("*.py")) for c in _note_calls(p)]
    assert len(calls) == 2, calls  # the active collector's, then the default one's
    assert all(c.startswith("warmcli/execution/process_mode.py:") for c in calls), calls


SPOOF = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
said = "its check could not tell candidates apart: every output it compared"
src = f"#error {said}\\nvoid g(float *y) {{}}"
rt = warmcli.runtime("host")
try:
    rt.launch(warmcli.Kernel(src, "g", "P"), rt.buffer(4))
except warmcli.KernelCompileError:
    pass
pick = module["workload"](warmcli.runtime("host"))  # real data: a check that tells them apart
notes = warmcli.StatisticsReader(warmcli.execution.default_collector()).notes()
print(json.dumps({"pick": pick, "report": warmcli.report().notes, "notes": notes}))
"""


def test_report_notes_hold_no_other_note_that_quotes_the_judged_nothing_words(
    warm: Warm, tmp_path: Path
) -> None:
    """`report().notes` is documented to hold only the notes of tunes whose check told no
    candidate apart; it took every note of the process containing those words, so a failed
    compile whose log quotes them (here an `#error`; a blob's library name can, too) was
    shown as one, and printed by `WARM_REPORT=1`. Now only a tune's own note is taken."""
    from test_judged40 import WARNING, WORKLOAD

    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    warm.env.update(CHECK="ref", DATA="random")
    shown = warm.production(SPOOF, script)
    assert shown["pick"] == "ref", shown
    assert [n for n in shown["notes"] if WARNING in n and n.startswith("compile of g")], shown
    assert shown["report"] == [], shown


TWO_BUNDLES = """
import json, os, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
warmcli.use_bundle(None)
module["workload"](warmcli.runtime("host"))  # on zeros: its check judged nothing, noted
warmcli.use_bundle(None)  # the report is about the bundle in use from here
os.environ["DATA"] = sys.argv[2]
module["workload"](warmcli.runtime("host"))  # measured again, on zeros or on real data
r = warmcli.report()
print(json.dumps({"notes": r.notes, "tunes": [m.name for m in r.tunes], "text": str(r)}))
"""


@pytest.mark.parametrize("then", ["zeros", "random"])
def test_report_notes_are_of_the_bundle_in_use_each_once(
    warm: Warm, tmp_path: Path, then: str
) -> None:
    """After `use_bundle`, `report()` names only what was missed over the bundle in use,
    but its notes were every judged-nothing note since the process began: a tune measured
    before and after showed its note twice (once its misses' own), and a tune measured
    after on real data was shown the note of the one before. Now the notes start where
    the misses do, each once."""
    from test_judged40 import WARNING, WORKLOAD

    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    warm.env.update(CHECK="ref", DATA="zeros")
    shown = warm.production(TWO_BUNDLES, script, then)
    assert shown["tunes"] == ["ax float32[64] float32[64] 64"], shown
    noted = [n for n in shown["notes"] if WARNING in n]
    assert len(noted) == (1 if then == "zeros" else 0), shown
    assert shown["notes"] == noted, shown
    assert shown["text"].count(WARNING) == len(noted), shown["text"]
