"""Small user-visible faults found on stop 36, each through the real CLI in a subprocess
(real cc, real SQLite bundles; `--arch sm_90` PyCUDA scripts with real NVRTC):
`warm stats`'s sample of a large bundle's tunes, `warm diff` of a corrupt entry,
`warm run -v -q`, `WARM_STRICT`'s error, `warm run --json`'s `format` of a new bundle,
and PyCUDA scripts' 0-d array arguments and `pycuda.compiler`/`pycuda.tools` names.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

MANY_OPS = r"""
from warmcli import Kernel, Tunable

SOURCE = "void step(float *x, int n) { for (int j = 0; j < n; j++) x[j] = x[j] * 0.5f + V; }"
K = {v: Kernel(SOURCE, "step", "Pi", defines={"V": v}, name="step") for v in (1, 2)}


def _launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)


def _op(name):
    return Tunable(name=name, candidates={f"v{v}": k for v, k in K.items()}, launch=_launch,
                   warmup=0, repeats=1)


OPS = [_op(f"op{i}") for i in range(201)]
WIDE = _op("wide")


def workload(rt):
    x = rt.buffer(128, "float32")
    for op in OPS:
        rt.tune(op, x, 8)
    for n in range(1, 106):
        rt.tune(WIDE, x, n)
"""


def test_stats_samples_a_large_bundles_tunes_with_numbers_sorted_as_numbers(
    warm: Warm, tmp_path: Path
) -> None:
    """The 20 tunes `warm stats` shows of a large bundle were picked in text order
    (op0, op1, op10, op100...) and `--explain`'s first 100 by shape in text order (shape
    `100` before `99`), though numbers sort as numbers everywhere else."""
    script, bundle = tmp_path / "many.py", tmp_path / "many.warm"
    script.write_text(MANY_OPS)
    assert warm("run", script, "-b", bundle, "--quiet").returncode == 0
    proc = warm("stats", bundle)
    assert proc.returncode == 0, proc.stderr
    sample = proc.stdout.split("20 of 306 tunes")[1]
    shown = re.findall(r"^ (op\d+) ", sample, re.M)
    assert shown == [f"op{i}" for i in range(20)], shown
    proc = warm("stats", bundle, "--explain", "wide")
    assert proc.returncode == 0, proc.stderr
    shapes = re.findall(r"^wide float32\[128\] (\d+) ", proc.stdout, re.M)
    assert shapes == [str(n) for n in range(1, 101)], shapes


ONE_KERNEL = r"""
from warmcli import Kernel

K = Kernel("void half(float *x, int n) { for (int j = 0; j < n; j++) x[j] *= 0.5f; }",
           "half", "Pi")


def workload(rt):
    rt.launch(K, rt.buffer(16, "float32"), 16)
"""


def test_run_refuses_verbose_with_quiet_in_one_line(warm: Warm, tmp_path: Path) -> None:
    """`warm run -v -q` printed every compiler command line, though `--quiet` says the
    summary only: the pair contradicts itself, refused before anything runs."""
    script, bundle = tmp_path / "one.py", tmp_path / "one.warm"
    script.write_text(ONE_KERNEL)
    for flags in (("-v", "-q"), ("--quiet", "--verbose")):
        proc = warm("run", script, "-b", bundle, *flags)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "--verbose" in proc.stderr and "--quiet" in proc.stderr, proc.stderr
        assert not bundle.exists()
    proc = warm("run", script, "-b", bundle, "-v")
    assert proc.returncode == 0 and "cc" in proc.stdout, proc.stderr


def test_warm_strict_error_names_every_accepted_value(warm: Warm, tmp_path: Path) -> None:
    """`WARM_STRICT=2` said "must be 1, warn or 0" though true/yes/on/off... are taken too."""
    code = "import warmcli, sys; warmcli.use_bundle(sys.argv[1])"
    env = dict(warm.env, WARM_STRICT="2")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "none.warm")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "WARM_STRICT" in last and "'2'" in last, last
    for word in ("1", "true", "yes", "on", "warn", "0", "false", "no", "off"):
        assert re.search(rf"\b{word}\b", last), (word, last)


def test_run_json_format_before_is_null_for_a_new_bundle(warm: Warm, tmp_path: Path) -> None:
    """`warm run --json` on a brand-new bundle said `"before": 3`: there was none before."""
    script, bundle = tmp_path / "one.py", tmp_path / "one.warm"
    script.write_text(ONE_KERNEL)
    proc = warm("run", script, "-b", bundle, "--json")
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)["format"]
    assert first["before"] is None and first["after"] == 3, first
    proc = warm("run", script, "-b", bundle, "--json")
    assert json.loads(proc.stdout)["format"] == {"before": 3, "after": 3}
    empty = tmp_path / "empty.warm"
    empty.touch()  # as `mktemp` makes it: a new bundle
    proc = warm("run", script, "-b", empty, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["format"]["before"] is None
    proc = warm("run", script, "-b", tmp_path / "plain.warm")
    assert "migrated" not in proc.stdout, proc.stdout


def test_dask_run_json_format_before_is_null_for_a_new_bundle(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    """`warm run --dask` said `"before": 3` of a bundle it made, as a local run did."""
    script, bundle = tmp_path / "one.py", tmp_path / "one.warm"
    script.write_text(ONE_KERNEL)
    for before in (None, 3):
        proc = warm("run", script, "-b", bundle, "--json", "--dask", dask_scheduler)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["format"] == {"before": before, "after": 3}


ZERO_D = r"""
import numpy as np
import pycuda.autoinit
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

# A declaration warm cannot read (a macro): the call's own types are the letters.
HIDDEN = '#define DECL(n) __global__ void n(int *y, int v)\nextern "C" DECL(hidden) { y[0] = v; }'
SEEN = "__global__ void seen(int *y, int v) { y[threadIdx.x] = v; }"


def main():
    y = gpuarray.zeros(64, np.int32)
    hidden = SourceModule(HIDDEN, no_extern_c=True).get_function("hidden")
    hidden(y, np.array(5, np.int32), block=(64, 1, 1))
    seen = SourceModule(SEEN).get_function("seen")
    seen(y, np.array(VALUE), block=(64, 1, 1))
    seen.prepare("Pi")
    seen.prepared_call((1, 1), (64, 1, 1), y.gpudata, np.array(VALUE))
"""


def test_pycuda_0d_array_is_passed_as_the_scalar_it_holds(warm: Warm, tmp_path: Path) -> None:
    """A 0-d numpy array passed for an `int` parameter was refused as "host memory" where
    warm could not read the declaration, and a 0-d float64 array was truncated into an
    `int` parameter where it could (its scalar is refused): PyCUDA packs a 0-d array's
    bytes, as it packs the numpy scalar it holds, so warm takes it as that scalar."""
    pytest.importorskip("warmcli.backends.cuda.nvrtc").find_nvrtc() or pytest.skip("no NVRTC")
    script, bundle = tmp_path / "zero_d.py", tmp_path / "zero_d.warm"
    script.write_text(ZERO_D.replace("VALUE", "6, np.int32"))
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)
    assert proc.returncode == 0, proc.stderr
    assert "stored 4 new kernel(s)" in proc.stdout, proc.stdout  # two, as cubin and PTX
    script.write_text(ZERO_D.replace("VALUE", "2.5"))
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)
    assert proc.returncode == 2, proc.stdout
    assert "seen argument 2: a float64 scalar for a parameter declared int32" in proc.stderr


NOT_STOOD_IN = {
    "tools.py": "import numpy as np\nimport pycuda.autoinit\n"
    "from pycuda.tools import dtype_to_ctype\n\n\ndef main():\n    dtype_to_ctype(np.float32)\n",
    "compile.py": "import pycuda.autoinit\nimport pycuda.compiler\n\n\ndef main():\n"
    '    pycuda.compiler.compile("__global__ void k() {}")\n',
}


def test_pycuda_standin_names_its_real_limit(warm: Warm, tmp_path: Path) -> None:
    """`pycuda.tools.dtype_to_ctype` and `pycuda.compiler.compile` were refused under
    `--arch` "...: it needs a GPU", though neither needs one: the stand-in holds only what
    a pre-build of `SourceModule` launches uses, which is what the line must say."""
    for name, text in NOT_STOOD_IN.items():
        script = tmp_path / name
        script.write_text(text)
        proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "x.warm")
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        said = proc.stderr
        assert "pycuda.tools" in said or "pycuda.compiler.compile" in said, said
        assert "needs a GPU" not in said, said
        assert "SourceModule" in said and "without --arch" in said, said


def _spoil(bundle: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(bundle)) as db:
        for sql in statements:
            db.execute(sql)
        db.commit()


FIRST = "WHERE rowid = (SELECT min(rowid) FROM {})"


def test_diff_counts_an_entry_corrupt_in_either_bundle_only_as_corrupt(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm diff A B` of a copy whose kernel holds `seconds='x'` said "6 kernel(s) ... in
    both" and listed that kernel as corrupt in A too: A cannot serve it, so it is not in
    both (nor counted twice where both hold it corrupt)."""
    a, b = tmp_path / "a.warm", tmp_path / "b.warm"
    host_bundle(a)  # as `warm run EXAMPLE -b a --quiet` makes it
    shutil.copy(a, b)
    orphaned = shutil.copy(a, tmp_path / "orphaned.warm")
    pristine = shutil.copy(a, tmp_path / "pristine.warm")
    whole = json.loads(warm("diff", a, b, "--json").stdout)
    kernels, tunes = whole["kernels"]["shared"], whole["tunes"]["shared"]
    assert kernels >= 2 and tunes >= 2, whole
    _spoil(
        a,
        f"UPDATE kernels SET seconds = 'x' {FIRST.format('kernels')}",
        f"UPDATE tunes SET seconds = 'x' {FIRST.format('tunes')}",
    )
    proc = warm("diff", a, b)
    assert proc.returncode == 1, proc.stderr
    assert f"{kernels - 1} kernel(s) and {tunes - 1} tune(s) in both" in proc.stdout, proc.stdout
    assert "Corrupt in A (2" in proc.stdout, proc.stdout
    _spoil(b, f"UPDATE kernels SET seconds = 'x' {FIRST.format('kernels')}")  # the same one
    doc = json.loads(warm("diff", a, b, "--json").stdout)
    assert (doc["kernels"]["shared"], doc["tunes"]["shared"]) == (kernels - 1, tunes - 1), doc
    assert (doc["corrupt"]["a_count"], doc["corrupt"]["b_count"]) == (2, 1), doc
    _spoil(orphaned, "DELETE FROM blobs WHERE sha256 = (SELECT sha256 FROM kernels LIMIT 1)")
    doc = json.loads(warm("diff", orphaned, pristine, "--json").stdout)
    lost = doc["corrupt"]["a_count"]  # the kernels of that blob's batch
    assert lost >= 1 and doc["kernels"]["shared"] == kernels - lost, doc
