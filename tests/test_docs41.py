"""The README's claims that stop 41 changed or added, run as a new user would run them.

- `warm clean`'s Ctrl-C in a vacuum that removed nothing: the README quoted the line cut
  short of what warm prints, with no `...` to say so: it now quotes the whole line, which
  `tests/test_leftovers41.py` reads back from a real interrupted clean (`quoted_in_readme`).

Real parts throughout: the CLI in a subprocess, the system C compiler, SQLite bundles.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_a_pull_url_whose_name_decodes_to_no_utf8_is_named_as_given(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm pull URL` with no PATH refuses a name that percent-decodes to no UTF-8 (README:
    `warm pull`), before any request: it said `its name '' is no bundle file`, naming an
    empty name the URL does not hold; now it names the URL's own, `x%FFy.warm`, and why."""
    url = "http://127.0.0.1:9/x%FFy.warm"  # (the discard port: nothing is asked of it)
    done = warm("pull", url, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (
        f"warm: error: {url}: its name 'x%FFy.warm' decodes to no UTF-8: name the file to write"
    ), line
    assert list(tmp_path.iterdir()) == []  # nothing written


SIDE = r"""
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = 'extern "C" __global__ void z(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] += V; }'
ZERO = Kernel('/* TAG */ extern "C" __global__ void zero(float *y, int n) '
              '{ if (threadIdx.x < n) y[threadIdx.x] = 0; }', "zero", "Pi", language="cuda")
def launch(rt, k, y, n, *, stream=None):
    rt.launch(ZERO, y, n, block=128, stream=stream)  # (the edit: launched beside it now)
    rt.launch(k, y, n, block=128, stream=stream)
T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", language="cuda", defines={"V": v})
                   for v in (1, 2)}, launch)
def workload(rt):
    rt.tune(T, rt.buffer(128), 128)
"""


def _zero_of_another_shard(tmp_path: Path) -> Path:
    """The workload, its ZERO tagged so that the shard of 2 owning it is not the tune's."""
    import importlib.util

    from warmcli.runtime.shard import Shard, tune_token

    for tag in range(64):
        script = tmp_path / f"w{tag}.py"
        script.write_text(SIDE.replace("TAG", str(tag)))
        spec = importlib.util.spec_from_file_location(f"docs41_w{tag}", script)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        token = tune_token("zt", "float32[128] 128", module.T.checksum)
        if Shard(0, 2).owns(token) != Shard(0, 2).owns(module.ZERO.content_hash):
            return script
        script.unlink()
    raise AssertionError("no tag puts ZERO in another shard")  # pragma: no cover


def test_a_sharded_re_warm_builds_what_an_edited_launch_function_of_a_pending_tune_launches(
    warm: Warm, tmp_path: Path
) -> None:
    """README (a tune's launch function in a pre-build): a tune the bundle holds pending has
    its launch function run again by a pre-build into it, so a kernel it launches now (the
    launch function edited since) is built too; under `--shard` it said "where that shard
    owns it", and no shard built it: the tune's shard skipped another shard's kernel, and the
    shard owning it returned at once from a tune not its own. The shards' merge lacked it (4
    kernel rows where an unsharded re-warm stores 6), `warm verify` called it complete, and
    production's GPU compiled it at its first tune. The tune's shard now builds it, as at
    the first pre-build (README says so)."""
    nvrtc_release_or_skip()
    script = _zero_of_another_shard(tmp_path)
    edited = script.read_text()
    script.write_text(edited.replace("    rt.launch(ZERO, y, n, block=128, stream=stream)", ""))
    shards = [tmp_path / f"s{i}.warm" for i in range(2)]
    for i, bundle in enumerate(shards):  # the first pre-build: the tune pending, no ZERO
        done = warm("run", script, "--arch", "sm_90", "--shard", f"{i}/2", "-b", bundle, "-q")
        assert done.returncode == 0, done.stdout + done.stderr
    script.write_text(edited)
    for i, bundle in enumerate(shards):  # the re-warm of each shard, into its own bundle
        done = warm("run", script, "--arch", "sm_90", "--shard", f"{i}/2", "-b", bundle, "-q")
        assert done.returncode == 0, done.stdout + done.stderr
    merged = tmp_path / "m.warm"
    done = warm("merge", *shards, "-o", merged, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    entries = sorted(k["entry"] for k in warm.json("stats", merged)["kernels"])
    assert entries.count("zero") == 2, entries  # its cubin and its PTX, as unsharded
