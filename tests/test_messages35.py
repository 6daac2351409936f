"""Messages a user meets outside the CLI's own flags say what to do where they are.

A production process (`warmcli.runtime("cuda")`, no GPU here) is told to pre-build with
`warm run ... --arch`, not handed a bare flag it has no command line for. A workload whose
work sits under `if __name__ == "__main__":` (which `warm run` never runs: it imports the
file) is told so, where it defines no entry and where its run did nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.opening import cuda_available


@pytest.mark.skipif(cuda_available(), reason="a GPU is here: the runtime opens it")
def test_a_library_caller_without_a_gpu_is_told_which_command_takes_arch() -> None:
    code = "import warmcli\ntry:\n    warmcli.runtime('cuda')\nexcept Exception as e:\n    print(e)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "give `warm run` (or `warm verify --workload`) the architecture: --arch sm_90" in (
        proc.stdout
    ), proc.stdout


KERNEL = 'from warmcli import Kernel\nK = Kernel("void k(float *x) { x[0] = 1; }", "k", "P")\n'
GUARDED = (
    'if __name__ == "__main__":\n    rt = warmcli.runtime("host")\n    rt.launch(K, rt.buffer(1))\n'
)


def test_work_under_a_main_guard_is_named_where_the_workload_has_no_entry(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "job.py").write_text("import warmcli\n" + KERNEL + GUARDED)
    proc = warm("run", tmp_path / "job.py", "-b", tmp_path / "b.warm")
    assert proc.returncode == 2 and "defines no function workload(runtime)" in proc.stderr
    assert '`if __name__ == "__main__":` block does not run under warm' in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_run_that_did_nothing_names_its_main_guard(warm: Warm, tmp_path: Path) -> None:
    empty = "def workload(rt):\n    pass\n"
    (tmp_path / "job.py").write_text("import warmcli\n" + KERNEL + empty + GUARDED)
    proc = warm("run", tmp_path / "job.py", "-b", tmp_path / "b.warm")
    assert proc.returncode == 0, proc.stderr
    assert "the workload did nothing: its `if __name__" in proc.stdout, proc.stdout
    (tmp_path / "plain.py").write_text("import warmcli\n" + KERNEL + empty)  # no guard: no note
    plain = warm("run", tmp_path / "plain.py", "-b", tmp_path / "b.warm")
    assert plain.returncode == 0 and "__main__" not in plain.stdout, plain.stdout


@pytest.mark.parametrize(
    "command", [("stats",), ("stats", "--json"), ("verify",), ("check", "--arch", "sm_90")]
)
def test_a_path_given_with_a_newline_is_named_on_one_line(
    warm: Warm, tmp_path: Path, command: tuple[str, ...]
) -> None:
    odd = tmp_path / "new\nline.warm"
    odd.write_bytes(b"not a bundle")
    proc = warm(*command, odd)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "new\\x0aline.warm" in proc.stderr, proc.stderr


def test_a_workload_path_with_a_newline_is_named_on_one_line(warm: Warm, tmp_path: Path) -> None:
    proc = warm("run", tmp_path / "no\nsuch.py")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no\\x0asuch.py: no such workload file" in proc.stderr, proc.stderr
