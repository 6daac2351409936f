"""Stop 62's cut of `warm run`'s own cost (issue 16), held to the behaviour it keeps.

`Workload` (`warmcli.warming.workload`) and `PassReport` (`warmcli.warming.one_pass`) were
dataclasses: making them generated and compiled their methods' code as every `warm run` imported
them (~1.1 ms of its start, measured: class creation 1.106 ms as dataclasses, 0.023 ms as records).
They are `warmcli.records.Record`s now, as warm's other plain records are; a `PassReport`'s
`reader` stays out of its repr and its equality, and what a workload's import did is recorded on a
new `Workload` made from the fields of the one its entry gave, not by `dataclasses.replace`,
whose first call on a record makes that code after all.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from conftest import EXAMPLES
from fresh_python import fresh_code

from warmcli.execution.snapshots import DeviceStatistics
from warmcli.execution.statistics import StatisticsCollector
from warmcli.warming.one_pass import PassReport
from warmcli.warming.workload import Workload, load_workload

# `warm run` as its command line starts it, every class `dataclasses` makes code for noted (in
# the supervisor and in the worker it forks: one line each, appended to the file argv[1] names).
RUN_NOTING_DATACLASSES = """
import dataclasses, sys
made, real = sys.argv[1], dataclasses._process_class

def noted(cls, *args, **kwargs):
    with open(made, "a") as file:
        file.write(f"{cls.__module__}.{cls.__qualname__}\\n")
    return real(cls, *args, **kwargs)

dataclasses._process_class = noted
dataclasses.dataclass(type("SpyWorks", (), {"__annotations__": {"x": "int"}}))  # one noted
sys.argv = ["warm", *sys.argv[2:]]
from warmcli.__main__ import main

main()
"""


def test_a_warm_run_makes_no_dataclass_of_warms(tmp_path):
    """A whole `warm run` of the host example (the real CLI, its worker too): no class of warm's
    went through `dataclasses` (before: `Workload` and `PassReport`, each run)."""
    made = tmp_path / "made.txt"
    made.touch()
    bundle = tmp_path / "run.warm"
    workload = str(EXAMPLES / "matmul_host.py")
    run = ("run", workload, "--bundle", str(bundle), "--json")
    done = fresh_code(RUN_NOTING_DATACLASSES, str(made), *run, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verified"] is True
    classes = made.read_text().split()
    assert "__main__.SpyWorks" in classes, classes  # the spy sees what is made
    assert not [c for c in classes if c.startswith("warmcli.")], classes


def _report(reader: object = None) -> PassReport:
    return PassReport("CompileOnly", 0.5, DeviceStatistics(), {}, ["a note"], reader=reader)


def test_a_pass_reports_reader_is_in_neither_its_repr_nor_its_equality():
    """As the dataclass field's `repr=False, compare=False` kept it."""
    one, other = _report(StatisticsCollector().reader()), _report()
    assert one == other
    assert "reader" not in repr(one) and "a note" in repr(one)
    assert one != _report().__class__("Verify (Execute)", 0.5, DeviceStatistics(), {})
    fresh = PassReport("CompileOnly", 0.1, DeviceStatistics(), {})
    fresh.notes.append("mine")  # mutable, each list its own
    assert PassReport("CompileOnly", 0.1, DeviceStatistics(), {}).notes == []
    assert [f.name for f in dataclasses.fields(fresh)][-1] == "never_served"


def test_a_loaded_workload_keeps_what_its_import_did(tmp_path):
    """The `sys.argv` a workload's import left is on the `Workload` loaded (made anew from the
    one its entry gave: no `dataclasses.replace`), every other field kept; it compares and
    hashes by field, as the dataclass did."""
    path = tmp_path / "w62.py"
    path.write_text("import sys\nsys.argv.append('-x')\n\ndef workload(rt):\n    pass\n")
    saved = list(sys.argv)
    try:
        loaded = load_workload(path)
    finally:
        sys.argv[:] = saved
    assert loaded.argv[1:] == ("-x",) and loaded.unbound == ""
    assert (loaded.path, loaded.entry, loaded.fallback) == (path.resolve(), "workload", False)
    assert loaded.function is loaded.module.workload
    again = Workload(**loaded.as_fields())
    assert again == loaded and hash(again) == hash(loaded)
    assert dataclasses.replace(loaded, argv=()) != loaded
