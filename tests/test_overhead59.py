"""Stop 59's cuts of `warm run`'s own cost (issue 16), held to the behaviour they keep.

The shadowed-module check (`warmcli.warming.shadowed`) resolves a module's folder only where
one `stat` finds it the workload's (same device and inode): the ~40 folders of a run's ~500
modules were each resolved, an `lstat` per part of their path, ~2.5 ms of every run; a
module reached through a link is still the workload's (`test_overhead54`). The header walk
(`warmcli.headers` and what it imports) is imported by a run's first compile of a source that
may name a header (`backends.scratch_reads`), not by the CLI's start: a run whose every kernel
is stored, or whose sources include nothing, never imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

from conftest import ROOT
from fake_modules import spread_modules

from warmcli.warming import shadowed as shadowed_module

HEADER_WALK = ("warmcli.headers", "warmcli.once_copies", "warmcli.system_shadows")

WORKLOAD = """
import sys
from pathlib import Path

from warmcli import Kernel

DEVICE = "host"
K = Kernel({source!r}, "k", "Pi")


def workload(rt):
    import numpy as np

    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(K, x, 4)
    rt.synchronize()
    walk = sorted(m for m in {walk!r} if m in sys.modules)
    Path({marks!r}).write_text(repr(walk))
    return x
"""


def test_shadowed_resolves_no_folder_but_the_workloads(tmp_path, monkeypatch):
    """400 modules in 4 other folders: none of them resolved (before: each folder was)."""
    resolved: list[Path] = []
    real = shadowed_module._file_of

    def counted(path: Path) -> Path | None:
        resolved.append(path)
        return real(path)

    monkeypatch.setattr(shadowed_module, "_file_of", counted)
    with spread_modules(tmp_path, "o59_mod") as (folders, workload):
        assert shadowed_module.shadowed(workload) == []
    assert not [p for p in resolved if p in folders], resolved


def test_a_module_in_the_workloads_folder_by_another_spelling_is_still_its_own(tmp_path):
    """`work/../work/helper.py`: its folder's text is not the workload's, its inode is."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "copy.py").write_text("X = 1\n")
    helper = folder / "helper.py"
    helper.write_text("import copy\n")
    module = types.ModuleType("o59_spelled")
    module.__file__ = os.path.join(str(folder), "..", "work", "helper.py")
    exec(compile(helper.read_text(), str(helper), "exec"), module.__dict__)
    sys.modules["o59_spelled"] = module
    try:
        lines = shadowed_module.shadowed(folder / "workload.py")
    finally:
        del sys.modules["o59_spelled"]
    assert [line for line in lines if line.startswith("copy.py beside the workload")], lines


def test_the_cli_start_imports_no_header_walk():
    """`warm run`'s supervisor imports what a run of stored kernels uses: no header walk."""
    code = (
        "import sys, warmcli.cli.run; "
        f"print(sorted(m for m in {HEADER_WALK!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


PLAIN = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0f; }"
INCLUDES = "#include <math.h>\n" + PLAIN.replace("1.0f", "fabsf(-1.0f)")


def _walked(warm, tmp_path: Path, source: str, name: str) -> tuple[str, str]:
    """What of the header walk the worker of a first, then a second `warm run` of a host
    workload of one kernel of `source` had imported by the end of its workload."""
    marks = tmp_path / f"{name}.txt"
    workload = tmp_path / f"{name}.py"
    workload.write_text(WORKLOAD.format(source=source, walk=HEADER_WALK, marks=str(marks)))
    walked = []
    for _ in range(2):
        done = warm("run", workload, "--bundle", tmp_path / f"{name}.warm", "--json")
        assert done.returncode == 0, done.stderr
        walked.append(marks.read_text())
    return walked[0], walked[1]


def test_a_kernel_that_includes_nothing_never_imports_the_header_walk(warm, tmp_path):
    """The real CLI: a kernel whose source names no header is compiled, stored and served
    again with no module of the header walk imported in the worker (before: the first
    compile's scratch check imported it for every source); one that includes a header
    imports it where it compiles (the check sees the worker's modules), not once stored."""
    assert _walked(warm, tmp_path, PLAIN, "plain") == ("[]", "[]")
    first, second = _walked(warm, tmp_path, INCLUDES, "includes")
    assert first != "[]"
    assert second == "[]"


def test_a_source_that_includes_nothing_has_no_scratch_read_and_one_that_climbs_has(tmp_path):
    """The scratch check's answer is as before: `#include "../cfg.h"` is refused, spelled
    plainly or split by a line splice; a source with no include reads nothing there."""
    from warmcli.backends.scratch_reads import scratch_read
    from warmcli.kernel import Kernel

    def read(source: str) -> tuple[str, str] | None:
        kernel = Kernel(source, "k", "Pi")
        return scratch_read([], [kernel], str(tmp_path), None)

    assert read(PLAIN) is None
    assert read('#include "../cfg.h"\n' + PLAIN) is not None
    assert read('#inc\\\nlude "../cfg.h"\n' + PLAIN) is not None
