"""Stop 47's differential test of "a bundle serves the bytes a cold compile makes now", for CUDA
without a GPU: a fixed set of `equality_cuda_gen` workloads (NVRTC and nvcc, compile-only for
`sm_90`: the bundle's cubin and PTX of each kernel, after the case's edits, against a cold
`warm run` in a fresh home), and the stale serves its campaign found, each through the real CLI
over a real bundle.

- A header nvcc read through an include folder that `NVCC_PREPEND_FLAGS` or `NVCC_APPEND_FLAGS`
  names (`-I/opt/inc`, or a header it pre-includes, `-include /opt/inc/cfg.h`), edited after
  `warm run`, was served the old cubin: the key followed the kernel's own options only, and the
  variable's text (in nvcc's identity) had not changed. The key now reads those options around
  the kernel's, as nvcc does (`NVCC_PREPEND_FLAGS` before, `NVCC_APPEND_FLAGS` after).
- A header naming `__FILE__` (what a kernel computes may hold its path) copied, the same text,
  into an include folder searched before its own was served the old build: the key held each
  header's name and content and the folders' paths, not where each was found. It does now, for
  such kernels only (those whose folders' paths it keeps).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm, nvcc_or_skip
from equality_cuda_gen import _CLEARED, differences, make_case
from forked_cli import ForkedWarm

NVRTC = pytest.importorskip("warmcli.backends.cuda.nvrtc")

# (seed, compiler, parts): each part of the generator at least once.
FIXED = [
    (1, "nvrtc", ["shadow", "macros", "has_include", "template", "quoted_dir", "computed", "next"]),
    (
        2,
        "nvrtc",
        ["spelled", "symlink", "utime", "options", "pycuda", "relative", "toolkit", "once"],
    ),
    pytest.param(
        3,
        "nvcc",
        ["env_path", "nvcc_flags", "flags_include", "system", "env", "file_header"],
        marks=pytest.mark.nvcc,
    ),
]


@pytest.mark.parametrize(("seed", "compiler", "parts"), FIXED)
def test_a_bundle_serves_the_bytes_a_cold_compile_makes_after_each_edit(
    warm: Warm, tmp_path: Path, seed: int, compiler: str, parts: list[str], forking_servers: Any
) -> None:
    if compiler == "nvcc":
        nvcc_or_skip()
    elif NVRTC.find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    case = make_case(seed, tmp_path, compiler, parts)
    env = {k: v for k, v in warm.env.items() if k not in _CLEARED}
    again = seed == 2  # a cold build before the edits too: the same bytes (once, for time)

    def forked(env: dict[str, str], cwd: Path, args: list[str]) -> Any:
        """Each command a fork of a process that imported the CLI once (one an environment
        apart from WARM_*: `tests/forked_cli.py`), in the workload's folder."""
        return ForkedWarm(Warm(env), forking_servers)(*args, cwd=cwd, timeout=600)

    found = differences(case, dict(env, CUDA_VISIBLE_DEVICES=""), again, forked)
    assert found == [], case.summary


WORKLOAD = """\
from warmcli import Kernel
DEVICE = "cuda"
BODY = 'extern "C" __global__ void {}(int *o) {{ o[0] = V + NCV; }}'
HEADS = {"nfa": "#include <na.h>\\n", "nfb": '#include "nb.h"\\n', "nfc": "#define V 1\\n"}
KS = [Kernel(h + BODY.format(e), e, "P", language="cuda") for e, h in HEADS.items()]
def workload(rt):
    for k in KS:
        rt.launch(k, rt.buffer(1, "int32"), grid=1, block=1)
"""


@pytest.fixture
def forked_warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once."""
    return forked(warm)


@pytest.mark.nvcc
def test_a_header_nvcc_reads_through_nvcc_flags_is_keyed(
    warm: Warm, forked_warm: Any, tmp_path: Path
) -> None:
    """Headers found through `NVCC_PREPEND_FLAGS=-I...`, `NVCC_APPEND_FLAGS=--include-path=...`
    and one it pre-includes (`-include .../nc.h`), each edited in turn (its times put back):
    before, verify called the bundle complete each time, serving the old cubins."""
    nvcc_or_skip()
    headers = {n: tmp_path / n / f"{n}.h" for n in ("na", "nb", "nc")}
    for name, path in headers.items():
        path.parent.mkdir()
        path.write_text(f"#define {'NCV' if name == 'nc' else 'V'} 3\n")
    (tmp_path / "w.py").write_text(WORKLOAD)
    for name in _CLEARED:
        warm.env.pop(name, None)
    warm.env["NVCC_PREPEND_FLAGS"] = f"-I{tmp_path / 'na'}"
    warm.env["NVCC_APPEND_FLAGS"] = f"--include-path={tmp_path / 'nb'} -include {headers['nc']}"
    args = ("--arch", "sm_90", "--compiler", "nvcc")
    bundle = tmp_path / "b.warm"
    run = forked_warm("run", tmp_path / "w.py", *args, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    verify = ("verify", bundle, "--workload", tmp_path / "w.py", *args, "--json")
    same = json.loads(forked_warm(*verify).stdout)
    assert same["verified"] and same["compilation"]["compiled"] == 0, same
    missed: list[str] = []
    for name, entries in (("na", ["nfa"]), ("nb", ["nfb"]), ("nc", ["nfa", "nfb", "nfc"])):
        path = headers[name]
        st = path.stat()
        path.write_text(path.read_text().replace(" 3", " 5"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        missed = sorted({*missed, *entries})
        edited = json.loads(forked_warm(*verify, "--explain-misses").stdout)
        explained = edited["explanations"]
        assert sorted(e["label"] for e in explained) == missed, (name, explained)
        assert {e["reason"] for e in explained} == {"headers"}, explained


FILE_HEADER = "__device__ inline const char *where() { return __FILE__; }\n"
FILE_WORKLOAD = """\
import os
import shutil
from warmcli import Kernel
DEVICE = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel('#include "fh.h"\\nextern "C" __global__ void fh(char *o) {'
           ' const char *s = where(); for (int n = 0; n < 64 && s[n]; n++) o[n] = s[n]; }',
           "fh", "P", language="cuda", options=(f"-I{HERE}/a", f"-I{HERE}/b"))
def workload(rt):
    rt.launch(K, rt.buffer(64, "int8"), grid=1, block=1)
"""


def test_a_copy_of_a_header_naming_its_file_found_in_another_folder_is_a_miss(
    warm: Warm, forked_warm: Any, tmp_path: Path
) -> None:
    """A header whose `__FILE__` a kernel computes with, copied (the same text) into an
    include folder searched before its own: the compiler reads the copy, whose path the cubin
    holds. Before: the key held each header's name and content and the folders' paths, not
    which folder it was found in, so verify called the bundle complete and served the cubin
    naming `b/fh.h`."""
    if NVRTC.find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "b" / "fh.h").write_text(FILE_HEADER)
    (tmp_path / "w.py").write_text(FILE_WORKLOAD)
    args = ("--arch", "sm_90", "--compiler", "nvrtc")
    bundle = tmp_path / "b.warm"
    run = forked_warm("run", tmp_path / "w.py", *args, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    verify = ("verify", bundle, "--workload", tmp_path / "w.py", *args, "--json")
    assert json.loads(forked_warm(*verify).stdout)["verified"]
    shutil.copy2(tmp_path / "b" / "fh.h", tmp_path / "a" / "fh.h")
    edited = json.loads(forked_warm(*verify, "--explain-misses").stdout)
    assert not edited["verified"], "the copy's path is another cubin"
    assert [e["reason"] for e in edited["explanations"]] == ["headers"], edited["explanations"]


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("-Xcompiler -include,{h}", "hands nvcc's host compiler an include folder or header"),
        ("--options-file {o}", "reads options from a file"),
    ],
)
def test_nvcc_flags_that_read_what_no_key_follows_are_refused(
    warm: Warm, forked_warm: Any, tmp_path: Path, flags: str, said: str
) -> None:
    """`NVCC_APPEND_FLAGS` handing nvcc's gcc a header (`-Xcompiler -include,h`) or naming an
    options file: refused in a kernel's options, they were taken from the variable, and an edit
    to the header or the file was served the old cubin (verify: complete). Now the compile
    fails naming the variable, as for a kernel's own option; nothing is stored."""
    nvcc_or_skip()
    header, opts = tmp_path / "nf.h", tmp_path / "opts"
    header.write_text("#define NCV 3\n#define V 1\n")
    opts.write_text(f"-include {header}\n")
    (tmp_path / "w.py").write_text(WORKLOAD.replace("for k in KS:", "for k in KS[2:]:"))
    for name in _CLEARED:
        warm.env.pop(name, None)
    warm.env["NVCC_APPEND_FLAGS"] = flags.format(h=header, o=opts)
    bundle = tmp_path / "b.warm"
    run = forked_warm(
        "run", tmp_path / "w.py", "--arch", "sm_90", "--compiler", "nvcc", "-b", bundle
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0 and said in out and "NVCC_APPEND_FLAGS" in out, out
    assert "Traceback" not in out, out
    if bundle.exists():  # nothing built is stored
        with sqlite3.connect(bundle) as db:
            assert db.execute("SELECT count(*) FROM kernels").fetchone() == (0,)


def test_the_host_key_of_a_header_naming_its_file_follows_a_copy_in_an_earlier_folder(
    tmp_path: Path,
) -> None:
    """The same key code serves host C kernels: a copy of `fh.h` in `a`, searched before `b`,
    is another key (gcc's `__FILE__` names `a/fh.h` now); a header naming no `__FILE__`
    copied so keys alike (its folders' paths are not keyed: a checkout elsewhere still hits)."""
    from warmcli.kernel import Kernel, kernel_key

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    options = (f"-I{tmp_path / 'a'}", f"-I{tmp_path / 'b'}")
    for text, moves in (("#define FH __FILE__\nint fh(void) { return 0; }\n", True),
                        ("#define FH 3\n", False)):  # fmt: skip
        (tmp_path / "b" / "fh.h").write_text(text)
        (tmp_path / "a" / "fh.h").unlink(missing_ok=True)
        src = '#include "fh.h"\nvoid k(int *o) { o[0] = sizeof(FH); }\n'
        kernel = Kernel(src, "k", "P", options=options)
        before = kernel_key(kernel, "x86_64", "cc:test")
        shutil.copy2(tmp_path / "b" / "fh.h", tmp_path / "a" / "fh.h")
        assert (kernel_key(kernel, "x86_64", "cc:test") != before) is moves, text
