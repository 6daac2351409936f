"""stats40: what the inspection commands tell a user, on real bundles.

A pass's autotune table and `--json` count a tune the bundle holds as pending (a GPU-less
pre-build's), kernels of one string template are told apart in `stats`, `diff` and `check`,
and a workload argument warm does not take is said in warm's own line. The real CLI in a
subprocess, the real NVRTC and cc, real bundles.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

TUNED_CUDA = '''
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "cuda"
SRC = r"""extern "C" __global__ void scale(float *x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= F;
}"""
SCALE = Tunable(
    name="scale",
    candidates={f"f{f}": Kernel(SRC, "scale", "Pi", language="cuda", defines={"F": f})
                for f in (2, 3)},
    launch=lambda rt, k, x, n, *, stream=None: rt.launch(k, x, n, grid=1, block=64,
                                                         stream=stream),
)

def workload(rt):
    x = rt.upload(np.ones(64, np.float32))
    rt.tune(SCALE, x, 64)
'''


def _autotune(out: dict) -> list[dict]:
    return [p["autotune"] for p in out["passes"]]


def test_a_pending_tune_in_the_bundle_counts_as_pending(warm: Warm, tmp_path: Path) -> None:
    """`warm run --arch sm_90` twice, GPU-less: the second run's passes reach the tune the
    bundle holds pending, and every pass said `registered 0, pending 0, hits 0`, as if the
    workload tuned nothing. Each pass now registers it, settled `pending` (as a kernel the
    bundle serves is `loaded`); the first run's verify pass likewise."""
    nvrtc_release_or_skip()
    work, bundle = tmp_path / "t.py", tmp_path / "t.warm"
    work.write_text(TUNED_CUDA)
    first = warm.json("run", work, "--arch", "sm_90", "-b", bundle)
    assert first["stored"]["tunes"] == 1
    assert _autotune(first)[-1]["registered"] == 1 and _autotune(first)[-1]["pending"] == 1
    second = warm.json("run", work, "--arch", "sm_90", "-b", bundle)
    for p in second["passes"]:
        a = p["autotune"]
        assert (a["registered"], a["pending"], a["settled"], a["hits"]) == (1, 1, 1, 0), p["mode"]
        assert a["persisted"] == 0 and a["unrecorded"] == 0
    table = warm("run", work, "--arch", "sm_90", "-b", bundle).stdout
    assert table.count(" pending            1") == 3, table


HOST = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "k", "Pi")

def workload(rt):
    rt.launch(K, rt.upload(np.ones(4, np.float32)), 4)
"""


def test_a_workload_option_is_refused_in_warms_own_line(warm: Warm, tmp_path: Path) -> None:
    """`warm run w.py --n 8` said `No such option: --n (Possible options: --entry, --json,
    --nvcc); a workload takes no arguments ...`: Click's suggestions, none of them meant,
    before warm's answer. Now warm's line alone; before the workload, Click's as before."""
    (tmp_path / "w.py").write_text(HOST)
    bundle = tmp_path / "x.warm"
    for command, option in (
        (["run", "w.py", "--n", "8"], "--n"),
        (["run", "w.py", "-b", bundle, "--n=8"], "--n"),
        (["verify", bundle, "--workload", "w.py", "--n", "8"], "--n"),
        (["verify", bundle, "--workload", "w.py", "--pycuda"], "--pycuda"),
    ):
        done = warm(*command, cwd=tmp_path)
        said = done.stderr.strip()
        assert done.returncode == 2 and len(said.splitlines()) == 1, said
        assert "No such option" not in said and "Possible options" not in said, said
        assert said.startswith(f"warm: error: warm {command[0]} takes no {option}"), said
        assert not bundle.exists()
    said = warm("run", "--n", "8", "w.py", cwd=tmp_path).stderr
    assert "No such option: --n (Possible options:" in said, said


TEMPLATED = '''
import numpy as np
import pycuda.gpuarray as gpuarray
import warmcli.pycuda.autoinit  # noqa: F401
from warmcli.pycuda import SourceModule

TEMPLATE = """
__global__ void block_sum(float *out, const float *x, int n)
{
    __shared__ float part[%(block)d];
    const int i = blockIdx.x * %(block)d + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) { float s = 0; for (int j = 0; j < %(block)d; j++) s += part[j];
                            out[blockIdx.x] = s; }
}
"""

def main():
    x = gpuarray.to_gpu(np.ones(1024, np.float32))
    for block in BLOCKS:
        f = SourceModule(TEMPLATE % {"block": block}).get_function("block_sum")
        out = gpuarray.zeros(1024 // block, np.float32)
        f(out, x, np.int32(1024), block=(block, 1, 1), grid=(1024 // block, 1))

if __name__ == "__main__":
    main()
'''


def _kernel_rows(text: str) -> list[list[str]]:
    return [r.split() for r in text.splitlines() if "block_sum" in r]


def test_kernels_of_one_template_are_told_apart(warm: Warm, tmp_path: Path) -> None:
    """A PyCUDA program formatting one source text with three block sizes: `warm stats`
    listed `block_sum` six times (three sm_90, three PTX), and `warm diff` two bundles'
    `block_sum` rows alike, told apart by nothing in diff and only by an 8-digit key in
    stats. Listings where one label stands for several source texts now show a `source`
    column (the digest's head, the same for a source's cubin and PTX), and each kernel's
    `--json` document has `source_sha256` (the digest of the source text warm compiled)."""
    nvrtc_release_or_skip()
    bundles = []
    for name, blocks in (("a", (64, 128, 256)), ("b", (64, 128, 512))):
        work, bundle = tmp_path / f"{name}.py", tmp_path / f"{name}.warm"
        work.write_text(TEMPLATED.replace("BLOCKS", repr(blocks)))
        run = warm("run", work, "--pycuda", "--arch", "sm_90", "-b", bundle, "-q")
        assert run.returncode == 0, run.stderr
        bundles.append(bundle)
    a, b = bundles
    doc = warm.json("stats", a)
    digests = [k["source_sha256"] for k in doc["kernels"]]
    assert len(set(digests)) == 3 and all(len(d) == 64 for d in digests), digests
    rows = _kernel_rows(warm("stats", a).stdout)
    assert "source" in warm("stats", a).stdout
    shown = [r[r.index("block_sum") + 1] for r in rows]
    assert len(rows) == 6 and set(shown) == {d[:8] for d in digests}, rows
    assert shown[:3] == shown[3:], rows  # each source's PTX and cubin in one order
    diff = warm("diff", a, b)
    rows = _kernel_rows(diff.stdout)
    shown = [r[r.index("block_sum") + 1] for r in rows]
    assert len(rows) == 4 and len(set(shown)) == 2, diff.stdout
    assert set(shown) <= {
        k["source_sha256"][:8] for d in (a, b) for k in warm.json("stats", d)["kernels"]
    }
    only_a = warm.json("diff", a, b)["kernels"]["only_a"]
    in_b = {k["source_sha256"] for k in warm.json("stats", b)["kernels"]}
    assert len({k["source_sha256"] for k in only_a} - in_b) == 1, only_a


def test_a_pass_table_in_a_narrow_terminal_stays_three_lists(warm: Warm, tmp_path: Path) -> None:
    """`COLUMNS=60 warm run w.py`: a pass's table (66 cells wide) became 11 records of three
    lines, each `Compilation  registered  6` / `Autotune  registered  3` / `Execution
    executed  0`, the three views' rows interleaved (33 lines a pass, a view's name on
    every one). Now each view is one list under its name, one count a line."""
    (tmp_path / "w.py").write_text(HOST)
    env = dict(warm.env, COLUMNS="60")
    done = Warm(env)("run", tmp_path / "w.py", "-b", tmp_path / "x.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    tables = [ln for ln in lines if not ln.startswith(("bundle ", "verify: "))]  # (unwrapped)
    assert all(len(ln) <= 60 for ln in tables), done.stdout
    passes = sum(ln.startswith("Pass ") for ln in lines)
    assert passes == 3, done.stdout
    for view in ("Compilation", "Autotune", "Execution"):
        assert sum(ln.strip() == view for ln in lines) == passes, done.stdout
        assert not any(ln.startswith(view + " ") for ln in lines), done.stdout
    first = lines[lines.index("Compilation") + 1].split()
    assert first == ["registered", "1"], done.stdout
    assert sum(ln.split()[:1] == ["registered"] for ln in lines) == 2 * passes, done.stdout
    wide = Warm(dict(warm.env, COLUMNS="200"))("run", tmp_path / "w.py", "-b", tmp_path / "y.warm")
    assert " Compilation             Autotune               Execution" in wide.stdout


def test_source_column_only_where_one_device_has_one_label_twice() -> None:
    """Pure logic over fake `kernel_json` documents: `warm diff` of a CUDA bundle and a host
    bundle that both hold `bias_relu` showed a `source` column on every row; one label of two
    sources on different devices is told apart by the device already."""
    from warmcli.cli.render.kernel_columns import kernel_sources

    def doc(device: str, arch: str, source: str) -> dict[str, str]:
        return {"device": device, "arch": arch, "label": "k", "source_sha256": source * 64}

    cuda, host = doc("sm_90", "sm_90", "a"), doc("host", "x86_64", "b")
    assert kernel_sources([cuda, host]) is None
    assert kernel_sources([cuda, host, doc("sm_90", "sm_90", "c")]) == ["a" * 8, "b" * 8, "c" * 8]


FAILING_CANDIDATES = """
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += V; }"

def launch(rt, k, x, n, *, stream=None):
    if k.define("V") == "2":
        raise ValueError("not this one")
    rt.launch(k, x, n, stream=stream)

T = Tunable(name="op", candidates={"good": Kernel(SRC, "k", "Pi", defines={"V": 1}),
                                   "bad": Kernel(SRC, "k", "Pi", defines={"V": "oops("}),
                                   "raises": Kernel(SRC, "k", "Pi", defines={"V": 2})},
            launch=launch)

def workload(rt):
    rt.tune(T, rt.upload(np.ones(4, np.float32)), 4)
"""


def test_a_pass_table_counts_failed_candidates(warm: Warm, tmp_path: Path) -> None:
    """A tune of three candidates, one failing to compile and one whose launch raises: the
    measuring pass's table said `candidates 1` and autotune `failed 0`, the two failed
    candidates nowhere (the raising one not even in a note), though `--json` counts them
    (`candidates_failed`). The row now reads `candidates   1 + 2 failed`."""
    (tmp_path / "w.py").write_text(FAILING_CANDIDATES)
    done = warm("run", tmp_path / "w.py", "-b", tmp_path / "x.warm")
    assert done.returncode == 0, done.stderr
    rows = [
        ln.split("candidates", 1)[1].split()
        for ln in done.stdout.splitlines()
        if "candidates " in ln
    ]
    assert rows[1][:4] == ["1", "+", "2", "failed"], done.stdout
    assert rows[0][:1] == ["0"] and rows[0][1:2] != ["+"], done.stdout  # the CompileOnly pass
