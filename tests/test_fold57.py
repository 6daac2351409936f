"""Fold 57: one refusal for what cc and nvcc would read from their scratch folder (fold57).

cc and nvcc read a kernel's source in a scratch folder of warm's inside the temporary folder, so
a quoted include climbing out of it (`"../cfg.h"`) is searched in the temporary folder first
(anyone's, no key reads it), then along the `-I` folders the key reads. Two fixes refused part
of it each: one any `#include "../x"` written in the source, whether or not the temporary folder
held the file yet, the other any quoted name (computed ones too: `#include CFG` of
`-DCFG="../cfg.h"`, `#include_next`) only where the file was already there. Between them, a
computed or `#include_next` climbing name the temporary folder did not hold yet was built from
an `-I` folder's file and stored (exit 0), and a `cfg.h` put in the temporary folder later was
what cc read, its build never made again (the key unchanged). Now `warmcli.backends.scratch_reads`
refuses every climbing quoted or read-first name, there or not, and what else a relative name
finds there; a header read first that the working folder holds is given by its path and built.
Real parts: the real CLI warms with the real cc (and nvcc where installed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip

WORKLOAD = """
import os
from warmcli import Kernel
DEVICE = {device!r}
HERE = os.path.dirname(os.path.abspath(__file__))
OPTIONS = tuple(o.replace("HERE", HERE) for o in {options!r})
K = Kernel('''{source}''', "k", "P", options=OPTIONS, language={language!r})
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(K, y, **({{"grid": 1, "block": 1}} if DEVICE == "cuda" else {{}}))
    return [y]
"""
BODY = "#ifndef SCALE\n#define SCALE 2\n#endif\nvoid k(int *y) { y[0] = SCALE; }"
CASES = {  # the source's first line and the kernel's options: `../cfg.h` found along -I only
    "computed include": ("#include CFG", ('-DCFG="../cfg.h"', "-IHERE/inc")),
    "include_next": ('#include_next "../cfg.h"', ("-IHERE/inc",)),
}


def _workload(tmp_path: Path, case: str, device: str) -> Path:
    """A workload in `tmp_path` whose kernel includes `../cfg.h` as `case` does, the file
    found from its `inc` folder only (`tmp_path/cfg.h`, SCALE 4)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "cfg.h").write_text("#define SCALE 4\n")
    first, options = CASES[case]
    body = BODY.replace("void k(", 'extern "C" __global__ void k(') if device == "cuda" else BODY
    language = "cuda" if device == "cuda" else "c"
    text = WORKLOAD.format(
        device=device, options=options, source=f"{first}\n{body}", language=language
    )
    (path := tmp_path / "w.py").write_text(text)
    return path


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("device", ["host", "cuda"])
def test_a_climbing_include_the_temporary_folder_lacks_yet_is_refused(
    warm: Warm, tmp_path: Path, case: str, device: str
) -> None:
    """`#include CFG` (`-DCFG="../cfg.h"`) or `#include_next "../cfg.h"`, found in an `-I`
    folder's parent while the temporary folder held no `cfg.h`: before the fold `warm run`
    built and stored it (exit 0), where a `cfg.h` put in the temporary folder later is what
    cc (or nvcc) reads first, under the same key. Now exit 2, one line naming the include."""
    args: tuple[str, ...] = ()
    if device == "cuda":
        args = ("--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc_or_skip())
    scratch = tmp_path / "tmp"
    scratch.mkdir()  # (holding no cfg.h)
    path = _workload(tmp_path, case, device)
    done = warm.with_env(TMPDIR=str(scratch))("run", path, *args, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
    assert '#include "../cfg.h"' in line and "no kernel key covers" in line, done.stderr


SERVE = """
import json, runpy, sys, warmcli
warmcli.use_bundle(sys.argv[2])
rt = warmcli.runtime("host")
print(json.dumps([int(rt.read(y)[0]) for y in runpy.run_path(sys.argv[1])["workload"](rt)]))
"""


def test_a_climbing_header_read_first_the_working_folder_holds_is_built(
    warm: Warm, tmp_path: Path
) -> None:
    """`-include ../cfg.h` the working folder's parent holds is given cc by its path, as its key
    reads it (only a name left relative is refused): built, stored and served, SCALE 4."""
    (work := tmp_path / "w").mkdir()
    (tmp_path / "cfg.h").write_text("#define SCALE 4\n")
    text = WORKLOAD.format(
        device="host", options=("-include", "../cfg.h"), source=BODY, language="c"
    )
    (path := work / "w.py").write_text(text)
    (scratch := tmp_path / "tmp").mkdir()
    (scratch / "cfg.h").write_text("#define SCALE 3\n")  # (the temporary folder's: not read)
    moved = warm.with_env(TMPDIR=str(scratch))
    done = moved("run", path, "-b", tmp_path / "b.warm", cwd=work)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    served = subprocess.run(
        [sys.executable, work.parent / "serve.py", path, tmp_path / "b.warm"],
        capture_output=True, text=True, env=moved.env, cwd=work, check=False,
    )  # fmt: skip
    assert served.returncode == 0 and served.stdout.strip() == "[4]", served.stderr


@pytest.fixture(autouse=True)
def _serve_script(tmp_path: Path) -> None:
    (tmp_path / "serve.py").write_text(SERVE)
