"""review41g: a `--dask` re-run's seeds and a pending tune's kernels (a4d3389's trade-off)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from conftest import Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_docs41 import SIDE

TUNE = r"""
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = 'extern "C" __global__ void z(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] += V; }'
def launch(rt, k, y, n, *, stream=None):
    rt.launch(k, y, n, block=128, stream=stream)
T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", language="cuda", defines={"V": v})
                   for v in (TAG, TAG + 1)}, launch)
def workload(rt):
    rt.tune(T, rt.buffer(128), 128)
"""


def _candidate_of_another_shard(tmp_path: Path) -> tuple[Path, int]:
    """The workload, one candidate of its tune owned (its content hash) by the shard of 2
    that does not own the tune; and the tune's shard."""
    from warmcli.runtime.shard import Shard, tune_token

    for tag in range(1, 64):
        script = tmp_path / f"t{tag}.py"
        script.write_text(TUNE.replace("TAG", str(tag)))
        spec = importlib.util.spec_from_file_location(f"review41g_t{tag}", script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        token = tune_token("zt", "float32[128] 128", module.T.checksum)
        (owner,) = [i for i in range(2) if Shard(i, 2).owns(token)]
        hashes = [k.content_hash for k in module.T.candidates.values()]
        if any(not Shard(owner, 2).owns(h) for h in hashes):
            return script, owner
        script.unlink()
    raise AssertionError("no tag puts a candidate in another shard")  # pragma: no cover


def test_a_pending_tunes_seed_holds_every_binary_of_its_candidates(
    warm: Warm, tmp_path: Path
) -> None:
    """A `--dask` re-run sends the shard owning a pending tune the rows of its candidates,
    but by the candidate's kernel key only (its cubin's): a candidate whose content hash is
    another shard's arrived without its PTX, and the tune's check (each re-run) compiled it
    again, the shard's line saying it stored a new kernel that the bundle held. Every row of
    a candidate's kernel (its content hash) is now in the seed: the re-run compiles none."""
    nvrtc_release_or_skip()
    from warmcli.warming.seeds import shard_seeds

    script, owner = _candidate_of_another_shard(tmp_path)
    bundle = tmp_path / "b.warm"
    done = warm("run", script, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "seeds"
    folder.mkdir()
    seed = shard_seeds(bundle, 2, folder).paths[owner]
    assert seed is not None
    done = warm("run", script, "--arch", "sm_90", "--shard", f"{owner}/2", "-b", seed, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert sum(p["compilation"]["compiled"] for p in doc["passes"]) == 0, doc["passes"]
    assert doc["stored"] == {"kernels": 0, "tunes": 0}, doc["stored"]


TWO_CFG = """
from warmcli import Kernel
K = Kernel('#include "{a}"\\n#include "{b}"\\n#ifndef GB\\n#define GB 0\\n#endif\\n'
           'void g(float *x) {{ x[0] = GA + GB; }}', "g", "P")
def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def test_a_headers_miss_names_one_of_two_same_named_headers_made_alike(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    """9cab0ae keeps an absolute include's file name only, so `/a/cfg.h` and `/b/cfg.h` are
    both `cfg.h` in a build's list, and the miss compared a name's contents as a set: with
    `/b/cfg.h` edited to read as `/a/cfg.h` does, each content this process reads was one
    the build read under that name, and the miss named no header (before 9cab0ae it named
    `/b/cfg.h`). A name is now changed where this process reads a content more times than
    the build did: `changed: cfg.h`."""
    first, second = tmp_path / "a" / "cfg.h", tmp_path / "b" / "cfg.h"
    for header in (first, second):
        header.parent.mkdir()
    first.write_text("#define GA 1\n")
    second.write_text("#ifndef GA\n#define GA 1\n#endif\n#define GB 2\n")
    path = workload_file(TWO_CFG.format(a=first, b=second))
    bundle = tmp_path / "two.warm"
    run = warm("run", path, "-b", bundle, "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    second.write_text(first.read_text())  # the same contents as the other cfg.h now
    proc = warm("verify", bundle, "--workload", path, cwd=tmp_path)
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("miss: kernel g: headers:")]
    assert line.endswith("(changed: cfg.h)"), line


ZERO_BESIDE = SIDE.replace("/* TAG */ ", "")  # docs41's workload, its ZERO untagged


def test_verify_arch_names_a_kernel_a_pending_tunes_launch_function_launches_now(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm verify --arch` ran its one compile-only pass, where a pending tune the bundle
    holds queued its candidates and never ran its launch function: a kernel that launch
    function launches now (edited since the pre-build) was missing, a `warm run` into the
    bundle stored it (2 new kernels), and verify said `the bundle is complete`. Verify now
    runs a pending tune's launch function as a pre-build does: the kernel is named missing."""
    nvrtc_release_or_skip()
    script, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    edit = "    rt.launch(ZERO, y, n, block=128, stream=stream)"
    script.write_text(ZERO_BESIDE.replace(edit, ""))
    done = warm("run", script, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    script.write_text(ZERO_BESIDE)
    done = warm("verify", "--arch", "sm_90", "--workload", script, bundle)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "the bundle is complete" not in done.stdout, done.stdout
    done = warm("run", script, "--arch", "sm_90", "-b", bundle, "-q")  # what it lacked
    assert done.returncode == 0 and "stored 2 new kernel(s)" in done.stdout, done.stdout
    done = warm("verify", "--arch", "sm_90", "--workload", script, bundle)
    assert done.returncode == 0 and "the bundle is complete" in done.stdout, done.stdout
