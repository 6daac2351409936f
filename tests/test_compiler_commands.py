"""Compiler commands travel as typed records (`records.CompilerCommand`), not as notes.

A compile records each compiler process through `StatisticsCollector.command`; the pass
report carries them in `commands`, apart from its notes, and the CLI renders them.
"""

from __future__ import annotations

from pathlib import Path

from warmcli.cli.render.run import commands, run_json
from warmcli.execution.snapshots import DeviceStatistics
from warmcli.execution.statistics import StatisticsCollector
from warmcli.records import CompilerCommand
from warmcli.warming.passes import PassReport, RunReport


def test_collector_keeps_commands_apart_from_notes() -> None:
    collector = StatisticsCollector()
    collector.note("compiler command: not a command, a note")
    collector.command("host", ["cc", "-O2", "a file.c"])
    reader = collector.reader()
    assert reader.commands() == [CompilerCommand("host", ("cc", "-O2", "a file.c"))]
    assert reader.notes() == ["compiler command: not a command, a note"]


def test_render_reads_the_typed_list() -> None:
    command = CompilerCommand("cuda:0", ("nvcc", "-o", "out dir/x.cubin"))
    note = "compiler command: a note that only looks like one"
    report = PassReport("CompileOnly", 0.1, DeviceStatistics(), {}, [note], [], [command])
    assert commands(report) == ["nvcc -o 'out dir/x.cubin'"]
    doc = run_json(RunReport(Path("b.warm"), ["cuda:0"], [report]))
    assert doc["passes"][0]["commands"] == ["nvcc -o 'out dir/x.cubin'"]
    assert doc["passes"][0]["notes"] == [note]
