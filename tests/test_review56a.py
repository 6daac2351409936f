"""review56a: kernels alike but for the path of an include folder or a linked object keep apart.

A kernel's content hash leaves out the path of an include folder (`-I/a`) and of an object it
links (`/a/helper.o`): its key reads those files' content instead (`warmcli.headers`,
`warmcli.linked`). But a runtime kept each key it gave by the content hash alone
(`runtime.lookup.Lookup.key`), so of two kernels with the same source naming `-I/a` and `-I/b`
(headers that differ), or `/a/helper.o` and `/b/helper.o`, the second was given the first's key
in the same process: it ran the first's build, cold (no bundle) and served alike, and `warm run`
stored one build for both. Real parts: the real CLI (a fork of a process that imported it once,
`tests/forked_cli.py`), the real C compiler, a real bundle served by a fresh process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Two kernels differing in their include folder's path (h.h: HV 1, then 2), two in their linked
# object's (helper() returns 3, then 4): each launch appends its digit.
WORKLOAD = """
import os
from warmcli import Kernel
DEVICE = "host"
H = os.path.dirname(os.path.abspath(__file__))
INC = '#include "h.h"\\nvoid k(long *o) { o[0] = o[0] * 10 + HV; }'
OBJ = "long helper(void); void j(long *o) { o[0] = o[0] * 10 + helper(); }"
def workload(rt):
    o = rt.buffer(1, "int64")
    rt.launch(Kernel(INC, "k", "P", options=["-I" + H + "/ia"]), o)
    rt.launch(Kernel(INC, "k", "P", options=["-I" + H + "/ib"]), o)
    rt.launch(Kernel(OBJ, "j", "P", options=[H + "/oa/helper.o"]), o)
    rt.launch(Kernel(OBJ, "j", "P", options=[H + "/ob/helper.o"]), o)
    return o
"""

SERVE = """
import sys
import warmcli, workload
if len(sys.argv) > 1:
    warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
print(int(rt.read(workload.workload(rt))[0]))
"""


def _served(folder: Path, warm: Warm, *bundle: Path) -> str:
    env = {**warm.env, "PYTHONPATH": str(ROOT)}  # (this tree's warmcli, as `warm` runs)
    done = subprocess.run(
        [sys.executable, str(folder / "serve.py"), *map(str, bundle)],
        capture_output=True, text=True, env=env, cwd=folder, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_kernels_differing_in_an_include_folders_or_linked_objects_path_run_their_own(
    warm: Warm, tmp_path: Path
) -> None:
    """1234 cold and served (before: 1133 both, the second of each pair ran the first's)."""
    for folder, value in (("ia", 1), ("ib", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "h.h").write_text(f"#define HV {value}\n")
    for folder, value in (("oa", 3), ("ob", 4)):
        (tmp_path / folder).mkdir()
        source = tmp_path / folder / "helper.c"
        source.write_text(f"long helper(void) {{ return {value}; }}\n")
        built = ["cc", "-c", "-fPIC", "-o", str(tmp_path / folder / "helper.o"), str(source)]
        subprocess.run(built, check=True)
    (tmp_path / "workload.py").write_text(WORKLOAD)
    (tmp_path / "serve.py").write_text(SERVE)
    assert _served(tmp_path, warm) == "1234"  # cold: compiled here
    bundle = tmp_path / "b.warm"
    done = warm("run", tmp_path / "workload.py", "-b", bundle)
    assert done.returncode == 0, done.stderr
    assert "stored 4 new kernel(s)" in done.stdout + done.stderr, done.stdout
    assert _served(tmp_path, warm, bundle) == "1234"
