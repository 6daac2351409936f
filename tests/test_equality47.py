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
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm, nvcc_or_skip
from equality_cuda_gen import _CLEARED, differences, make_case

NVRTC = pytest.importorskip("warmcli.backends.cuda.nvrtc")

# (seed, compiler, parts): each part of the generator at least once.
FIXED = [
    (1, "nvrtc", ["shadow", "macros", "has_include", "template", "quoted_dir", "computed", "next"]),
    (2, "nvrtc", ["spelled", "symlink", "utime", "options"]),
    pytest.param(
        3,
        "nvcc",
        ["env_path", "nvcc_flags", "flags_include", "system", "env", "file_header"],
        marks=pytest.mark.nvcc,
    ),
]


@pytest.mark.parametrize(("seed", "compiler", "parts"), FIXED)
def test_a_bundle_serves_the_bytes_a_cold_compile_makes_after_each_edit(
    warm: Warm, tmp_path: Path, seed: int, compiler: str, parts: list[str]
) -> None:
    if compiler == "nvcc":
        nvcc_or_skip()
    elif NVRTC.find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    case = make_case(seed, tmp_path, compiler, parts)
    env = {k: v for k, v in warm.env.items() if k not in _CLEARED}
    assert differences(case, dict(env, CUDA_VISIBLE_DEVICES="")) == [], case.summary


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
