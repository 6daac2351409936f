"""Mutation review 56's kills: a guard of stop 55's that no test failed without.

`compile_environment.READ_PREFIXES`: a variable a compile reads that only its prefix names
(`PYTHONPATH`, which a Python wrapper script's interpreter reads; no script names it) kept two
units apart; without it the batch built every kernel in the first's value.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_batch55 import folded, stepped
from test_readme54 import SERVE

# A C compiler that is a Python script adding the `-D` a module on its `PYTHONPATH` gives: no
# variable named in its text, so only `compiler_reads`' prefixes make `PYTHONPATH` one it reads.
WRAPPER = (
    "#!/usr/bin/env python3\nimport os, sys, stepflag\n"
    'os.execvp("cc", ["cc", "-DSTEP_VALUE=" + stepflag.VALUE, *sys.argv[1:]])\n'
)
# `stepped`'s workload, each kernel launched after `PYTHONPATH` names the folder of its value.
SET_BEFORE = 'os.environ["STEP"] = str(i + 1)'
SET_PATH = 'os.environ["PYTHONPATH"] = os.path.join(FOLDERS, str(i + 1))'


def test_a_variable_only_a_prefix_names_builds_each_kernel_in_its_value(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Three kernels, each launched under `PYTHONPATH` naming a module that gives its value
    (1, 2, 3): a cold start builds each in its own; so does the batch, and the bundle serves
    that. Without the prefixes (mutant), one group built all three with 1: served 1 1 1."""
    for value in (1, 2, 3):
        (folder := tmp_path / "paths" / str(value)).mkdir(parents=True)
        (folder / "stepflag.py").write_text(f"VALUE = {str(value)!r}\n")
    (cc := tmp_path / "pycc").write_text(WRAPPER)
    cc.chmod(0o755)
    warm = warm.with_env(WARM_CC=str(cc), PYTHONPATH=str(tmp_path / "paths" / "1"))
    source = stepped(3, "STEP_VALUE + 0 * %d").replace(SET_BEFORE, SET_PATH)
    source = f"FOLDERS = {str(tmp_path / 'paths')!r}\n{source}"
    path, bundle = workload_file(source), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [folded([1, 2, 3])]  # cold
    doc = warm.json("run", path, "-b", bundle, "--jobs", "2")
    assert doc["verified"] is True and doc["missing"] == [], doc
    assert warm.production(SERVE, path, bundle=bundle) == [folded([1, 2, 3])]
