"""Review of stop 33's changes: what a user or a hostile file hits in them."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_cc_wrapper33 import PRODUCTION, WORKLOAD, _wrapper

# A header no compiler reads a character of (`#if 0`), but every scan of warm's reads:
# each line a literal or an `__has_include(<` that never closes, repeated. A scan that
# retries at each quote (or each `<`) inside the line takes hours on it.
HOSTILE = (
    "#if 0\n"
    + '"\\' * 300_000
    + "\n"
    + "'\\" * 300_000
    + "\n"
    + "__has_include(<" * 60_000
    + "\n#endif\n#define SCALE 2\n"
)
INCLUDING = """import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('#include "hostile.h"\\n/* a comment */\\n'
           'void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= SCALE; }',
           "k", "Pl", options=["-I", {folder!r}])
def workload(rt):
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(K, y, 4)
    return y
"""


def test_a_hostile_header_is_scanned_in_linear_time(warm: Warm, tmp_path: Path) -> None:
    """A header of unclosed literals and `__has_include(<`s (1.7 MB, under the 4 MiB warm
    scans) took hours to key (the scans' regexes were quadratic on it): `warm run` hung."""
    folder = tmp_path / "inc"
    folder.mkdir()
    (folder / "hostile.h").write_text(HOSTILE)
    workload = tmp_path / "w.py"
    workload.write_text(INCLUDING.replace("{folder!r}", repr(str(folder))))
    done = warm("run", workload, "-b", tmp_path / "b.warm", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout


TINY = """import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= 2; }", "k", "Pl")
def workload(rt):
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(K, y, 4)
    return y
"""


def test_a_bundle_named_as_a_folder_s_dot_is_refused(warm: Warm, tmp_path: Path) -> None:
    """`-b out/.` (or WARM_BUNDLE=out/.) names the folder `out` as `out/` does, but a path
    drops the `.`: warm run wrote a bundle file named `out`, as `out/` did before."""
    workload = tmp_path / "w.py"
    workload.write_text(TINY)
    for name in ("out/.", f"{tmp_path}/out2/."):
        done = warm("run", workload, "-b", name, cwd=tmp_path, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1 and "names a folder" in done.stderr, done.stderr
    warm.env["WARM_BUNDLE"] = "out3/."
    done = warm("run", workload, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "WARM_BUNDLE=out3/." in done.stderr, done.stderr
    done = warm("merge", "-o", "out4/.", "nothere.warm", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "names a folder" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.py"]


ZEROS = "0" * 5000  # leading zeros: `int(str)` counts them in its 4,300 digits


def test_a_shard_in_leading_zeros_past_int_s_digits_is_one_line(warm: Warm, tmp_path: Path) -> None:
    """`--shard 0/000...4` (5,000 zeros) passed the digit check (zeros not counted), then
    `int` refused it: a ValueError traceback; so did a launcher's variable so written."""
    workload = tmp_path / "w.py"
    workload.write_text(TINY)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "--shard", f"0/{ZEROS}4", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-300:]
    warm.env.update(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_COUNT=f"{ZEROS}4")
    done = warm("run", workload, "-b", tmp_path / "b.warm", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "SLURM_ARRAY_TASK_COUNT" in done.stderr, done.stderr
    assert not (tmp_path / "b.warm").exists()


def test_a_digit_separator_is_no_quote_to_the_include_scan() -> None:
    """`1'0` (C23, C++14) opened a character literal to the scan, up to the next `'` on its
    line: a `'/*'` after it became a comment's start, hiding the include spliced below it."""
    from warmcli.headers import _includes

    source = b"int x = 1'0 + c('/*');\n#include \\\n\"k.h\"\nint y; /* */\n"
    assert _includes(source) == (("k.h", True),)
    prefixed = b"char c = u8'/*';\n#include \\\n\"u8.h\"\n/* */"  # a literal: no comment
    assert _includes(prefixed) == (("u8.h", True),)


SERVE = """import numpy as np, warmcli
from warmcli import Kernel
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= 2; }", "k", "Pl")
try:
    rt = warmcli.runtime("host")
except warmcli.BundleError as exc:
    print("refused:", exc)
else:
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(K, y, 4)
    print("served", float(rt.read(y)[0]))
"""


def test_a_write_back_into_a_folder_s_name_is_refused(warm: Warm, tmp_path: Path) -> None:
    """WARM_BUNDLE=newdir/ (or newdir/.) with WARM_BUNDLE_WRITE=1: production made a bundle
    file named `newdir` at exit, which `warm run` refuses to since stop 33."""
    import subprocess
    import sys

    (tmp_path / "serve.py").write_text(SERVE)
    for name in ("newdir/", "newdir/."):
        env = {**warm.env, "WARM_BUNDLE": name, "WARM_BUNDLE_WRITE": "1", "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "serve.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"refused: {name}: ends in"), done.stdout
        assert "names a folder" in done.stdout, done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serve.py"]


def test_an_arch_with_a_newline_or_other_digits_is_refused_up_front(
    warm: Warm, tmp_path: Path
) -> None:
    """`--arch $'sm_90\\n'` passed parse_arch (`$` matches before a last newline) and each
    compile failed ('workload raised during CompileAndAutotune ... TuneFailure'); `sm_9٠`
    (an Arabic-Indic zero, which `\\d` and `int` take) alike."""
    workload = ROOT / "examples" / "saxpy_cuda.py"
    for arch in ("sm_90\n", "sm_9\u0660", "compute_90\n"):
        done = warm("run", workload, "-b", tmp_path / "b.warm", "--arch", arch, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "is not a CUDA architecture" in done.stderr, done.stderr
    assert not (tmp_path / "b.warm").exists()


SCALED, READ_SCALED = WORKLOAD, PRODUCTION  # test_cc_wrapper33's: y is the SCALE built with


def test_a_wrapper_s_build_and_a_plain_one_are_never_served_for_each_other(
    warm: Warm, tmp_path: Path
) -> None:
    """A bundle built through WARM_CC=fast-cc (`exec cc -DSCALE=3 "$@"`) served its build to
    a process through plain cc (y 3.0, where its cold start computes 1.0), and a bundle
    built by plain cc served its build to a process through the wrapper (1.0, not 3.0):
    another toolchain's build is served where it runs, and a wrapper changes what it
    builds, as nvcc's options from the environment do."""
    workload = tmp_path / "w.py"
    workload.write_text(SCALED)
    wrapper = _wrapper(tmp_path / "fast-cc", 3)
    through = warm.with_env(WARM_CC=str(wrapper))  # (forked, as warm's)
    wrapped, plain = tmp_path / "wrapped.warm", tmp_path / "plain.warm"
    assert through("run", workload, "-b", wrapped, "-q", timeout=120).returncode == 0
    assert warm("run", workload, "-b", plain, "-q", timeout=120).returncode == 0
    assert warm.production(READ_SCALED, workload, bundle=wrapped) == {"y": 1.0, "compiled": 1}
    assert through.production(READ_SCALED, workload, bundle=plain) == {"y": 3.0, "compiled": 1}
    assert through.production(READ_SCALED, workload, bundle=wrapped) == {"y": 3.0, "compiled": 0}
