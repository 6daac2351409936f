"""Review of stop 59's merges (overhead59, the at_once bound, ship59), held to what it found.

A `#include` split by the trigraph line splice `??/` (`#inc??/<newline>lude "v.h"`) is read by
gcc wherever trigraphs are (`-std=c11`, `-trigraphs`): the header walk read it as no include
(its splices are backslashes only), so the kernel's key held no digest of `v.h` and a process
served the bundle after `v.h` was edited ran the old build, where a cold start computes the
new value. `warmcli.directives` now reads a source with `??/` a second way, its trigraph a
backslash (where trigraphs are not read, the first reading stands: both are searched); and
`#pragma on??/<newline>ce`, a once-only header to gcc -std=c11, is a mark `once_copies` reads,
and `__TI??/<newline>ME__`, the clock, leaves its kernel unkeyed (`build_clock`).

`warm run -m app/sub/` (a folder's path, as a shell completes it) was told to give the file
itself, `warm run app/sub/.py` (`app/sub.py` for `-m app/sub`), a file that is not there: the
file is named only where it is one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from warmcli.kernel import Kernel, included_headers

SPLIT = '#inc??/\nlude "v.h"\nvoid k(int *x, int n) { x[0] = V; }\n'

WORKLOAD = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel({source!r}, "k", "Pi", options=("-std=c11", "-I" + {folder!r}))


def workload(rt):
    x = rt.upload(np.zeros(1, dtype=np.int32))
    rt.launch(K, x, 1)
    rt.synchronize()
    return x
"""

DRIVE = """
import runpy, sys
import warmcli
rt = warmcli.runtime("host")
print(int(rt.read(runpy.run_path(sys.argv[1])["workload"](rt))[0]))
"""


def _value(folder: Path, bundle: str) -> int:
    """What the workload computes in a production process served `bundle` ("": cold)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_BUNDLE=bundle, WARM_HOME=str(folder / "home"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", DRIVE, str(folder / "w.py")],
        capture_output=True, text=True, env=env, timeout=300, cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_header_included_through_a_trigraph_splice_is_keyed(tmp_path):
    """Its digest changes with the header (before: the empty walk's, either way)."""
    digests = []
    for value in (1, 2):
        (tmp_path / "v.h").write_text(f"#define V {value}\n")
        kernel = Kernel(SPLIT, "k", "Pi", options=("-std=c11", f"-I{tmp_path}"))
        digests.append(included_headers(kernel))
    assert digests[0] != digests[1]


def test_a_served_process_computes_the_edited_headers_value_as_a_cold_one(warm, tmp_path):
    """The real CLI and gcc: warmed with `V` 1, `v.h` edited to 2: the served process computes
    2 as the cold one does (before: 1, the stored build's)."""
    (tmp_path / "v.h").write_text("#define V 1\n")
    (tmp_path / "w.py").write_text(WORKLOAD.format(source=SPLIT, folder=str(tmp_path)))
    bundle = tmp_path / "b.warm"
    done = warm("run", tmp_path / "w.py", "--bundle", bundle)
    assert done.returncode == 0, done.stderr
    assert _value(tmp_path, str(bundle)) == 1
    (tmp_path / "v.h").write_text("#define V 2\n")
    assert _value(tmp_path, "") == 2
    assert _value(tmp_path, str(bundle)) == 2


@pytest.mark.parametrize("given", ["app/sub/", "app/sub"])
def test_a_folders_path_given_to_m_is_told_no_file_that_is_not_there(
    warm, tmp_path: Path, given: str
) -> None:
    """`warm run -m app/sub/` (a shell completes a folder so), `app/sub` a package: told `-m
    app.sub`, and no file to give (before: `give the file itself (warm run app/sub/.py)`, or
    `app/sub.py`, neither there)."""
    (tmp_path / "app" / "sub").mkdir(parents=True)
    for init in ("app/__init__.py", "app/sub/__init__.py"):
        (tmp_path / init).write_text("")
    warm = warm.with_env(PYTHONPATH=str(ROOT))
    done = warm("run", "-m", given, "-b", tmp_path / "b.warm", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert "-m app.sub)" in line and ".py" not in line, line


# `second` fails at once (a broken `cc --version`) while `first`'s probe runs on past the 10 s
# bound stop 59 gave the wait after a Ctrl-C: then the process ends, as warm does on the error.
FAILED_BESIDE = """
import sys
from warmcli.backends.processes import at_once, probe

def second():
    raise ValueError("cc broke")

try:
    at_once(lambda: probe(["sleep", "11"], 60), second)
except ValueError:
    print("failed")
"""


def test_an_error_beside_a_long_probe_waits_for_it_and_leaves_no_folder(tmp_path: Path) -> None:
    """An error (not a Ctrl-C) is raised once `first` ended, as at_once says: its probe's
    scratch folder is gone (before: raised 10 s on, the probe running still, and the ending
    process left `warm-probe-*` in the temporary folder)."""
    from test_fold59 import probe_folders_left

    assert probe_folders_left(FAILED_BESIDE, tmp_path) == ("failed", [])


def test_a_pragma_once_split_by_a_trigraph_splice_marks_its_copies(tmp_path: Path) -> None:
    """`#pragma on??/<newline>ce` is `#pragma once` to gcc -std=c11: two copies of the header
    are read once where their times are alike, twice where they differ (the real gcc, below),
    so their seconds belong in the key: `once_copies` names them (before: no line, the word
    `once` split and no backslash, so the header was taken as holding no mark)."""
    from warmcli.once_copies import once_copies

    for copy in ("x", "y"):
        (tmp_path / copy).mkdir()
        (tmp_path / copy / "h.h").write_text("#pragma on??/\nce\nint n = __COUNTER__;\n")
    (tmp_path / "t.c").write_text('#include "x/h.h"\n#include "y/h.h"\n')
    read = []
    for second in (1_000_000_000, 1_100_000_000):
        os.utime(tmp_path / "x" / "h.h", (1_000_000_000, 1_000_000_000))
        os.utime(tmp_path / "y" / "h.h", (second, second))
        done = subprocess.run(
            ["cc", "-std=c11", "-E", "-P", "t.c"], cwd=tmp_path, capture_output=True, text=True
        )
        read.append(done.stdout.count("int n ="))
    assert read == [1, 2], read
    reached = {str(tmp_path / c / "h.h"): "same" for c in ("x", "y")}
    assert [line for line in once_copies(reached) if "once" in line], once_copies(reached)


CLOCK_SPLIT = "const char *k(void) { return __TI??/\nME__; }\n"


def test_a_clock_macro_split_by_a_trigraph_splice_is_unkeyed(tmp_path: Path) -> None:
    """`__TI??/<newline>ME__` is `__TIME__` to gcc -std=c11 (the real gcc, below): a build
    reads the clock, so a stored one computes another time than a cold start; the kernel is
    unkeyed (never served), as `__TI\\<newline>ME__` is (before: no reason, the key a hit's)."""
    from warmcli.build_clock import clock_reason

    (tmp_path / "t.c").write_text(CLOCK_SPLIT)
    done = subprocess.run(
        ["cc", "-std=c11", "-E", "-P", "t.c"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "__TI" not in done.stdout and '"' in done.stdout, done.stdout + done.stderr
    assert clock_reason(CLOCK_SPLIT) == "its build reads the clock (__TIME__)"
    assert clock_reason(CLOCK_SPLIT.encode()) == "its build reads the clock (__TIME__)"
    assert clock_reason("x = __DA??/\r\nTE__;") == "its build reads the clock (__DATE__)"
