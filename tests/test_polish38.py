"""polish38: five small truths a user trial noticed, each through the real CLI in a
subprocess (real cc, real SQLite bundles; CUDA compiled for real with NVRTC under
`--arch`, no GPU): a merged bundle's `"run"` in `warm stats --json` (absent, not null,
where the merge records no run); a multi-arch `warm verify`'s miss lines, which did not
say which device each is on; the pass tables' `into bundle` and `compilation.stored`,
which counted cubins but not the PTX a run stored beside them; `warm stats`'s tune keys
`""` and `" "` (alike) and zero-width characters (not escaped); and a workload given
arguments (`warm run -m app.warmup -- --n 8`), refused as click's "unexpected extra
argument(s)" without saying a workload takes none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_trial38 import GPU  # the team's CUDA kernel whose header a test edits

HOST = """from warmcli import Kernel
DEVICE = "host"
K = Kernel("void bump(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += {v}; }}",
           "bump", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(8, "float32"), 8)
"""

KEYS = """import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP - STEP + 1; }"

def launch(rt, kernel, x, n, key, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)

T = Tunable("inc", {f"s{s}": Kernel(SRC, "inc", "Pi", defines={"STEP": s}) for s in (1, 2)},
            launch, key=lambda x, n, key: key, warmup=0, repeats=1)

def workload(rt):
    x = rt.upload(np.zeros(8, np.float32))
    for key in ("", " ", "\\ufeff", "\\u200b", "a b"):
        rt.tune(T, x, 8, key)
"""


def gpu_project(root: Path) -> Path:
    """`gpu_entry.py` and the header it includes, under `root`."""
    (root / "include").mkdir(parents=True)
    (root / "include" / "common.h").write_text("#define SCALE_OF(x) ((x) * 2.0f)\n")
    (root / "gpu_entry.py").write_text(GPU)
    return root / "gpu_entry.py"


def test_stats_json_always_carries_run_null_where_a_merge_records_none(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm merge` of two runs (two workloads; or sm_80 and sm_90 runs: the devices warmed
    name a run) records no run: `warm stats --json` had no `"run"` key at all, though the
    README lists it among the manifest's keys; it is `null` now, an object for one run."""
    bundles = []
    for v in (1, 2):
        script, bundle = tmp_path / f"w{v}.py", tmp_path / f"w{v}.warm"
        script.write_text(HOST.format(v=v))
        done = warm("run", script, "-b", bundle, "-q")
        assert done.returncode == 0, done.stderr
        bundles.append(bundle)
    one = json.loads(warm("stats", bundles[0], "--json").stdout)["manifest"]
    assert one["run"]["workload"] == "w1.py" and one["run"]["shards"] == [0], one
    merged = tmp_path / "m.warm"
    done = warm("merge", *bundles, "-o", merged)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(warm("stats", merged, "--json").stdout)["manifest"]
    assert "run" in manifest and manifest["run"] is None, manifest


def test_a_multi_arch_verify_names_the_device_of_each_miss(warm: Warm, tmp_path: Path) -> None:
    """After a header edit, `warm verify --arch sm_80 --arch sm_90` printed two `miss:
    kernel cscale: headers: ...` lines told apart only by `(key ...)`: each names its
    device now, in the line and in `--json`'s explanations."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    entry = gpu_project(tmp_path / "proj")
    bundle = tmp_path / "c1b.warm"
    archs = ("--arch", "sm_80", "--arch", "sm_90")
    done = warm("run", entry, "-b", bundle, *archs, "-q")
    assert done.returncode == 0, done.stderr
    (entry.parent / "include" / "common.h").write_text("#define SCALE_OF(x) ((x) * 3.0f)\n")
    done = warm("verify", bundle, "--workload", entry, *archs)
    assert done.returncode == 1, done.stderr + done.stdout
    misses = sorted(line for line in done.stdout.splitlines() if line.startswith("miss:"))
    assert len(misses) == 2, done.stdout
    for miss, arch in zip(misses, ("sm_80", "sm_90"), strict=True):
        assert miss.startswith(f"miss: {arch}: kernel cscale: headers: "), misses
        assert "(key " not in miss, misses
    done = warm("verify", bundle, "--workload", entry, *archs, "--json")
    explained = json.loads(done.stdout)["explanations"]
    assert sorted(m["device"] for m in explained) == ["sm_80", "sm_90"], explained


def test_the_pass_tables_count_the_ptx_a_run_stored(warm: Warm, tmp_path: Path) -> None:
    """A fresh `--arch sm_90` run stores the cubin and its compute_90 PTX: the summary said
    2 kernels stored, the pass said `into bundle 1` (`compilation.stored` 1). The PTX is
    counted now (`ptx_stored`, `1 + 1 PTX` in the table): the passes add up to the summary;
    so for a run that stores only the PTX beside a cubin held (after `--no-ptx`)."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    entry = gpu_project(tmp_path / "proj")

    def passes_add_up(*flags: str) -> tuple[int, int, int]:
        done = warm("run", entry, "-b", tmp_path / "b.warm", "--json", *flags)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        stored = sum(p["compilation"]["stored"] for p in doc["passes"])
        ptx = sum(p["compilation"]["ptx_stored"] for p in doc["passes"])
        warming = next(p for p in doc["passes"] if p["mode"] == "CompileAndAutotune")
        by_end = warming["settled_by_end"]["compilation"]
        assert stored + ptx == doc["stored"]["kernels"], doc
        assert (by_end["stored"], by_end["ptx_stored"]) == (stored, ptx), doc
        return stored, ptx, doc["stored"]["kernels"]

    done = warm("run", entry, "-b", tmp_path / "a.warm", "--arch", "sm_90")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if " into bundle " in line]
    assert ["into", "bundle", "1", "+", "1", "PTX"] in [r[:6] for r in rows], done.stdout
    assert passes_add_up("--arch", "sm_90", "--no-ptx") == (1, 0, 1)
    assert passes_add_up("--arch", "sm_90") == (0, 1, 1)  # its PTX, beside the cubin held


def test_stats_shows_blank_and_invisible_tune_keys_visibly(warm: Warm, tmp_path: Path) -> None:
    """Tune keys `""` and `" "` read alike in `warm stats`, and a zero-width U+FEFF or
    U+200B went to the terminal as it is (two rows that look the same): a blank key is
    quoted, an invisible character escaped; an ordinary key reads as before."""
    script, bundle = tmp_path / "keys.py", tmp_path / "keys.warm"
    script.write_text(KEYS)
    done = warm("run", script, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    shown = warm("stats", bundle).stdout
    headings = {line.split(" → ")[0] for line in shown.splitlines() if " → " in line}
    assert headings == {'inc ""', 'inc " "', "inc \\ufeff", "inc \\u200b", "inc a b"}, headings
    assert "\ufeff" not in shown and "\u200b" not in shown


@pytest.mark.parametrize(
    "text",
    ["\u200b", "\u200c", "\u200d", "\u2060", "\u2064", "\ufeff", "\u00ad", "\U000e0041"],
)
def test_printable_escapes_every_invisible_format_character(text: str) -> None:
    """Pure logic: each invisible format character is escaped, ordinary text unchanged."""
    from warmcli.printable import printable, visible

    code = ord(text)
    escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    escape = escape if code < 0x10000 else f"\\U{code:08x}"
    assert printable(f"a{text}b") == f"a{escape}b"
    assert visible(f"a{text}b") == f"a{escape}b"
    ordinary = "matmul 64x64 float32 → ü café (é) tab-free"
    assert printable(ordinary) == ordinary == visible(ordinary)
    blanks = [visible(text) for text in ("", " ", "  ", "\u00a0", "\t")]
    assert blanks == ['""', '" "', '"  "', '"\\xa0"', '"\\x09"']
    assert printable("") == "" and printable(" ") == " "  # every other command's text as it was


def test_a_workload_given_arguments_is_told_it_takes_none(warm: Warm, tmp_path: Path) -> None:
    """`warm run -m app.warmup -b x.warm -- --n 8 --json` said `Got unexpected extra
    argument(s) (8 --json)`: a workload sees no arguments, and the one line says so and
    what to do instead, for `run` and `verify` alike; the bundle is not made."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "warmup.py").write_text(HOST.format(v=1))
    bundle = tmp_path / "x.warm"
    for command in (
        ["run", "-m", "app.warmup", "-b", bundle, "--", "--n", "8", "--json"],
        ["run", tmp_path / "app" / "warmup.py", "-b", bundle, "8"],
        ["verify", bundle, "-m", "app.warmup", "--", "--n", "8"],
        ["verify", bundle, "--workload", tmp_path / "app" / "warmup.py", "8"],
    ):
        done = warm(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("warm: error: "), done.stderr
        assert "a workload takes no arguments" in lines[0], lines[0]
        assert "environment variable" in lines[0] and "Got unexpected" not in lines[0], lines
        assert not bundle.exists()
    done = warm("verify", bundle, "other.warm", cwd=tmp_path)  # no workload: click's own line
    assert done.returncode == 2 and "workload takes no" not in done.stderr, done.stderr
