"""A test helper: a seeded generator of CUDA workloads and a differential check, without a GPU,
that the cubin and PTX a bundle would serve for each kernel are the bytes a cold compile makes
now, after the case's edits.

`make_case(seed, folder, compiler)` writes a workload `w.py` (and its headers) into `folder`,
its kernels built by `compiler` (`"nvrtc"` or `"nvcc"`): `equality_gen`'s header parts (several
`-I`/`--include-path` folders, one shadowed later, a symbolic link repointed, a header edited
with its times put back, `#include_next`, a define read from the environment, and for nvcc a
system header whose include an `-I` folder later shadows) turned into `extern "C" __global__`
kernels, and CUDA's own: the predefined macros (`__FILE__`, `__BASE_FILE__`, `__LINE__`,
`__COUNTER__`, `__CUDACC_VER_*`, `__CUDA_ARCH__`), compile options (`-std=`,
`--use_fast_math`, `-lineinfo`, `-G`, `-maxrregcount`, `--extra-device-vectorization`,
`-Xptxas`), `NVCC_APPEND_FLAGS`/`NVCC_PREPEND_FLAGS` (a `-D` they set changed, or a header
they name edited), headers found through `CPATH` or `CPLUS_INCLUDE_PATH` (nvcc), `__device__`
templates called from `extern "C"` kernels, a header added that `__has_include` asks for, a
computed `#include HDR`, a quoted include found beside its includer once a file is added there,
each spelling of an include folder or pre-included header, a header naming `__FILE__` copied,
the same text, into a folder searched before its own, and PyCUDA `SourceModule`s
(`warmcli.pycuda`, bound to the workload's runtime) with `include_dirs` and `-D` options, a
relative include folder (warm runs in the workload's folder), two copies of a `#pragma once`
header given one modification second or two, and (NVRTC) a header only a
system toolkit (`CUDA_HOME`) holds.

`differences(case, env)` runs `warm run W --arch sm_90 -b B` (a random case now and then adds
`--arch sm_80`, builds `sm_90a`, or keeps other PTX: `--no-ptx`, `--ptx=compute_80`), a cold `warm
run` into a fresh bundle in a fresh home (the same bytes are expected: a difference there is a build
that is not reproducible; kernels built with debug information, `-G` or `-lineinfo`, are left out:
README says their bytes name the folder they were built in), applies the edits, runs `warm verify B
--workload W --arch sm_90 --explain-misses` and another cold `warm run` in a fresh home, and returns
each kernel row whose key the cold build shares with `B` but whose bytes differ (a stale serve), and
each kernel verify would serve (named in no miss) whose cold bytes differ from `B`'s. Run it by
hand: `python tests/equality_cuda_gen.py FIRST LAST [nvrtc|nvcc] [PART...]`. Each `warm` command is
started (`started`), or run as `differences`' `cli` says (a test's forks). Owns only its folders.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from equality_gen import PARTS as HOST_PARTS
from equality_gen import ROOT, Case

ARCH = "sm_90"
_TARGETS = [
    ("--arch", ARCH), ("--arch", ARCH), ("--arch", "sm_80", "--arch", ARCH),
    ("--arch", ARCH, "--no-ptx"), ("--arch", ARCH, "--ptx=compute_80"), ("--arch", "sm_90a"),
]  # fmt: skip
WORKLOAD_HEAD = """
import os
import numpy as np
from warmcli import Kernel

DEVICE = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
EK = int(os.environ.get("EQ46_K", "2"))
SPELL = {spell!r}


def inc(*names):
    return tuple(SPELL.format(f"{{HERE}}/{{n}}") for n in names)
"""


def _cuda(defs: str, use: str) -> tuple[str, str]:
    """A host part's kernel as CUDA: its entry `extern "C" __global__`, launched on one thread."""
    defs = re.sub(r"void (\w+\()", r'extern "C" __global__ void \1', defs, count=1)
    defs = defs.replace(", 'P'", ", 'P', language='cuda'", 1)
    use = re.sub(r"rt\.launch\((\w+), b\)", r"rt.launch(\1, b, grid=1, block=1)", use)
    return defs, use


def _host_part(name: str) -> Callable[[random.Random, Path, int, Case], tuple[str, str]]:
    def part(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
        return _cuda(*HOST_PARTS[name](rng, d, i, case))

    part.__doc__ = f"`equality_gen`'s `{name}` part, as a CUDA kernel."
    return part


def _macros(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A kernel writing the predefined macros' values: a path, a line, a counter, CUDA's."""
    text = rng.choice(["__FILE__", "__BASE_FILE__", "__func__"])
    nums = rng.sample(
        ["__LINE__", "__COUNTER__", "__CUDACC_VER_MAJOR__", "__CUDACC_VER_MINOR__",
         "__CUDACC_VER_BUILD__", "__CUDA_ARCH__", "__CUDACC_VER_MAJOR__ * 100 + __LINE__"],
        3,
    )  # fmt: skip
    if case.compiler == "nvrtc":  # type: ignore[attr-defined]  # (NVRTC has no __COUNTER__)
        nums = [n.replace("__COUNTER__", "__LINE__ + 1") for n in nums]
    helper = rng.choice(["", "__device__ int twice(int x) { return 2 * x; }\n"])
    wrap = "twice" if helper else ""
    sets = " ".join(f"out[{60 + 4 * k}] = (char)({wrap}({n}));" for k, n in enumerate(nums))
    src = (
        f'{helper}extern "C" __global__ void mac{i}(char *out) {{ const char *s = {text};'
        f" int n = 0; while (s[n] && n < 59) {{ out[n] = s[n]; n++; }} {sets} }}\n"
    )
    defs = f"MAC{i} = Kernel({src!r}, 'mac{i}', 'P', language='cuda')\n"
    use = f"    rt.launch(MAC{i}, rt.buffer(80, 'int8'), grid=1, block=1)\n"
    return defs, use


_OPTIONS = [
    ("-std=c++17",), ("-std=c++20",), ("--use_fast_math",), ("-lineinfo",), ("-G",),
    ("-maxrregcount=32",), ("--extra-device-vectorization",), ("-Xptxas", "-O1"),
    ("-Xptxas=-v",), ("--ptxas-options=-O2",), ("-DOPT_X=3",),
]  # fmt: skip


def _options(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A float kernel under a few compile options (`-G`, `-lineinfo`, `-Xptxas`, ...)."""
    opts = [o for group in rng.sample(_OPTIONS, rng.randint(1, 3)) for o in group]
    if "-G" in opts:  # ptxas refuses to optimize a debug build ("Optimized debugging")
        opts = [o for o in opts if "-O" not in o and o not in ("-Xptxas", "-Xptxas=-v")]
    src = (
        f'extern "C" __global__ void opt{i}(float *y, const float *x, int n) {{'
        f" int j = blockIdx.x * blockDim.x + threadIdx.x;"
        f" if (j < n) y[j] = __expf(x[j]) / (1.0f + sqrtf(x[j] * x[j] + 0.5f)); }}\n"
    )
    defs = f"OPT{i} = Kernel({src!r}, 'opt{i}', 'PPi', language='cuda', options={tuple(opts)!r})\n"
    use = (
        f"    x = rt.upload(np.linspace(0, 1, 64, dtype=np.float32))\n"
        f"    rt.launch(OPT{i}, rt.buffer(64), x, 64, grid=1, block=64)\n"
    )
    return defs, use


def _add_flags(case: Case, var: str, before: str, after: str | None = None) -> None:
    """`before` added to the words of `var` (`NVCC_APPEND_FLAGS`...) the warming runs with,
    `after` (else `before`) to those of the edited run, beside what other parts added."""
    env_before: dict[str, str] = case.env_before  # type: ignore[attr-defined]
    old_before = env_before.get(var, "")
    old_after = case.env_after.get(var, old_before)
    env_before[var] = f"{old_before} {before}".strip()
    if (after is not None and after != before) or var in case.env_after:
        case.env_after[var] = f"{old_after} {after or before}".strip()


def _nvcc_flags(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`NVCC_APPEND_FLAGS` or `NVCC_PREPEND_FLAGS` defining a macro; the edit changes it."""
    var = rng.choice(["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"])
    _add_flags(case, var, f"-DNVF={rng.randint(1, 40)}", f"-DNVF={rng.randint(41, 90)}")
    src = (
        f"#ifndef NVF\n#define NVF -1\n#endif\n"
        f'extern "C" __global__ void nvf{i}(int *out) {{ out[0] = NVF; }}\n'
    )
    defs = f"NVF{i} = Kernel({src!r}, 'nvf{i}', 'P', language='cuda')\n"
    use = f"    rt.launch(NVF{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _env_path(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header found through `CPATH` or `CPLUS_INCLUDE_PATH` (nvcc's gcc reads them); the edit
    either edits it (times put back) or points the variable at another folder's."""
    var = rng.choice(["CPATH", "CPLUS_INCLUDE_PATH"])
    for n in "ab":
        (d / f"ep{n}{i}").mkdir()
        (d / f"ep{n}{i}" / f"ep{i}.h").write_text(f"#define EPV {rng.randint(10, 99)}\n")
    case.env_before[var] = str(d / f"epa{i}")
    if rng.random() < 0.5:
        case.env_after[var] = str(d / f"epb{i}")
        case.edits.append((f"{var}->epb{i}", lambda d: None))
    else:

        def edit(d: Path) -> None:
            path = d / f"epa{i}" / f"ep{i}.h"
            st = path.stat()
            path.write_text(path.read_text().replace(" EPV ", " EPV 1")[:-2] + "\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

        case.edits.append((f"{var}:edit ep{i}.h", edit))
    src = f'#include <ep{i}.h>\nextern "C" __global__ void ep{i}(int *out) {{ out[0] = EPV; }}\n'
    defs = f"EP{i} = Kernel({src!r}, 'ep{i}', 'P', language='cuda')\n"
    use = f"    rt.launch(EP{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _template(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`extern "C"` kernels calling a `__device__` template of a header-defined width; the
    edit changes the width in the header."""
    (d / f"tp{i}").mkdir()
    (d / f"tp{i}" / "w.h").write_text(f"#define TW {rng.randint(2, 9)}\n")
    src = (
        f'#include "w.h"\ntemplate <typename T, int W> __device__ T comb(T a) {{'
        f" return a * (T)W + (T)1; }}\n"
        f'extern "C" {{\n__global__ void tpf{i}(float *y) {{ y[0] = comb<float, TW>(y[0]); }}\n'
        f"__global__ void tpd{i}(double *y) {{ y[0] = comb<double, TW + 1>(y[0]); }}\n}}\n"
    )

    def edit(d: Path) -> None:
        (d / f"tp{i}" / "w.h").write_text("#define TW 11\n")

    case.edits.append((f"template{i}", edit))
    defs = (
        f"TPF{i} = Kernel({src!r}, 'tpf{i}', 'P', language='cuda', options=inc('tp{i}'))\n"
        f"TPD{i} = Kernel({src!r}, 'tpd{i}', 'P', language='cuda', options=inc('tp{i}'))\n"
    )
    use = (
        f"    rt.launch(TPF{i}, rt.buffer(1, 'float32'), grid=1, block=1)\n"
        f"    rt.launch(TPD{i}, rt.buffer(1, 'float64'), grid=1, block=1)\n"
    )
    return defs, use


def _has_include(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`__has_include("opt.h")` over an `-I` folder that the edit adds `opt.h` to."""
    (d / f"hi{i}").mkdir()
    (d / f"hi{i}" / "base.h").write_text("#define HB 1\n")
    src = (
        f'#include "base.h"\n#if __has_include("opt{i}.h")\n#include "opt{i}.h"\n#else\n'
        f'#define HV -1\n#endif\nextern "C" __global__ void hi{i}(int *out) {{ out[0] = HV; }}\n'
    )

    def edit(d: Path) -> None:
        (d / f"hi{i}" / f"opt{i}.h").write_text(f"#define HV {rng.randint(1, 99)}\n")

    case.edits.append((f"has_include{i}", edit))
    defs = f"HI{i} = Kernel({src!r}, 'hi{i}', 'P', language='cuda', options=inc('hi{i}'))\n"
    use = f"    rt.launch(HI{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _computed(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """`#include HDR`, the name a define (or a macro built by a header); the edit edits the
    header it names, its times put back."""
    (d / f"ci{i}").mkdir()
    (d / f"ci{i}" / f"c{i}.h").write_text(f"#define CV {rng.randint(10, 49)}\n")
    how = rng.choice(["define", "stringize"])
    if how == "define":
        head, kw = f"#include HDR{i}\n", f", defines={{'HDR{i}': '\"c{i}.h\"'}}"
    else:
        head = f"#define S(x) #x\n#define XS(x) S(x)\n#include XS(c{i}.h)\n"
        kw = ""
    src = f'{head}extern "C" __global__ void ci{i}(int *out) {{ out[0] = CV; }}\n'

    def edit(d: Path) -> None:
        path = d / f"ci{i}" / f"c{i}.h"
        st = path.stat()
        path.write_text(path.read_text().replace(" CV ", " CV 9")[:-2] + "\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    case.edits.append((f"computed{i}:{how}", edit))
    defs = f"CI{i} = Kernel({src!r}, 'ci{i}', 'P', language='cuda', options=inc('ci{i}'){kw})\n"
    use = f"    rt.launch(CI{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _quoted_dir(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header in folder `qa` whose `#include "inner.h"` finds `qb`'s; the edit adds one
    beside the including header, which a quoted include searches first."""
    for n in "ab":
        (d / f"q{n}{i}").mkdir()
    (d / f"qa{i}" / "outer.h").write_text('#include "inner.h"\n#define QO (QI + 1)\n')
    (d / f"qb{i}" / "inner.h").write_text(f"#define QI {rng.randint(1, 50)}\n")
    src = f'#include "outer.h"\nextern "C" __global__ void qd{i}(int *out) {{ out[0] = QO; }}\n'

    def edit(d: Path) -> None:
        (d / f"qa{i}" / "inner.h").write_text("#define QI 500\n")

    case.edits.append((f"quoted_dir{i}", edit))
    defs = (
        f"QD{i} = Kernel({src!r}, 'qd{i}', 'P', language='cuda', options=inc('qa{i}', 'qb{i}'))\n"
    )
    use = f"    rt.launch(QD{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


_SPELLINGS = {
    "nvrtc": ["-I{}", "--include-path={}", "--pre-include={}/pre.h", "-include|{}/pre.h"],
    "nvcc": ["-I{}", "--include-path={}", "-isystem|{}",
             "--system-include={}", "-include|{}/pre.h",
             "--pre-include={}/pre.h"],
}  # fmt: skip


def _spelled(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header reached through one of the compiler's spellings of an include folder or a
    pre-included file; the edit edits it, its times put back."""
    spell = rng.choice(_SPELLINGS[case.compiler])  # type: ignore[attr-defined]
    (d / f"sp{i}").mkdir()
    (d / f"sp{i}" / "pre.h").write_text(f"#define SPV {rng.randint(10, 49)}\n")
    opts = tuple(spell.format(d / f"sp{i}").split("|"))
    first = "" if "pre.h" in spell else '#include "pre.h"\n'

    def edit(d: Path) -> None:
        path = d / f"sp{i}" / "pre.h"
        st = path.stat()
        path.write_text(path.read_text().replace(" SPV ", " SPV 9")[:-2] + "\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    case.edits.append((f"spelled{i}:{spell}", edit))
    src = f'{first}extern "C" __global__ void sp{i}(int *out) {{ out[0] = SPV; }}\n'
    defs = f"SP{i} = Kernel({src!r}, 'sp{i}', 'P', language='cuda', options={opts!r})\n"
    use = f"    rt.launch(SP{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _flags_include(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header nvcc reads through `NVCC_APPEND_FLAGS`/`NVCC_PREPEND_FLAGS` (`-I` or
    `-include`), the variable unchanged; the edit edits the header, its times put back."""
    var = rng.choice(["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"])
    (d / f"nf{i}").mkdir()
    (d / f"nf{i}" / f"nf{i}.h").write_text(f"#define NFV {rng.randint(10, 49)}\n")
    how = rng.choice(["-I{}", "--include-path={}", "-include {}/nf{i}.h"])
    _add_flags(case, var, how.format(d / f"nf{i}", i=i))
    first = "" if how.startswith("-include") else f"#include <nf{i}.h>\n"
    src = f'{first}extern "C" __global__ void nf{i}(int *out) {{ out[0] = NFV; }}\n'

    def edit(d: Path) -> None:
        path = d / f"nf{i}" / f"nf{i}.h"
        st = path.stat()
        path.write_text(path.read_text().replace(" NFV ", " NFV 9")[:-2] + "\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    case.edits.append((f"{var}={how}", edit))
    defs = f"NF{i} = Kernel({src!r}, 'nf{i}', 'P', language='cuda')\n"
    use = f"    rt.launch(NF{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _file_header(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header naming `__FILE__` found in a later `-I` folder; the edit copies it, the same
    text, into an earlier folder: the compiler reads the copy, whose path differs."""
    for n in "ab":
        (d / f"fh{n}{i}").mkdir()
    (d / f"fhb{i}" / "fh.h").write_text(
        "__device__ inline const char *fhp() { return __FILE__; }\n#define FH fhp()\n"
    )
    src = (
        f'#include "fh.h"\nextern "C" __global__ void fh{i}(char *out) {{ const char *s = FH;'
        f" int n = 0; while (s[n] && n < 127) {{ out[n] = s[n]; n++; }} }}\n"
    )

    def edit(d: Path) -> None:
        shutil.copy2(d / f"fhb{i}" / "fh.h", d / f"fha{i}" / "fh.h")

    case.edits.append((f"file_header{i}", edit))
    defs = (
        f"FH{i} = Kernel({src!r}, 'fh{i}', 'P', language='cuda', options=inc('fha{i}', 'fhb{i}'))\n"
    )
    use = f"    rt.launch(FH{i}, rt.buffer(128, 'int8'), grid=1, block=1)\n"
    return defs, use


def _pycuda(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A PyCUDA `SourceModule` (`warmcli.pycuda`) with `include_dirs`, `-D` options read from
    the environment, `no_extern_c` templates or not; the edit edits its header (times put
    back) or shadows it in an earlier folder."""
    for n in "ab":
        (d / f"pc{n}{i}").mkdir()
    (d / f"pcb{i}" / "pc.h").write_text(f"#define PV {rng.randint(10, 49)}\n")
    if rng.random() < 0.5:
        src = f'#include "pc.h"\n__global__ void pc{i}(int *o) {{ o[0] = PV * Q; }}\n'
        extra = ""
    else:
        src = (
            f'#include "pc.h"\ntemplate <int N> __device__ int tw() {{ return N * Q; }}\n'
            f'extern "C" __global__ void pc{i}(int *o) {{ o[0] = tw<PV>(); }}\n'
        )
        extra = ", no_extern_c=True"
    if rng.random() < 0.5:

        def edit(d: Path) -> None:
            path = d / f"pcb{i}" / "pc.h"
            st = path.stat()
            path.write_text(path.read_text().replace(" PV ", " PV 9")[:-2] + "\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:

        def edit(d: Path) -> None:
            (d / f"pca{i}" / "pc.h").write_text("#define PV 77\n")

    case.edits.append((f"pycuda{i}", edit))
    options = "[f'-DQ={EK}']"
    if rng.random() < 0.5:  # options=None: PyCUDA's defaults, from the environment
        options = "None"
        _add_flags(case, "PYCUDA_DEFAULT_NVCC_FLAGS", "-DQ=3", f"-DQ={rng.randint(4, 9)}")
    use = (
        f"    from warmcli.pycuda import SourceModule, bound_runtime\n"
        f"    with bound_runtime(rt):\n"
        f"        mod = SourceModule({src!r}, options={options}{extra},"
        f" include_dirs=[f'{{HERE}}/pca{i}', f'{{HERE}}/pcb{i}'])\n"
        f"        mod.get_function('pc{i}')(rt.buffer(1, 'int32'), block=(1, 1, 1), grid=(1, 1))\n"
    )
    return "", use


def _relative(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A relative include folder (`-Irel`, the working folder's: warm runs in the workload's);
    the edit edits its header, its times put back."""
    (d / f"rel{i}").mkdir()
    (d / f"rel{i}" / f"r{i}.h").write_text(f"#define RV {rng.randint(10, 49)}\n")
    spell = rng.choice(["-Irel{i}", "-I./rel{i}", "--include-path=rel{i}", "-I|rel{i}"])
    opts = tuple(spell.format(i=i).split("|"))
    src = f'#include <r{i}.h>\nextern "C" __global__ void rel{i}(int *out) {{ out[0] = RV; }}\n'

    def edit(d: Path) -> None:
        path = d / f"rel{i}" / f"r{i}.h"
        st = path.stat()
        path.write_text(path.read_text().replace(" RV ", " RV 9")[:-2] + "\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    case.edits.append((f"relative{i}:{spell}", edit))
    defs = f"REL{i} = Kernel({src!r}, 'rel{i}', 'P', language='cuda', options={opts!r})\n"
    use = f"    rt.launch(REL{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _toolkit(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """A header only a system toolkit holds (`CUDA_HOME`'s `include`, which warm gives NVRTC
    after the packages'; nvcc's gcc does not read it: NVRTC only); the edit edits it, its times
    put back."""
    inc = d / f"tk{i}" / "include"
    inc.mkdir(parents=True)
    (inc / "cuda_runtime_api.h").write_text("/* a toolkit's mark */\n")
    (inc / f"tk{i}.h").write_text(f"#define TKV {rng.randint(10, 49)}\n")
    case.env_before["CUDA_HOME"] = str(d / f"tk{i}")  # type: ignore[attr-defined]
    src = f'#include <tk{i}.h>\nextern "C" __global__ void tk{i}(int *out) {{ out[0] = TKV; }}\n'

    def edit(d: Path) -> None:
        path = d / f"tk{i}" / "include" / f"tk{i}.h"
        st = path.stat()
        path.write_text(path.read_text().replace(" TKV ", " TKV 9")[:-2] + "\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    case.edits.append((f"toolkit{i}", edit))
    defs = f"TK{i} = Kernel({src!r}, 'tk{i}', 'P', language='cuda')\n"
    use = f"    rt.launch(TK{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


def _once(rng: random.Random, d: Path, i: int, case: Case) -> tuple[str, str]:
    """Two copies of one `#pragma once` header (gcc skips a copy whose text and modification
    second match one it read); the edit gives them one second, or two apart."""
    (d / f"on{i}" / "x").mkdir(parents=True)
    (d / f"on{i}" / "y").mkdir()
    text = "#pragma once\n#ifdef OV\n#define OV2 1\n#else\n#define OV 1\n#endif\n"
    same = rng.random() < 0.5
    for n, t in (("x", 1_600_000_000), ("y", 1_600_000_000 if same else 1_600_000_100)):
        (d / f"on{i}" / n / "h.h").write_text(text)
        os.utime(d / f"on{i}" / n / "h.h", (t, t))

    def edit(d: Path) -> None:
        t = 1_600_000_000 if not same else 1_600_000_100
        os.utime(d / f"on{i}" / "y" / "h.h", (t, t))

    case.edits.append((f"once{i}:{'apart' if same else 'same second'}", edit))
    src = (
        f'#include "x/h.h"\n#include "y/h.h"\n#ifndef OV2\n#define OV2 0\n#endif\n'
        f'extern "C" __global__ void on{i}(int *out) {{ out[0] = OV2; }}\n'
    )
    defs = f"ON{i} = Kernel({src!r}, 'on{i}', 'P', language='cuda', options=inc('on{i}'))\n"
    use = f"    rt.launch(ON{i}, rt.buffer(1, 'int32'), grid=1, block=1)\n"
    return defs, use


PARTS: dict[str, Callable[[random.Random, Path, int, Case], tuple[str, str]]] = {
    **{n: _host_part(n) for n in ("shadow", "symlink", "utime", "env", "next", "system")},
    "macros": _macros, "options": _options, "nvcc_flags": _nvcc_flags, "env_path": _env_path,
    "template": _template, "has_include": _has_include, "computed": _computed,
    "quoted_dir": _quoted_dir, "spelled": _spelled, "flags_include": _flags_include,
    "file_header": _file_header, "pycuda": _pycuda, "relative": _relative, "toolkit": _toolkit,
    "once": _once,
}  # fmt: skip
NVCC_ONLY = {"system", "nvcc_flags", "env_path", "flags_include"}
NVRTC_ONLY = {
    "toolkit"
}  # (a CUDA_HOME without nvcc: nvcc is found elsewhere, reads it not)  # what NVRTC does not read


class CudaCase(Case):
    """A `Case` with the environment the warming ran in (`env_before`) and its compiler."""

    def __init__(self, folder: Path, parts: list[str], compiler: str) -> None:
        super().__init__(folder, parts)
        self.compiler = compiler
        self.env_before: dict[str, str] = {}
        self.summary = ""
        self.targets: tuple[str, ...] = ("--arch", ARCH)  # `warm run`'s arch and PTX options


def make_case(
    seed: int, folder: Path, compiler: str = "nvrtc", parts: list[str] | None = None
) -> CudaCase:
    """A workload of 2 to 5 parts (or those named) written into `folder`."""
    rng = random.Random(seed)
    usable = sorted(p for p in PARTS if p not in (NVRTC_ONLY if compiler == "nvcc" else NVCC_ONLY))
    chosen = parts or rng.sample(usable, rng.randint(2, 5))
    case = CudaCase(folder, chosen, compiler)
    if parts is None:  # another architecture beside sm_90, or other PTX, now and then
        case.targets = rng.choice(_TARGETS)
    spell = rng.choice(["-I{}", "--include-path={}"])
    defs, uses = [], []
    for i, part in enumerate(chosen):
        d, u = PARTS[part](rng, folder, i, case)
        defs.append(d)
        uses.append(u)
    text = (
        WORKLOAD_HEAD.format(spell=spell) + "".join(defs) + "\n\ndef workload(rt):\n    bufs = {}\n"
    )
    (folder / "w.py").write_text(text + ("".join(uses) or "    pass\n"))
    return case


# How a `warm` command is run: `(env, cwd, args)` to its completed process (`started`, or a
# test's forks of a process that imported the CLI once, `tests/forked_cli.py`).
Cli = Callable[[dict[str, str], Path, list[str]], "subprocess.CompletedProcess[str]"]


def started(env: dict[str, str], cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """`python -m warmcli ARGS` started in `env`, in `cwd`."""
    return subprocess.run(
        [sys.executable, "-m", "warmcli", *args], capture_output=True, text=True,
        env=env, timeout=600, cwd=cwd,
    )  # fmt: skip


def _warm(
    env: dict[str, str], *args: object, cli: Cli = started
) -> subprocess.CompletedProcess[str]:
    """`warm ARGS` in `env`, in the workload's folder (its `w.py` the first path argument's)."""
    cwd = next(Path(a).parent for a in args if str(a).endswith("w.py"))
    return cli(env, cwd, [str(a) for a in args])


def rows(bundle: Path) -> dict[str, tuple[str, str, str]]:
    """Each kernel row of `bundle`: key -> (label, arch, sha256 of its blob)."""
    with sqlite3.connect(bundle) as db:
        got = db.execute("SELECT key, label, arch, sha256 FROM kernels").fetchall()
    return {k: (label, arch, sha) for k, label, arch, sha in got}


def debug_labels(bundle: Path) -> set[str]:
    """The labels of `bundle`'s kernels built with debug information (`-G`, `-lineinfo`, `-g`):
    README says their bytes name the folder they were built in (not what they compute)."""
    with sqlite3.connect(bundle) as db:
        got = db.execute("SELECT label, components FROM kernels").fetchall()
    debug = ("-G", "-lineinfo", "--generate-line-info", "-g", "--device-debug")
    return {label for label, c in got if set(json.loads(json.loads(c)["options"])) & set(debug)}


def _cold(
    case: CudaCase, env: dict[str, str], name: str, cli: Cli = started
) -> dict[str, tuple[str, str, str]] | str:
    """A `warm run` in a fresh home into a fresh bundle `name`: its rows, or its error."""
    home = case.folder / f"home-{name}"
    home.mkdir()
    out = case.folder / f"{name}.warm"
    w = case.folder / "w.py"
    proc = _warm(
        dict(env, WARM_HOME=str(home)), "run", w, *_args(case), "--no-verify", "-b", out, "-q",
        cli=cli,
    )  # fmt: skip
    if proc.returncode != 0:
        return f"cold {name} exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
    return rows(out)


def _args(case: CudaCase, run: bool = True) -> tuple[str, ...]:
    """`warm run`'s (`run`) or `warm verify`'s options: the archs, PTX options (run's), compiler."""
    targets = case.targets if run else tuple(t for t in case.targets if "ptx" not in t)
    return (*targets, "--compiler", case.compiler)


def stale(
    served: dict[str, tuple[str, str, str]], cold: dict[str, tuple[str, str, str]]
) -> list[str]:
    """The rows of `cold` whose key `served` holds with other bytes."""
    return [
        f"{label} ({arch}): bundle {served[k][2][:10]} != cold {sha[:10]}"
        for k, (label, arch, sha) in sorted(cold.items())
        if k in served and served[k][2] != sha
    ]


def differences(
    case: CudaCase, env: dict[str, str], again: bool = True, cli: Cli = started
) -> list[str]:
    """Every stale serve of `case` (see the module's doc); `again` False skips the cold build
    before the edits (the check that builds are reproducible); each `warm` command run by
    `cli`."""
    w, bundle = case.folder / "w.py", case.folder / "b.warm"
    env = dict(env, PYTHONPATH=str(ROOT), **case.env_before)
    run = _warm(env, "run", w, *_args(case), "--no-verify", "-b", bundle, "-q", cli=cli)
    if run.returncode != 0:
        return [f"warm run exit {run.returncode}: {run.stderr.strip()[-800:]}"]
    served = rows(bundle)
    found = []
    debug = debug_labels(bundle)  # their bytes differ from build to build (README)
    served = {k: v for k, v in served.items() if v[0] not in debug}
    if again:
        cold0 = _cold(case, env, "cold0", cli)
        if isinstance(cold0, str):
            return [cold0]
        cold0 = {k: v for k, v in cold0.items() if v[0] not in debug}
        found += [f"not reproducible, no edit: {x}" for x in stale(served, cold0)]
        if set(cold0) != set(served):
            found.append(f"cold keys differ with no edit: {sorted(set(cold0) ^ set(served))[:4]}")
    for _, edit in case.edits:
        edit(case.folder)
    after = dict(env, **case.env_after)
    verify = _warm(
        after,
        "verify",
        bundle,
        "--workload",
        w,
        *_args(case, run=False),
        "--json",
        "--explain-misses",
        cli=cli,
    )
    try:
        report = json.loads(verify.stdout)
        complete = bool(report["verified"])
        missed = {e["label"] for e in report["explanations"] if e["kind"] == "kernel"}
    except (ValueError, KeyError):
        return [*found, f"verify exit {verify.returncode}: {verify.stderr.strip()[-600:]}"]
    cold = _cold(case, after, "cold1", cli)
    if isinstance(cold, str):
        return [*found, cold]
    edits = [n for n, _ in case.edits] + sorted(case.env_after)
    found += [f"after {edits}: stale serve: {x}" for x in stale(served, cold)]
    by_label = {(label, arch): sha for label, arch, sha in served.values()}
    for label, arch, sha in sorted(cold.values()):
        if label not in missed and by_label.get((label, arch), sha) != sha:
            found.append(f"after {edits}: verify serves {label} ({arch}), cold built other bytes")
    same = sorted({label for label, _, sha in cold.values() if sha in set(by_label.values())})
    verdict = "complete" if complete else f"misses {sorted(missed)}"
    case.summary = f"verify {verdict}; same bytes after edits: {same}"
    return found


def main(first: int, last: int, compiler: str, parts: list[str] | None = None) -> int:
    bad = 0
    for seed in range(first, last + 1):
        folder = Path(tempfile.mkdtemp(prefix=f"eq47-{compiler}-{seed}-"))
        (folder / "home").mkdir()
        case = make_case(seed, folder, compiler, parts)
        cleared = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        env = dict(cleared, WARM_HOME=str(folder / "home"), CUDA_VISIBLE_DEVICES="")
        found = differences(case, env)
        verdict = "DIFFERS" if found else "ok"
        print(
            f"seed {seed} {compiler} {case.parts} {' '.join(case.targets)}: {verdict};",
            case.summary,
            flush=True,
        )
        for line in found:
            print("   ", line, flush=True)
        bad += bool(found)
        if not found:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print("   ", folder, flush=True)
    return 1 if bad else 0


_CLEARED = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "NVCC_APPEND_FLAGS",
            "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "WARM_BUNDLE", "WARM_CUDA_COMPILER",
            "PYCUDA_DEFAULT_NVCC_FLAGS", "CUDA_HOME", "CUDA_PATH")  # fmt: skip

if __name__ == "__main__":
    compiler = sys.argv[3] if len(sys.argv) > 3 else "nvrtc"
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), compiler, sys.argv[4:] or None))
