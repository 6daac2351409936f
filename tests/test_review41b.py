"""Review of stop 41's pre-build check of tune candidates (each candidate's launch function run
once, discarded, under `--arch`): the real CLI in a subprocess, real NVRTC, real bundles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def _needs_nvrtc() -> None:
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)")


def _stats(warm: Warm, bundle: Path) -> dict:
    shown = warm("stats", bundle, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


SIZED_BY_A_READ = r"""
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = ('extern "C" __global__ void z(float *y, int n) '
       '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = V; }')
def launch(rt, k, y, meta, *, stream=None):
    n = int(rt.read(meta)[0])  # a size the host uploaded: real on a GPU, zeros with none
    rt.launch(k, y, n, grid=(n + 127) // 128, block=128, stream=stream)
T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", language="cuda", defines={"V": v})
                   for v in (1, 2)}, launch)
def workload(rt):
    rt.tune(T, rt.buffer(4096), rt.upload(np.array([4096], dtype=np.int32)))
"""


def test_a_pre_build_does_not_fail_a_candidate_sized_by_a_read_it_answered_with_zeros(
    warm: Warm, tmp_path: Path
) -> None:
    """A launch function that reads a size back (`--allow-discarded-reads`: on a GPU, and on
    host, the read gives the uploaded 4096 and the run passes) got zeros under `--arch`, so
    its launch had a grid of 0: every candidate was recorded failed, and the pre-build failed
    with `TuneFailure: every candidate failed` (it passed before the check, at 874781a). A
    refusal after a read answered with zeros says nothing of a GPU: the candidates stay
    pending, for production to measure."""
    _needs_nvrtc()
    script = tmp_path / "w.py"
    script.write_text(SIZED_BY_A_READ)
    bundle = tmp_path / "b.warm"
    args = ("run", script, "--arch", "sm_90", "-q")
    done = warm(*args, "-b", bundle, "--allow-discarded-reads")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the bundle is complete" in done.stdout, done.stdout
    (tune,) = _stats(warm, bundle)["tunes"]
    assert tune["status"] == "pending", tune
    assert [c["status"] for c in tune["candidates"]] == ["pending", "pending"], tune
    refused = warm(*args, "-b", tmp_path / "c.warm")  # not allowed: refused, as on host and GPUs
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "DiscardedReadError: read of Buffer(sm_90" in refused.stderr, refused.stderr


HELPER = r"""
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = 'extern "C" __global__ void z(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] += V; }'
ZERO = Kernel('/* TAG */ extern "C" __global__ void zero(float *y, int n) '
              '{ if (threadIdx.x < n) y[threadIdx.x] = 0; }', "zero", "Pi", language="cuda")
def launch(rt, k, y, n, *, stream=None):
    rt.launch(ZERO, y, n, block=128, stream=stream)
    rt.launch(k, y, n, block=128, stream=stream)
T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", language="cuda", defines={"V": v})
                   for v in (1, 2)}, launch)
def workload(rt):
    rt.tune(T, rt.buffer(128), 128)
"""


def _helper_of_another_shard(tmp_path: Path) -> tuple[Path, int]:
    """The workload, its ZERO tagged so that another shard of 2 than the tune's owns it, and
    the shard that owns the tune."""
    import importlib.util

    from warmcli.runtime.shard import Shard, tune_token

    for tag in range(64):
        script = tmp_path / f"w{tag}.py"
        script.write_text(HELPER.replace("TAG", str(tag)))
        spec = importlib.util.spec_from_file_location(f"review41b_w{tag}", script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        token = tune_token("zt", "float32[128] 128", module.T.checksum)
        (owner,) = [i for i in range(2) if Shard(i, 2).owns(token)]
        if not Shard(owner, 2).owns(module.ZERO.content_hash):
            return script, owner
    raise AssertionError("no tag puts ZERO in another shard")  # pragma: no cover


def test_a_sharded_pre_build_stores_the_kernel_a_tunes_launch_function_launches(
    warm: Warm, tmp_path: Path
) -> None:
    """The pre-build's check now builds a kernel a tune's launch function launches beside the
    candidate (README), but under `--shard` only where that kernel's content hash was the
    tune's own shard's: the shard owning the tune skipped it (another shard's kernel), and the
    shard owning the kernel never runs that tune's launch function. The merge of the shards
    lacked it (4 kernel rows where one run stores 6), `warm verify` called it complete, and
    production's GPU compiled it at its first tune. As a GPU's measurement executes it, the
    tune's shard now builds it."""
    _needs_nvrtc()
    script, owner = _helper_of_another_shard(tmp_path)
    shards = []
    for i in range(2):
        shards.append(tmp_path / f"s{i}.warm")
        done = warm("run", script, "--arch", "sm_90", "--shard", f"{i}/2", "-b", shards[i], "-q")
        assert done.returncode == 0, done.stdout + done.stderr
    entries = sorted(k["entry"] for k in _stats(warm, shards[owner])["kernels"])
    assert entries.count("zero") == 2, entries  # its cubin and its PTX
    merged = tmp_path / "m.warm"
    done = warm("merge", *shards, "-o", merged)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(_stats(warm, merged)["kernels"]) == 6


def test_the_argparse_hint_is_only_for_a_parse_of_the_empty_sys_argv(
    warm: Warm, tmp_path: Path
) -> None:
    """The hint `(argparse exits: warm runs the workload with sys.argv holding only its path;
    give its settings in environment variables ...)` was added to any `sys.exit` whose last
    frame is argparse's: a workload parsing a list of its own (`parse_args(["--size",
    "abc"])`) or calling `parser.error(...)` itself after reading the environment was told
    that sys.argv was the cause and to do what it already does. It is now given only where
    argparse exits parsing no arguments (sys.argv's, holding only the path)."""
    head = "import argparse\ndef workload(rt):\n    p = argparse.ArgumentParser()\n"
    hint = "argparse exits: warm runs the workload with sys.argv holding only its path"
    cases = {
        "own_list.py": '    p.add_argument("--size", type=int)\n'
        '    p.parse_args(["--size", "abc"])\n',
        "own_error.py": '    p.add_argument("--size", type=int, default=0)\n'
        "    if p.parse_args().size <= 0:\n"
        '        p.error("set SIZE in the environment")\n',
        "required.py": '    p.add_argument("--size", type=int, required=True)\n'
        "    p.parse_args()\n",
    }
    for name, body in cases.items():
        script = tmp_path / name
        script.write_text(head + body)
        done = warm("run", script, "-b", tmp_path / "b.warm", "-q")
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert "sys.exit(2)" in last, last
        assert (hint in last) == (name == "required.py"), last


def test_warm_diff_gives_a_kernels_compile_seconds_part_as_warm_stats_does(
    warm: Warm, tmp_path: Path
) -> None:
    """58a4e14 made `warm diff` give a listed kernel's bytes and `shared_by` over its bundle's
    users of the binary, but its `seconds` (its part of the compile, over the rows that
    compile made of it) was still counted over the kernels the diff lists: a kernel's PTX,
    listed as only A's where B was built `--no-ptx` (their cubins shared), showed the whole
    compile's seconds where `warm stats` gives it half (its cubin the other half), so the
    column no longer added up to the compilers' time."""
    _needs_nvrtc()
    script = tmp_path / "w.py"
    script.write_text(
        "from warmcli import Kernel\nDEVICE = 'cuda'\n"
        "A = Kernel('extern \"C\" __global__ void a(float *y) { y[0] = 1; }', 'a', 'P', "
        "language='cuda')\ndef workload(rt):\n    rt.launch(A, rt.buffer(4))\n"
    )
    a, b = tmp_path / "a.warm", tmp_path / "b.warm"
    for bundle, more in ((a, ()), (b, ("--no-ptx",))):
        done = warm("run", script, "--arch", "sm_90", "-b", bundle, "-q", *more)
        assert done.returncode == 0, done.stdout + done.stderr
    shown = warm("diff", a, b, "--json")
    assert shown.returncode == 0, shown.stderr
    (ptx,) = json.loads(shown.stdout)["kernels"]["only_a"]
    assert ptx["arch"] == "compute_90", ptx
    stats = {k["key"]: k for k in _stats(warm, a)["kernels"]}
    assert stats[ptx["key"]]["seconds"] == ptx["compile_seconds"] / 2, stats
    for field in ("seconds", "compile_seconds", "batch_seconds", "bytes", "shared_by"):
        assert ptx[field] == stats[ptx["key"]][field], field


def test_a_re_warm_builds_the_kernel_a_pending_tunes_launch_function_now_launches(
    warm: Warm, tmp_path: Path
) -> None:
    """A tune a bundle holds pending (a pre-build's) was never checked again by a later
    `--arch` run into it: its launch function did not run, so a kernel it launches beside
    the candidate was never built where the bundle came from an earlier pre-build: one whose
    launch function then launched none (the tune's key does not cover an unchecked tunable's
    launch function), or one by a warm before its check ran launch functions. `warm run`
    stored 0 new kernels and `warm verify` called it complete; production's GPU compiled it
    at its first tune (a GPU's re-warm builds it, as the pick's discarded launch does). The
    run now runs the launch function of each candidate not recorded failed, discarded, so
    what it launches is built."""
    _needs_nvrtc()
    script = tmp_path / "w.py"
    script.write_text(HELPER.replace("    rt.launch(ZERO, y, n, block=128, stream=stream)\n", ""))
    bundle = tmp_path / "b.warm"
    args = ("run", script, "--arch", "sm_90", "-b", bundle, "-q")
    done = warm(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "zero" not in [k["entry"] for k in _stats(warm, bundle)["kernels"]]
    script.write_text(HELPER)  # its launch function now zeroes the output first
    done = warm(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 2 new kernel(s) and 0 new tune(s)" in done.stdout, done.stdout
    assert [k["entry"] for k in _stats(warm, bundle)["kernels"]].count("zero") == 2


def test_a_pre_build_answers_a_launch_functions_compute_capability_query(
    warm: Warm, tmp_path: Path
) -> None:
    """A launch function that sizes its launch by the GPU's compute capability
    (`rt.device.capability`, a CUDA device's `(9, 0)`) raised AttributeError on the
    GPU-less device once the pre-build ran it: every candidate failed, and the pre-build
    failed with `TuneFailure` (it passed at 874781a, and passes on a GPU). The compile-only
    device answers its architecture's capability, as a GPU of it would."""
    _needs_nvrtc()
    from warmcli.backends.cuda.arch import ArchDevice

    assert [ArchDevice(a).capability for a in ("sm_86", "sm_90a", "sm_100")] == [
        (8, 6),
        (9, 0),
        (10, 0),
    ]
    script = tmp_path / "w.py"
    script.write_text(
        SIZED_BY_A_READ.replace(
            "n = int(rt.read(meta)[0])  # a size the host uploaded: real on a GPU, zeros with none",
            "n = 4096 if rt.device.capability >= (8, 0) else 2048",
        )
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", script, "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    (tune,) = _stats(warm, bundle)["tunes"]
    assert [c["status"] for c in tune["candidates"]] == ["pending", "pending"], tune


def test_a_pre_build_fails_a_checked_tune_whose_reference_candidate_is_refused(
    warm: Warm, tmp_path: Path
) -> None:
    """A tunable whose `check` names its reference candidate compares every other candidate's
    outputs with the reference's: on a GPU, a reference that fails leaves nothing to compare,
    so every candidate fails (`check: the reference candidate 'v2048' failed: nothing to
    compare`) and production's first tune raises TuneFailure. The pre-build refused the
    reference (a block of 2048 threads) but kept the others pending: `the bundle is
    complete`, the very failure its check exists to show first."""
    _needs_nvrtc()
    script = tmp_path / "w.py"
    script.write_text(
        "from warmcli import Kernel, Tunable\nDEVICE = 'cuda'\n"
        'SRC = \'extern "C" __global__ void z(float *y, int n) '
        "{ if (threadIdx.x < n) y[threadIdx.x] = V; }'\n"
        "def launch(rt, k, y, n, *, stream=None):\n"
        "    rt.launch(k, y, n, block=(int(k.define('V')),), stream=stream)\n"
        "T = Tunable('zt', {f'v{v}': Kernel(SRC, 'z', 'Pi', language='cuda', defines={'V': v})"
        " for v in (2048, 512)}, launch, check='v2048')\n"
        "def workload(rt):\n    rt.tune(T, rt.buffer(4096), 4096)\n"
    )
    done = warm("run", script, "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tune zt float32[4096] 4096: every candidate failed" in done.stderr, done.stderr
    assert "- v2048: ValueError: block of 2048 threads" in done.stderr or (
        "2048 threads a block" in done.stderr
    ), done.stderr
    told = "- v512: check: the reference candidate 'v2048' failed: nothing to compare"
    assert told in done.stderr, done.stderr


def test_a_sharded_re_run_builds_another_shards_kernel_of_a_pending_tune(
    warm: Warm, tmp_path: Path
) -> None:
    """A pending tune reached again checks its candidates again and builds what their launch
    functions launch whichever shard owns it, as at its first check. 969878f limited that to
    what this shard owns (a `--dask` re-run, sent no other shard's kernels, built such a kernel
    again on every re-run), but the shard owning it never runs that tune's launch function:
    a kernel an edited launch function launches now was built by no shard (docs41)."""
    _needs_nvrtc()
    script, owner = _helper_of_another_shard(tmp_path)
    full = script.read_text()
    script.write_text(full.replace("    rt.launch(ZERO, y, n, block=128, stream=stream)\n", ""))
    bundle = tmp_path / "s.warm"
    args = ("run", script, "--arch", "sm_90", "--shard", f"{owner}/2", "-b", bundle, "-q")
    done = warm(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    script.write_text(full)  # the launch function edited: ZERO launched beside it now
    done = warm(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 2 new kernel(s) and 0 new tune(s)" in done.stdout, done.stdout


def test_dash_m_of_a_package_names_its_modules_that_define_the_entry_not_a_string_of_it(
    warm: Warm, tmp_path: Path
) -> None:
    """`-m pkg` of a package defining no workload names its modules that do (a188ed4), found
    by a pattern over their text: a module whose docstring quotes `def workload(rt):` at the
    start of a line was named (`-m pkg.notes`, which defines none), and a subpackage's
    module that defines one (`pkg/sub/warmup.py`) was not. A module is now named where its
    syntax tree defines the entry at top level, its subpackages' modules too."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "warmup.py").write_text("def workload(rt):\n    pass\n")
    (tmp_path / "pkg" / "notes.py").write_text('DOC = """\ndef workload(rt):\n"""\n')
    (tmp_path / "pkg" / "broken.py").write_text("def workload(rt:\n")  # no syntax tree
    done = warm("run", "-m", "pkg", "-b", "b.warm", "-q", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.endswith("(its modules that define one: -m pkg.sub.warmup)"), line
