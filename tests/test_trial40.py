"""trial40: two teams adopt warm from the README alone, with workloads it has not seen.

A platform team pre-builds PyCUDA-style bundles in CI for named architectures and merges,
signs and checks them; a data-science team warms messy host workloads (chatty, threaded,
reading its environment, writing files, piped into `head`). The real CLI in a subprocess,
the real cc, real bundles.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

CHATTY = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
SCALE = Kernel("void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }",
               "scale", "Pi")

def workload(rt):
    x = rt.upload(np.ones(8, np.float32))
    rt.launch(SCALE, x, 8)
    for i in range(5000):
        print("step", i, "of a chatty pipeline", flush=True)
"""


def test_chatty_workload_piped_into_a_reader_that_goes_away(warm: Warm, tmp_path: Path) -> None:
    """`warm run w.py | head -1` of a workload that prints a lot: its print meets stdout's
    reader gone, which the README says ends the command with exit 1 and nothing said; it
    was `warm: error: workload raised during CompileOnly: w.py:13: BrokenPipeError` and
    exit 2, blaming the workload for the pipe's reader."""
    work = tmp_path / "chatty.py"
    work.write_text(CHATTY)
    read, write = os.pipe()
    os.close(read)  # the reader gone before the first line (`| head -0`, `| false`)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "warmcli", "run", str(work), "-b", str(tmp_path / "c.warm")],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=warm.env,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (1, "")


BROKEN_OWN_PIPE = """
import os
import numpy as np
from warmcli import Kernel

DEVICE = "host"
SCALE = Kernel("void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }",
               "scale", "Pi")

def workload(rt):
    x = rt.upload(np.ones(8, np.float32))
    rt.launch(SCALE, x, 8)
    r, w = os.pipe()
    os.close(r)
    os.write(w, b"lost")
"""


def test_workload_own_broken_pipe_is_still_its_error(warm: Warm, tmp_path: Path) -> None:
    """A BrokenPipeError of the workload's own pipe (not stdout's) stays a workload error:
    one line naming its line, exit 2."""
    work = tmp_path / "ownpipe.py"
    work.write_text(BROKEN_OWN_PIPE)
    proc = warm("run", work, "-b", tmp_path / "o.warm", "-q")
    assert proc.returncode == 2, proc.stderr
    assert "ownpipe.py:15: BrokenPipeError" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_option_of_the_other_workload_command_is_named_as_warms(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm verify B --workload app.py --pycuda` (the CI team replaying its PyCUDA script as
    it warmed it) was told `a workload takes no arguments (--pycuda): warm runs it with
    sys.argv holding only its path...`: --pycuda is warm run's option, not the script's.
    The line now says verify takes none, and what replays such a script (README: `warm
    verify --workload` takes no `--pycuda`: warm run's own verify pass is the replay);
    likewise one of verify's given to run."""
    work = tmp_path / "app.py"
    work.write_text("def workload(rt):\n    pass\n")
    proc = warm("verify", tmp_path / "b.warm", "--workload", work, "--pycuda")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "warm verify takes no --pycuda (an option of warm run)" in lines[0]
    assert "warm run's own verify pass" in lines[0]
    assert "a workload takes no arguments" not in lines[0]
    proc = warm("run", work, "-b", tmp_path / "r.warm", "--explain-misses")
    assert proc.returncode == 2
    assert "warm run takes no --explain-misses (an option of warm verify)" in proc.stderr
    assert "a workload takes no arguments" not in proc.stderr
    assert not (tmp_path / "r.warm").exists()
    proc = warm("run", work, "-b", tmp_path / "r.warm", "--n", "8")  # the workload's: as before
    assert proc.returncode == 2
    assert "a workload takes no arguments (--n)" in proc.stderr


def test_a_main_of_the_runtime_is_named_by_the_hint(warm: Warm, tmp_path: Path) -> None:
    """`warm run -m dsapp` of a package whose `__main__.py` has `def main(rt=None)` and an
    `if __name__ == "__main__": main()` block was told only to call that code from its
    entry function; `--entry main` (the README's way to name another entry) runs it as it
    is, so the line says so; a `main()` that takes no runtime gets no such hint."""
    package = tmp_path / "dsapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "def main(rt=None):\n    pass\n\nif __name__ == '__main__':\n    main()\n"
    )
    proc = warm("run", "-m", "dsapp", "-b", tmp_path / "d.warm", "-q", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("(or name its main(...) with --entry main)"), proc.stderr
    proc = warm("run", "-m", "dsapp", "--entry", "main", "-b", tmp_path / "d.warm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    work = tmp_path / "noarg.py"
    work.write_text("def main():\n    pass\n\nif __name__ == '__main__':\n    main()\n")
    proc = warm("run", work, "-b", tmp_path / "n.warm", "-q")
    assert proc.returncode == 2
    assert "--entry main" not in proc.stderr
