"""A user's many small host kernels give the same numbers cold, warmed and served.

Real `warm run` (its verify pass writes what the kernels computed), a real cold production
process (no bundle: every kernel compiled on its first launch, alone) and a real hit
(`WARM_BUNDLE`), each a process of its own forked from one that imported the CLI, or numpy
and warmcli, once (`tests/forked_cli.py`), real cc: each must write the same numbers,
whatever macro the compiler was given (`-DSCALE=2`, `-include cfg.h`, a wrapper script's
flag) that one kernel redefines or undoes. And the launch path's bad input (a K&R or
`static` entry, an unexported one, GPU memory wrapped on the host, 1,025 parameters, `-x
c++`, a byte-swapped PyCUDA array, a thread's wrong launch) is said in one line, never a
traceback, never silent garbage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Runs the workload file argv[1] as a production process would (cold without a bundle,
# served with `WARM_BUNDLE`); the workload writes its numbers to argv[2].
SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
module["workload"](warmcli.runtime("host"))
print(json.dumps({"misses": len(warmcli.report().misses)}))
"""

OPTION_MACROS = r"""
import json, os
from warmcli import Kernel
DEVICE = "host"
OUT = os.environ["WARM_TEST_L35_OUT"]
D = ("-DSCALE=2",)
PRE = ("-include", os.environ["WARM_TEST_L35_CFG"])  # it defines SCALE 2
IFDEF = "void {0}(double *o) {{\n#ifdef {1}\n o[0] = {1};\n#else\n o[0] = -1;\n#endif\n}}"
KERNELS = {
    # each group: a kernel naming the option's macro itself, then two that only read it
    "a": Kernel("void a(double *o) { o[0] = SCALE; }", "a", "P", options=D, defines={"SCALE": 5}),
    "b": Kernel(IFDEF.format("b", "SCALE"), "b", "P", options=D),
    "a2": Kernel("#undef SCALE\n#define SCALE 7\nvoid a2(double *o) { o[0] = SCALE; }", "a2", "P",
                 options=D),
    "c": Kernel(IFDEF.format("c", "SCALE"), "c", "P", options=D),
    "p": Kernel("void p(double *o) { o[0] = SCALE; }", "p", "P", options=PRE,
                defines={"SCALE": 5}),
    "q": Kernel(IFDEF.format("q", "SCALE"), "q", "P", options=PRE),
    "r": Kernel(IFDEF.format("r", "SCALE"), "r", "P", options=PRE),
}
def workload(rt):
    out = {}
    for name, kernel in KERNELS.items():
        o = rt.buffer(1, "float64")
        rt.launch(kernel, o)
        out[name] = float(rt.read(o)[0])
    with open(OUT, "w") as f:
        json.dump(out, f)
"""
OPTION_MACROS_WANT = {
    "a": 5.0, "b": 2.0, "a2": 7.0, "c": 2.0, "p": 5.0, "q": 2.0, "r": 2.0,
}  # fmt: skip


def _cold_warm_hit(
    warm: Warm, tmp_path: Path, source: str, env: dict[str, str], misses: int
) -> tuple[dict, dict, dict]:
    """What the workload `source` wrote cold, under `warm run` (its verify pass) and served
    from the bundle `warm run` made."""
    workload = tmp_path / "w.py"
    workload.write_text(source)
    bundle = tmp_path / "b.warm"
    seen = []
    for step in ("cold", "warm", "hit"):
        out = tmp_path / f"{step}.json"
        warm.env.update(env, WARM_TEST_L35_OUT=str(out))
        if step == "warm":
            done = warm("run", workload, "-b", bundle, "-q", "--allow-discarded-reads", "-j", "1")
            assert done.returncode == 0, done.stderr
        else:
            served = warm.production(SERVE, workload, bundle=bundle if step == "hit" else None)
            assert served["misses"] == (0 if step == "hit" else misses)
        seen.append(json.loads(out.read_text()))
    return seen[0], seen[1], seen[2]


def test_a_kernel_naming_its_options_macro_never_takes_it_from_its_neighbours(
    warm: Warm, tmp_path: Path
) -> None:
    cfg = tmp_path / "cfg.h"
    cfg.write_text("#define SCALE 2\n")
    cold, warmed, hit = _cold_warm_hit(
        warm,
        tmp_path,
        OPTION_MACROS,
        {"WARM_TEST_L35_CFG": str(cfg)},
        misses=len(OPTION_MACROS_WANT),
    )
    assert cold == OPTION_MACROS_WANT
    assert warmed == cold
    assert hit == cold


if __name__ == "__main__":  # (run alone: python tests/test_launch35.py)
    sys.exit("run with pytest")


WRAP_ON_HOST = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
PUT = Kernel("void put(double *o, int n) { o[0] = n; }", "put", "Pi")
class Interfaced:  # memory that says it is a GPU's (as CuPy's and torch's arrays do)
    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3}
def workload(rt):
    w = rt.wrap(Interfaced(np.zeros(2)))
    rt.launch(PUT, w, 5)
"""


def test_rt_wrap_on_the_host_is_refused_in_the_first_pass_in_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """`rt.wrap` of GPU memory on the host runtime made a `Buffer` the discarding passes
    launched on but the host could not: `warm run` passed two passes to fail the verify
    pass's launch with `must be a buffer on host, got Buffer(host, ...)`, and a production
    process's `rt.read` of it read its pointer as the data. It is refused where it is made."""
    workload = tmp_path / "w.py"
    workload.write_text(WRAP_ON_HOST)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "during CompileOnly" in line, line
    assert "rt.wrap" in line and "host" in line and "rt.upload" in line, line
    cold = subprocess.run(
        [sys.executable, "-c", SERVE, workload], capture_output=True, text=True,
        env=warm.env, timeout=120,
    )  # fmt: skip
    assert cold.returncode == 1 and "ArgumentError: rt.wrap" in cold.stderr, cold.stderr


ONE_KERNEL = """
import json, os
from warmcli import Kernel
DEVICE = "host"
K = Kernel(os.environ["WARM_TEST_L35_SOURCE"], "put", os.environ["WARM_TEST_L35_PARAMS"])
def workload(rt):
    o = rt.buffer(1, "float64")
    rt.launch(K, o, 2.5 if "f" in K.params or "d" in K.params else 7)
    with open(os.environ["WARM_TEST_L35_OUT"], "w") as f:
        json.dump(rt.read(o).tolist(), f)
"""


def test_an_entry_whose_definition_declares_no_parameter_types_is_refused_named(
    warm: Warm, tmp_path: Path
) -> None:
    """An old-style (K&R) entry, `void put(o, n) double *o; float n; {...}`, takes its
    parameters promoted (a float as a double) and no call checks their count: its letters
    passed every check, and `put(o, 2.5f)` through ctypes wrote 0.0 cold, warmed and served
    alike, silently. So did `void put() {...}` for any letters. Both now fail the kernel's
    compile, named, as a mismatch of its letters does."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE_KERNEL)
    cases = {
        "void put(o, n) double *o; float n; { o[0] = n; }": ("Pf", "old-style"),
        "void put(o, n)\n  double *o;\n  int n;\n{ o[0] = n; }": ("Pi", "old-style"),
        "void put() { }": ("Pi", "2 letter(s) for 0 declared parameter(s)"),
    }
    for i, (source, (params, said)) in enumerate(cases.items()):
        warm.env.update(
            WARM_TEST_L35_SOURCE=source,
            WARM_TEST_L35_PARAMS=params,
            WARM_TEST_L35_OUT=str(tmp_path / "o.json"),
        )
        done = warm("run", workload, "-b", tmp_path / f"b{i}.warm", "-q", "--allow-discarded-reads")
        assert done.returncode == 2, (source, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    # a prototype's definition, `put(void)` and a parameterless `put()` without letters build
    fine = {
        "void put(double *o, float n) { o[0] = n; }": ("Pf", [2.5]),
        "void put(double *o, int n);\nvoid put(double *o, int n) { o[0] = n; }": ("Pi", [7.0]),
    }
    for i, (source, (params, want)) in enumerate(fine.items()):
        warm.env.update(
            WARM_TEST_L35_SOURCE=source,
            WARM_TEST_L35_PARAMS=params,
            WARM_TEST_L35_OUT=str(tmp_path / "o.json"),
        )
        done = warm("run", workload, "-b", tmp_path / f"f{i}.warm", "-q", "--allow-discarded-reads")
        assert done.returncode == 0, (source, done.stderr)
        assert json.loads((tmp_path / "o.json").read_text()) == want


def test_a_static_entry_fails_its_compile_named(warm: Warm, tmp_path: Path) -> None:
    """`static void put(...)` exports no function: it compiled, was stored in the bundle (a
    build `warm check` calls unusable) and failed at load with `binary has no symbol
    warm_4491fcb351231246_put for kernel put`, warm's internal name. It fails its compile
    now, named, as an entry the source does not define does."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE_KERNEL)
    source = "static void put(double *o, int n) { o[0] = n; }"
    warm.env.update(
        WARM_TEST_L35_SOURCE=source,
        WARM_TEST_L35_PARAMS="Pi",
        WARM_TEST_L35_OUT=str(tmp_path / "o.json"),
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q", "--allow-discarded-reads")
    assert done.returncode == 2, done.stderr
    assert "its entry 'put' is defined static" in done.stderr, done.stderr
    assert "no symbol" not in done.stderr and "Traceback" not in done.stderr


def test_an_entry_the_binary_does_not_export_fails_its_compile_named(
    warm: Warm, tmp_path: Path
) -> None:
    """An `inline` entry (C99: no external definition) or one hidden by
    `-fvisibility=hidden` built, then failed at load with `DeviceError: binary has no symbol
    warm_005b53bf42ade307_put for kernel put`, warm's internal name, in the pass after the
    build. The build is checked for the entry's symbol: the kernel fails its compile, named."""
    workload = tmp_path / "w.py"
    workload.write_text(
        ONE_KERNEL.replace(
            '"put", os.environ["WARM_TEST_L35_PARAMS"]',
            '"put", "Pi", options=tuple(os.environ["WARM_TEST_L35_OPTS"].split())',
        )
    )
    cases = {
        ("inline void put(double *o, int n) { o[0] = n; }", ""),
        ("void put(double *o, int n) { o[0] = n; }", "-fvisibility=hidden"),
        ('__attribute__((visibility("hidden"))) void put(double *o, int n) { o[0] = n; }', ""),
    }
    for i, (source, options) in enumerate(sorted(cases)):
        warm.env.update(
            WARM_TEST_L35_SOURCE=source,
            WARM_TEST_L35_OPTS=options,
            WARM_TEST_L35_OUT=str(tmp_path / "o.json"),
        )
        done = warm("run", workload, "-b", tmp_path / f"b{i}.warm", "-q", "--allow-discarded-reads")
        assert done.returncode == 2, (source, done.stderr)
        assert "its entry 'put' is not exported" in done.stderr, done.stderr
        assert "no symbol" not in done.stderr and "Traceback" not in done.stderr
    fine = '__attribute__((visibility("default"))) void put(double *o, int n) { o[0] = n; }'
    warm.env.update(WARM_TEST_L35_SOURCE=fine, WARM_TEST_L35_OPTS="-fvisibility=hidden")
    done = warm("run", workload, "-b", tmp_path / "fine.warm", "-q", "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "o.json").read_text()) == [7.0]


MANY = """
from warmcli import Kernel
DEVICE = "host"
N = {n}
SRC = "void many(" + ", ".join(f"int a{{i}}" for i in range(N)) + ") {{ }}"
K = Kernel(SRC, "many", "i" * N)
def workload(rt):
    rt.launch(K, *range(N))
"""


def test_a_host_kernel_of_more_parameters_than_ctypes_passes_is_refused_where_made(
    warm: Warm, tmp_path: Path
) -> None:
    """ctypes calls a function of at most 1,024 arguments: a host kernel of 1,025 compiled
    under `warm run`, then failed its load with ctypes' `ArgumentError: _argtypes_ has too
    many arguments (1026)...`, and a production process's launch raised it from ctypes. The
    `Kernel` is refused where it is made, named, as its `e` letter is."""
    for n, code in ((1024, 0), (1025, 2)):
        workload = tmp_path / f"w{n}.py"
        workload.write_text(MANY.format(n=n))
        done = warm("run", workload, "-b", tmp_path / f"b{n}.warm", "-q")
        assert done.returncode == code, done.stderr
        if code:
            line = done.stderr.strip()
            assert "\n" not in line and "failed to import" in line, line
            assert "kernel many: 1025 parameters" in line and "1024" in line, line


WRAPPED_CC_MACRO = r"""
import json, os
from warmcli import Kernel
DEVICE = "host"
IFDEF = "void {0}(double *o) {{\n#ifdef SCALE\n o[0] = SCALE;\n#else\n o[0] = -1;\n#endif\n}}"
KERNELS = {
    "a": Kernel("void a(double *o) { o[0] = SCALE; }", "a", "P", defines={"SCALE": 5}),
    "b": Kernel(IFDEF.format("b"), "b", "P"),
    "a2": Kernel("#undef SCALE\n#define SCALE 7\nvoid a2(double *o) { o[0] = SCALE; }", "a2", "P"),
    "c": Kernel(IFDEF.format("c"), "c", "P"),
}
def workload(rt):
    out = {}
    for name, kernel in KERNELS.items():
        o = rt.buffer(1, "float64")
        rt.launch(kernel, o)
        out[name] = float(rt.read(o)[0])
    with open(os.environ["WARM_TEST_L35_OUT"], "w") as f:
        json.dump(out, f)
"""


def test_a_macro_the_c_compiler_wrapper_sets_reaches_every_kernel_of_a_shared_unit(
    warm: Warm, tmp_path: Path
) -> None:
    """A C compiler that is a wrapper script adding `-DSCALE=2` (no option of the kernels
    says so): a kernel defining SCALE itself undid it for the kernels after it in a shared
    unit (-1 where a cold start computed 2). Each C kernel's section now saves and restores
    the macros it names (`#pragma push_macro`/`pop_macro`)."""
    wrapper = tmp_path / "mycc"
    wrapper.write_text('#!/bin/sh\nexec cc -DSCALE=2 "$@"\n')
    wrapper.chmod(0o755)
    want = {"a": 5.0, "b": 2.0, "a2": 7.0, "c": 2.0}
    cold, warmed, hit = _cold_warm_hit(
        warm, tmp_path, WRAPPED_CC_MACRO, {"WARM_CC": str(wrapper)}, misses=len(want)
    )
    assert cold == want
    assert warmed == cold
    assert hit == cold


PYCUDA_IN = """
import os
import numpy as np
import pycuda.driver as drv
import warmcli.pycuda.autoinit  # noqa: F401
from warmcli.pycuda import SourceModule
mod = SourceModule("__global__ void f(float *d, const float *a) { d[0] = a[0]; }")
f = mod.get_function("f")
def workload(rt):
    d, a = np.zeros(4, np.float32), np.ones(4, np.float32)
    f(drv.Out(d), drv.In(a.astype(os.environ["WARM_TEST_L35_DTYPE"])), block=(1, 1, 1))
"""


def test_a_pycuda_array_of_the_other_byte_order_is_refused_named(
    warm: Warm, tmp_path: Path
) -> None:
    """`drv.In(a.astype('>f4'))` copied the array's bytes as they are: a `float *` kernel
    read byte-swapped floats (1.0 as 4.6e-41), silently. It is refused, named, as a
    non-contiguous array is; a native one builds."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    workload = tmp_path / "w.py"
    workload.write_text(PYCUDA_IN)
    swapped = ">f4" if sys.byteorder == "little" else "<f4"
    for dtype, code in ((swapped, 2), ("=f4", 0)):
        warm.env["WARM_TEST_L35_DTYPE"] = dtype
        done = warm(
            "run", workload, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q",
            "--allow-discarded-reads",
        )  # fmt: skip
        assert done.returncode == code, done.stderr
        if code:
            line = done.stderr.strip()
            assert "\n" not in line and "byte order" in line, line


def test_a_numpy_array_passed_as_device_memory_is_told_what_to_pass(
    warm: Warm, tmp_path: Path
) -> None:
    """The one-line error for a bare numpy array where a PyCUDA kernel takes device memory
    stopped mid-sentence (`... or an object with __cuda_array_interface__ is`)."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    workload = tmp_path / "w.py"
    workload.write_text(
        PYCUDA_IN.replace('drv.In(a.astype(os.environ["WARM_TEST_L35_DTYPE"]))', "a")
    )
    done = warm("run", workload, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q")
    line = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in line, line
    assert line.endswith("is needed (a numpy array: drv.In/Out/InOut, or rt.upload)"), line


THREAD_RAISES = """
import threading
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void put(double *o, int n) { o[0] = n; }", "put", "Pi")
def workload(rt):
    o = rt.buffer(1, "float64")
    t = threading.Thread(target=lambda: rt.launch(K, o, 2**40, stream=rt.stream()), name="feeder")
    t.start()
    t.join()
    rt.launch(K, o, 1)
"""


def test_a_wrong_launch_in_a_thread_the_workload_outlives_is_one_line_not_a_traceback(
    warm: Warm, tmp_path: Path
) -> None:
    """A thread's uncaught `LaunchError` went to Python's own hook: `warm run` printed three
    tracebacks of warm's frames (one per pass) and called the bundle complete. The workload
    outlives it, as under Python, so the run still passes; each pass names it in one line."""
    workload = tmp_path / "w.py"
    workload.write_text(THREAD_RAISES)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "launch_args.py" not in out, out
    flat = " ".join(out.split())  # (a long note may wrap)
    assert flat.count("thread feeder raised during") == 3, out
    assert "thread feeder raised during CompileOnly, and the workload went on without it" in flat
    assert flat.count("w.py:8: LaunchError: kernel put: argument 2") == 3, out


NVCC_ENV_MACRO = """
from warmcli import Kernel
DEVICE = "cuda"
IFDEF = ('extern "C" __global__ void {0}(float *o) {{\\n#ifdef SCALE\\n o[0] = SCALE + 0.25f;\\n'
         '#else\\n o[0] = -1.75f;\\n#endif\\n}}')
KERNELS = [Kernel('extern "C" __global__ void a(float *o) { o[0] = SCALE; }', "a", "P",
                  language="cuda", defines={"SCALE": 5})]
KERNELS += [Kernel(IFDEF.format(e), e, "P", language="cuda") for e in ("b", "c")]
def workload(rt):
    o = rt.buffer(1)
    for kernel in KERNELS:
        rt.launch(kernel, o)
"""


def test_a_macro_nvcc_takes_from_its_environment_reaches_every_kernel_of_a_shared_unit(
    warm: Warm, tmp_path: Path
) -> None:
    """`NVCC_APPEND_FLAGS=-DSCALE=2`: a CUDA kernel defining SCALE itself undid it for the
    kernels after it in a shared nvcc unit, so their cubins stored -1.75 where each built
    alone stores 2.25 (NVRTC knows no `#pragma push_macro` to put it back): such a kernel
    is compiled alone."""
    import sqlite3
    import struct

    from conftest import nvcc_or_skip

    nvcc_or_skip()
    workload = tmp_path / "w.py"
    workload.write_text(NVCC_ENV_MACRO)
    bundle = tmp_path / "b.warm"
    warm.env["NVCC_APPEND_FLAGS"] = "-DSCALE=2"
    done = warm(
        "run", workload, "--arch", "sm_90", "--compiler", "nvcc", "-j", "1", "-b", bundle, "-q"
    )
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(bundle) as db:
        blobs = [bytes(row[0]) for row in db.execute("SELECT data FROM blobs")]
    assert any(struct.pack("<f", 2.25) in blob for blob in blobs)
    assert not any(struct.pack("<f", -1.75) in blob for blob in blobs)


def test_a_note_said_many_times_in_a_pass_is_one_line_with_its_count(
    warm: Warm, tmp_path: Path
) -> None:
    """A workload reading a result after each of its 40 launches under
    `--allow-discarded-reads` printed 80 identical notes (40 a discarding pass)."""
    workload = tmp_path / "w.py"
    workload.write_text(
        "from warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void put(double *o, int n) { o[0] = n; }', 'put', 'Pi')\n"
        "def workload(rt):\n    o = rt.buffer(1, 'float64')\n"
        "    for i in range(40):\n        rt.launch(K, o, i)\n        rt.read(o)\n"
    )
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q", "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if "note: read of Buffer" in line]
    assert len(notes) == 2 and all(n.endswith("(40 times)") for n in notes), done.stdout


def test_c_kernels_with_option_macros_still_share_a_unit_cuda_ones_go_alone() -> None:
    """C puts back what a kernel's section undoes (`#pragma pop_macro`), so a C kernel whose
    options set a macro it defines itself still shares a unit (one cc process for many);
    CUDA (NVRTC knows no `pop_macro`) compiles it alone. One whose options read a header
    first is alone in C too since build recipe 4 (its `static int counter;` would be one
    object for the unit's kernels)."""
    from warmcli import Kernel
    from warmcli.backends.sharing import shares_unit

    c = "void a(double *o) { o[0] = SCALE; }"
    cu = 'extern "C" __global__ void a(float *o) { o[0] = SCALE; }'
    for options in (("-DSCALE=2",), ("-include", "cfg.h")):
        shared = shares_unit(Kernel(c, "a", "P", options=options, defines={"SCALE": 5}))
        assert shared == (options == ("-DSCALE=2",))
        cuda = Kernel(cu, "a", "P", language="cuda", options=options, defines={"SCALE": 5})
        assert not shares_unit(cuda)
    plain = Kernel(cu, "a", "P", language="cuda", options=("-DOTHER=1",), defines={"SCALE": 5})
    assert shares_unit(plain)


def test_a_host_kernel_option_that_compiles_another_language_is_named(
    warm: Warm, tmp_path: Path
) -> None:
    """`options=("-x", "c++")` made cc read the kernel as C++, where warm's C signature probe
    cannot compile: the error blamed the source (`does not compile to its end (a brace,
    comment or string left open?)`). The option is named."""
    workload = tmp_path / "w.py"
    workload.write_text(
        ONE_KERNEL.replace(
            '"put", os.environ["WARM_TEST_L35_PARAMS"]',
            '"put", "Pi", options=tuple(os.environ["WARM_TEST_L35_OPTS"].split())',
        )
    )
    source = "void put(double *o, int n) { o[0] = n; }"
    for i, options in enumerate(("-x c++", "-xc++", "-x assembler")):
        warm.env.update(
            WARM_TEST_L35_SOURCE=source,
            WARM_TEST_L35_OPTS=options,
            WARM_TEST_L35_OUT=str(tmp_path / "o.json"),
        )
        done = warm("run", workload, "-b", tmp_path / f"b{i}.warm", "-q", "--allow-discarded-reads")
        assert done.returncode == 2, done.stderr
        assert "reads the kernel as another language" in done.stderr, done.stderr
        assert "brace" not in done.stderr
    warm.env.update(WARM_TEST_L35_OPTS="-x c")
    done = warm("run", workload, "-b", tmp_path / "c.warm", "-q", "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
