"""A fleet mid-rollout: yesterday's warm and today's over one bundle.

Today's warm changed the tune keys of a few `key=` values on purpose: a `key=` str that is
another value's JSON text (`"100"` beside `100`) is tagged `str:`, and a numpy number keys as
the Python number it holds (`np.int64(100)` as `100`, yesterday as its text `"100"`). Every
other kernel and tune key is unchanged. Yesterday's bundle is today's with those rows
rewritten as yesterday's warm wrote them (`_as_yesterday`: their shape text and the key made
of it: yesterday's warm itself, commit 4a9bac7, wrote exactly these rows, kernels and tunes,
of this workload). Served, checked and re-warmed by today's warm through the real CLI and fresh
production processes: each unchanged entry is a hit, results are a cold start's, only the
tunes whose key changed are measured again (once), and no reader changes the file.

Where a checkout of yesterday's warm is at `/tmp/base39`, the reverse (yesterday's warm
reading and re-warming today's bundle, signed ones too) is run as well; else skipped.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from upgrades import SERVE, TwoWarms, digest

from warmcli.records import tune_key

YESTERDAY = Path("/tmp/base39")
WORKLOAD = '''
"""Host kernels, tunables keyed every way: default, bucket, key= int/str/tuple/dict/numpy."""
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = r"""
void scale(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) y[j] = x[j] * 2.0f;
}
"""
ADD = Kernel("void add1(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1; }", "add1", "Pi")


def cands():
    return {f"s{s}": Kernel(SRC, "scale", "PPi", defines={"STEP": s}) for s in (1, 4)}


def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)


TUNABLES = [
    Tunable("t_def", cands(), launch),
    Tunable("t_pow", cands(), launch, bucket="pow2"),
    Tunable("t_int", cands(), launch, key=lambda x, y, n: n),
    Tunable("t_str", cands(), launch, key=lambda x, y, n: f"rows{n}"),
    Tunable("t_tup", cands(), launch, key=lambda x, y, n: (n, "f32")),
    Tunable("t_dict", cands(), launch, key=lambda x, y, n: {"n": n, "k": [1, 2]}),
    Tunable("t_jstr", cands(), launch, key=lambda x, y, n: str(n)),
    Tunable("t_np", cands(), launch, key=lambda x, y, n: np.int64(n)),
]


def workload(rt):
    results = []
    x = rt.upload(np.arange(100, dtype=np.float32) * 0.37)
    for t in TUNABLES:
        y = rt.buffer(100, "float32")
        rt.tune(t, x, y, 100)
        rt.launch(ADD, y, 100)
        results.append(y)
    return results
'''
# The tunes whose key changed on purpose, today's shape text -> yesterday's.
CHANGED = {"t_jstr": ("str:100", "100"), "t_np": ("100", '"100"')}


def _as_yesterday(path: Path) -> None:
    """The tune rows whose key today's warm changed on purpose, as yesterday's wrote them."""
    with sqlite3.connect(path) as db:
        for operation, (today, yesterday) in CHANGED.items():
            row = db.execute(
                "SELECT key, device, checksum FROM tunes WHERE operation = ? AND shape_key = ?",
                (operation, today),
            ).fetchone()
            assert row is not None, operation
            old, device, checksum = row
            key = tune_key(operation, yesterday, device, checksum.hex())
            db.execute(
                "UPDATE tunes SET key = ?, shape_key = ? WHERE key = ?",
                (bytes.fromhex(key), yesterday, old),
            )
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class Both(TwoWarms):
    """Today's warm (`today`), and yesterday's where `/tmp/base39` holds it (`TwoWarms`)."""

    def serve(self, code: Path, bundle: Path | None, **env: str) -> dict[str, object]:
        more = {"WARM_BUNDLE": str(bundle)} if bundle is not None else {}
        done = subprocess.run(
            [sys.executable, "-c", SERVE, str(self.workload)],
            capture_output=True, text=True, timeout=300, cwd=self.folder,
            env=dict(self.env, PYTHONPATH=str(code), **more, **env),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Both, Path, dict[str, object]]:
    """Both warms; a folder with `today.warm` (today's warm's bundle of the workload) and
    `yesterday.warm` (the same, as yesterday's warm wrote it); a cold start's results."""
    folder = tmp_path_factory.mktemp("upgrade39")
    both = Both(folder)
    both.workload.write_text(WORKLOAD)
    done = both.cli(ROOT, "run", both.workload, "-b", folder / "today.warm", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 3 new kernel(s) and 8 new tune(s)" in done.stdout, done.stdout
    shutil.copy(folder / "today.warm", folder / "yesterday.warm")
    _as_yesterday(folder / "yesterday.warm")
    cold = both.serve(ROOT, None)
    assert cold["compiled"] == 3 and len(cold["tuned"]) == 8, cold  # type: ignore[arg-type]
    return both, folder, cold


def test_yesterdays_bundle_served_by_today_misses_only_the_keys_changed_on_purpose(
    made: tuple[Both, Path, dict[str, object]],
) -> None:
    both, folder, cold = made
    old = folder / "yesterday.warm"
    before = digest(old)
    served = both.serve(ROOT, old, WARM_REPORT="1")
    assert served == {"digest": cold["digest"], "compiled": 0, "tuned": ["t_jstr", "t_np"]}
    # Every reader tells the same truth of it, and none changes the file.
    done = both.cli(ROOT, "verify", "--workload", both.workload, old)
    assert done.returncode == 1, done.stdout + done.stderr
    misses = [ln for ln in done.stdout.splitlines() if ln.startswith("miss:")]
    assert len(misses) == 2, done.stdout
    assert all(" t_jstr str:100:" in ln or " t_np 100:" in ln for ln in misses), misses
    done = both.cli(ROOT, "verify", old)
    assert done.returncode == 0 and "8 tune(s): sound" in done.stdout, done.stdout + done.stderr
    done = both.cli(ROOT, "check", old)
    assert done.returncode == 0 and "every entry is servable" in done.stdout, done.stdout
    done = both.cli(ROOT, "stats", old, "--json")
    assert done.returncode == 0, done.stderr
    assert digest(old) == before


def test_todays_re_warm_of_yesterdays_bundle_compiles_nothing_and_measures_two_tunes_once(
    made: tuple[Both, Path, dict[str, object]],
) -> None:
    both, folder, cold = made
    bundle = folder / "rewarmed.warm"
    shutil.copy(folder / "yesterday.warm", bundle)
    done = both.cli(ROOT, "run", both.workload, "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 0 new kernel(s) and 2 new tune(s)" in done.stdout, done.stdout
    done = both.cli(ROOT, "run", both.workload, "-b", bundle, "-q")
    assert "stored 0 new kernel(s) and 0 new tune(s)" in done.stdout, done.stdout
    assert both.serve(ROOT, bundle, WARM_STRICT="1") == dict(cold, compiled=0, tuned=[])
    done = both.cli(ROOT, "verify", bundle)  # yesterday's two rows kept beside today's
    assert done.returncode == 0 and "10 tune(s): sound" in done.stdout, done.stdout


@pytest.mark.skipif(not (YESTERDAY / "warmcli").is_dir(), reason="no yesterday's warm here")
def test_yesterdays_warm_over_todays_bundle_signed_and_re_warmed_alternately(
    made: tuple[Both, Path, dict[str, object]],
) -> None:
    both, folder, cold = made
    bundle, key = folder / "shared.warm", folder / "ci.key"
    assert both.cli(ROOT, "keygen", key).returncode == 0
    done = both.cli(ROOT, "run", both.workload, "-b", bundle, "--key", key, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    trusted = {"WARM_TRUSTED_KEYS": f"{key}.pub"}
    before = digest(bundle)
    for args in (("verify", bundle), ("check", bundle), ("stats", bundle)):
        done = both.cli(YESTERDAY, *args, **trusted)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "valid, trusted" in both.cli(YESTERDAY, "verify", bundle, **trusted).stdout
    served = both.serve(YESTERDAY, bundle, **trusted)
    assert served == {"digest": cold["digest"], "compiled": 0, "tuned": ["t_jstr", "t_np"]}
    assert digest(bundle) == before
    # Two machines re-warming it in turn, each signing: no kernel rebuilt, no tune thrashing.
    stored = []
    for code in (YESTERDAY, ROOT, YESTERDAY, ROOT):
        done = both.cli(code, "run", both.workload, "-b", bundle, "--key", key, "-q", **trusted)
        assert done.returncode == 0, done.stdout + done.stderr
        stored.append(done.stdout.splitlines()[0])
    assert stored == [
        f"bundle {bundle}: stored 0 new kernel(s) and {n} new tune(s)" for n in (2, 0, 0, 0)
    ], stored
    for code in (YESTERDAY, ROOT):
        done = both.cli(code, "verify", bundle, **trusted)
        assert "10 tune(s): sound" in done.stdout and "covers" in done.stdout, done.stdout
        assert both.serve(code, bundle, WARM_STRICT="1", **trusted) == dict(
            cold, compiled=0, tuned=[]
        )
