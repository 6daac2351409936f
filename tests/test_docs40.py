"""The README's claims that docs40 corrected or added, each run as a new user would run it.

- The README opens with `make demo` and `make test`, in that order.
- A host kernel's options reach cc before its source (`warmcli.backends.host.compiler`:
  `cc -O2 -fPIC -shared OPTIONS -o OUT SOURCE -lm`), so `-L dir -lhelper` alone links
  nothing the kernel asks for under a cc that links as needed (Debian's, Ubuntu's): the
  compile fails, `undefined reference`. The README now says so, and how to link one:
  `-Wl,--no-as-needed` before a shared library, `-Wl,-u,helper` before an archive.
- An exit function's `os._exit(N)` is said in one warning line only where N is neither 0
  nor the run's own code (`warmcli.warming.isolation`: the worker's own exit is that code):
  the README said "a failing code".

Real parts throughout: the CLI in a subprocess, the system C compiler, SQLite bundles.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

LINKED = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('''
float helper(float x);
void twice(float *x, int n) { for (int i = 0; i < n; i++) x[i] = helper(x[i]); }
''', "twice", "Pi", options=OPTIONS)
def workload(rt):
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(K, x, 4)
    return x
"""


def test_the_readme_opens_with_make_demo_then_make_test() -> None:
    text = (ROOT / "README.md").read_text()
    commands = re.findall(r"^make (\w+)", text, flags=re.MULTILINE)
    assert commands[:2] == ["demo", "test"], commands


def _libraries(folder: Path) -> Path:
    """`libhelper.so` and `libhelper_a.a`, each defining `helper` (x * 2), built by cc."""
    folder.mkdir()
    source = folder / "helper.c"
    source.write_text("float helper(float x) { return 2.0f * x; }\n")
    cc = ["cc", "-O2", "-fPIC"]
    subprocess.run([*cc, "-shared", "-o", folder / "libhelper.so", source], check=True)
    subprocess.run([*cc, "-c", "-o", folder / "helper.o", source], check=True)
    subprocess.run(["ar", "rcs", folder / "libhelper_a.a", folder / "helper.o"], check=True)
    return folder


def _as_needed() -> bool:
    """Whether this machine's cc links a shared library only where needed so far."""
    done = subprocess.run(["cc", "-dumpspecs"], capture_output=True, text=True, check=False)
    return "--as-needed" in done.stdout


@pytest.mark.parametrize(
    ("options", "links"),
    [
        ('("-LDIR", "-lhelper")', "as-needed"),  # the README's case before docs40: fails
        ('("-LDIR", "-Wl,--no-as-needed", "-lhelper")', True),
        ('("-LDIR", "-Wl,-u,helper", "-lhelper_a")', True),
    ],
)
def test_a_library_option_links_as_the_readme_says(
    warm: Warm, tmp_path: Path, options: str, links: bool | str
) -> None:
    lib = _libraries(tmp_path / "lib")
    workload = tmp_path / "w.py"
    workload.write_text(LINKED.replace("OPTIONS", options.replace("DIR", str(lib))))
    warm.env = dict(warm.env, LD_LIBRARY_PATH=str(lib))
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    if links == "as-needed":
        if not _as_needed():
            pytest.skip("this cc links every library given it, needed or not")
        assert done.returncode == 2, done.stdout + done.stderr
        assert "undefined reference" in done.stderr and "\n" in done.stderr.strip()
        return
    assert done.returncode == 0, done.stdout + done.stderr


EXITING = """
import atexit, os
from warmcli import Kernel
DEVICE = "host"
atexit.register(lambda: os._exit(CODE))
calls = []
def workload(rt):
    calls.append(1)  # the verify pass's kernel is one no pass before built: a miss, exit 1
    k = Kernel("void k%d(float *x) { x[0] = 1; }" % len(calls), "k%d" % len(calls), "P")
    rt.launch(k, rt.buffer(1))
"""


@pytest.mark.parametrize(("code", "said"), [(1, False), (3, True)])
def test_an_exit_functions_os_exit_of_the_runs_own_code_is_not_said(
    warm: Warm, tmp_path: Path, code: int, said: bool
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(EXITING.replace("CODE", str(code)))
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 1, done.stdout + done.stderr  # the run's code, whatever _exit's
    line = f"the workload's exit functions ended its process with os._exit({code})"
    assert (line in done.stderr) is said, done.stderr
