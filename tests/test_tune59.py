"""Holes tune59 found trying autotuning as a user, then as an attacker, each reproduced for
real: the real CLI in a subprocess, a real bundle from `warm run` (the host example, built by
the system C compiler), edited with sqlite3 as an attacker would.

A tune row's times are read as untrusted input: a time that is not finite, negative, or
whose samples sum past a float's range is refused (a corrupt entry), but any other is
kept, up to 2^993 s. `warm stats` and `warm diff` wrote such a median in microseconds with
every digit (`1e200` s: a cell of 280 characters) and a ratio to the pick likewise (a pick of
1e-300 s beside 1e-10 s: 290 digits), so one row widened every table it is in.
"""

from __future__ import annotations

import math
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import EXAMPLES, SERVE_MATMUL, Warm

from warmcli.bundle.candidates import decode, pack
from warmcli.records import CandidateMeasurement

LONG_NUMBER = re.compile(r"[0-9][0-9,.]{24,}")  # a figure of more than 25 characters


def _retimed(good: Path, out: Path, times: dict[str, float], pick: str | None = None) -> Path:
    """`good` copied to `out`, its first tune's candidates named in `times` given that median
    (and each sample that value), and its pick `pick` where given: packed as format 2 packs
    them (kernel keys whole), as an attacker may write them."""
    shutil.copyfile(good, out)
    with sqlite3.connect(out) as conn:
        ids = {i: bytes(k).hex() for i, k in conn.execute("SELECT id, key FROM tune_kernels")}
        key, held, was = conn.execute(
            "SELECT key, candidates, pick FROM tunes ORDER BY rowid LIMIT 1"
        ).fetchone()
        candidates = [
            CandidateMeasurement(
                c.name, c.kernel_key, c.status, times[c.name], (times[c.name],) * len(c.samples)
            )
            if c.name in times
            else c
            for c in decode(held, ids.__getitem__)
        ]
        conn.execute(
            "UPDATE tunes SET candidates = ?, pick = ? WHERE key = ?",
            (pack(candidates), pick or was, key),
        )
    conn.close()
    return out


def _first_pick(path: Path) -> str:
    """The pick of the first tune of the bundle at `path` (the fastest there: by chance)."""
    with sqlite3.connect(path) as conn:
        (pick,) = conn.execute("SELECT pick FROM tunes ORDER BY rowid LIMIT 1").fetchone()
    conn.close()
    return str(pick)


def test_a_hostile_time_is_shown_in_a_figure_of_bounded_width(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Before: `warm stats` showed `100,000,000,...,552.0 µs` (280 characters) for a median of
    1e200 s and a 290-digit `vs pick` for 1e-10 s beside a pick of 1e-300 s; `warm diff`
    the same median. Now such a time reads `1e+200 s`, such a ratio `1e+290×`."""
    warm, good = made
    times = {"tile8": 1e-300, "tile16": 1e-10, "tile32": 1e200}
    edited = _retimed(good, tmp_path / "edited.warm", times, pick="tile8")
    for args in (("stats", edited), ("stats", edited, "--explain", "matmul")):
        shown = warm(*args)
        assert shown.returncode == 0, shown.stderr
        assert not LONG_NUMBER.search(shown.stdout), LONG_NUMBER.search(shown.stdout)
    explained = warm("stats", edited, "--explain", "matmul").stdout
    assert "1e+200 s" in explained and "1e+290×" in explained, explained[-3000:]
    other = next(t for t in ("tile32", "tile64") if t != _first_pick(good))  # a pick differs
    slow = _retimed(good, tmp_path / "slow.warm", {other: 1e200}, pick=other)
    diff = warm("diff", good, slow)
    assert diff.returncode == 0, diff.stderr
    assert "1e+200 s" in diff.stdout and not LONG_NUMBER.search(diff.stdout), diff.stdout


def test_times_summing_past_a_float_are_named_so(made: tuple[Warm, Path], tmp_path: Path) -> None:
    """A candidate's samples of 1e308 s each are finite, but their sum is not: the row is
    corrupt (as before), and `warm verify` said `'tile8' has a time that is not finite`, of
    times that each are. Now it says `has times summing past 1e308`; a NaN still reads `not
    finite`."""
    warm, good = made
    for seconds, why in ((1e308, "has times summing past 1e308"), (math.nan, "not finite")):
        edited = _retimed(good, tmp_path / "edited.warm", {"tile8": seconds})
        verified = warm("verify", edited)
        assert verified.returncode == 1, verified.stderr
        assert "corrupt tune entry" in verified.stdout, verified.stdout
        assert f"'tile8' {why}" in verified.stdout or why in verified.stdout, verified.stdout
        assert seconds != 1e308 or "not finite" not in verified.stdout, verified.stdout


PICKS = """
import os
import sys
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
PREP = Kernel("void prep(float *y, int n) { for (int i = 0; i < n; i++) y[i] = PREPV; }",
              "prep", "Pi", defines={"PREPV": os.environ.get("PREPV", "0")})
SRC = "void acc(float *y, const float *x, int n) { for (int i = 0; i < n; i += STEP) "
SRC += "for (int j = i; j < i + STEP && j < n; j++) y[j] += x[j]; }"
def launch(rt, kernel, y, x, n, *, stream=None):
    rt.launch(PREP, y, n, stream=stream)
    rt.launch(kernel, y, x, n, stream=stream)
T = Tunable("acc", {f"s{s}": Kernel(SRC, "acc", "PPi", defines={"STEP": s}) for s in (1, 2)},
            launch, check="s1")
def workload(rt):
    x = rt.upload(np.arange(8, dtype=np.float32))
    y = rt.buffer(8)
    print("pick:", rt.tune(T, y, x, 8), file=sys.stderr)
    return y
"""
SERVE_PICKS = """
import json, runpy, sys, warmcli
rt = warmcli.runtime("host")
y = runpy.run_path(sys.argv[1])["workload"](rt)
print(json.dumps({"y": rt.read(y).tolist(), "tunes": len(warmcli.report().tunes)}))
"""


def test_what_the_readme_says_of_the_pick_and_the_launch_functions_kernels(
    warm: Warm, workload_file: Callable[..., Path], bundle_path: Path
) -> None:
    """The README now says (doc only, this held before): `rt.tune` returns None under
    CompileOnly for a tune the bundle does not hold, the pick's name otherwise; and a kernel a
    checked tunable's launch function launches beside the candidate keys no tune, so its
    edit serves the pick measured with the old one (no tune measured)."""
    path = workload_file(PICKS)
    ran = warm("run", path, "--bundle", bundle_path)
    assert ran.returncode == 0, ran.stderr
    picks = [ln for ln in ran.stdout.splitlines() + ran.stderr.splitlines() if "pick:" in ln]
    assert picks[0].endswith("pick: None") and len(picks) == 3, picks
    assert all(p.endswith(("pick: s1", "pick: s2")) for p in picks[1:]), picks
    served = warm.with_env(PREPV="1").production(SERVE_PICKS, path, bundle=bundle_path)
    assert served == {"y": [float(i + 1) for i in range(8)], "tunes": 0}, served


def test_an_edited_pick_is_served_unsigned_and_refused_signed(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """The README's Trust section now says it (doc only, this held before): a tune row's pick
    edited to another candidate, marked as having run, is served as stored from an unsigned
    bundle (no check runs on a hit), and refused from one signed before the edit, under
    `WARM_TRUSTED_KEYS` (reason `unsigned`: the tune measured again)."""
    warm, good = made
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    signed = tmp_path / "signed.warm"
    shutil.copyfile(good, signed)
    assert warm("sign", signed, "--key", key).returncode == 0
    other = next(t for t in ("tile8", "tile16") if t != _first_pick(good))
    serve = SERVE_MATMUL.format(examples=str(EXAMPLES)) + "print(len(r.tunes))"
    for bundle, trusted, measured in ((good, None, 0), (signed, f"{key}.pub", 1)):
        edited = _retimed(bundle, tmp_path / "edited.warm", {other: 1e-9}, pick=other)
        served = warm.with_env(**({"WARM_TRUSTED_KEYS": trusted} if trusted else {}))
        assert served.production(serve, bundle=edited) == measured


def test_a_pow2_bucket_rounds_every_int_as_a_size() -> None:
    """The README now says (doc only, this held before): `bucket="pow2"` rounds every int
    input, a flag or a stride too: 0 and 1 share a bucket, as do 3 and 4, and -1 with 1."""
    from warmcli import Kernel, Tunable

    kernel = Kernel("void k(int n) { (void)n; }", "k", "i")
    tunable = Tunable("t", {"a": kernel, "b": kernel}, lambda *a, **k: None, bucket="pow2")
    keys = {flag: tunable.shape_key((60, flag)) for flag in (-1, 0, 1, 3, 4)}
    assert keys[-1] == keys[0] == keys[1] == "64 1" and keys[3] == keys[4] == "64 4", keys


PARTIAL = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = '''
void sc(float *y, const float *x, int n) {
    for (volatile int k = 0; k < SPIN; k++) {}
    for (int i0 = 0; i0 + TILE <= n; i0 += TILE)
        for (int i = i0; i < i0 + TILE; i++) y[i] = 2 * x[i];
}'''
CANDIDATES = {f"t{t}": Kernel(SRC, "sc", "PPi", defines={"TILE": t, "SPIN": s})
              for t, s in ((1, 200000), (8, 0))}  # t8 leaves a tail of n % 8 unwritten
def launch(rt, kernel, y, x, n, *, stream=None):
    rt.launch(kernel, y, x, n, stream=stream)
T = Tunable("sc", CANDIDATES, launch, check="t1", restore=())
def workload(rt):
    x = rt.upload(np.arange(1, 8, dtype=np.float32))
    y = rt.buffer(7)
    rt.tune(T, y, x, 7)
    return y
"""
SERVE_PARTIAL = """
import json, runpy, sys, warmcli
rt = warmcli.runtime("host")
y = runpy.run_path(sys.argv[1])["workload"](rt)
print(json.dumps(rt.read(y).tolist()))
"""


def test_a_check_under_restore_nothing_judges_each_candidate_on_the_original_contents(
    warm: Warm, workload_file: Callable[..., Path], bundle_path: Path
) -> None:
    """Under `restore=()` (nothing kept) a checked candidate's run started from what the
    candidates before it left: t8, which writes nothing of a 7-element output, was compared
    on the reference's output left there, passed, and won (it does nothing: the fastest). A
    cold start computed [2, 4, ..., 14] (t8 ran on the reference's leftovers), the bundle's
    hit on a fresh buffer [0, ..., 0]. Now each candidate's checked run starts from the
    contents read before tuning: t8 is excluded, the hit computes what a cold start does."""
    path = workload_file(PARTIAL)
    ran = warm("run", path, "--bundle", bundle_path)
    assert ran.returncode == 0, ran.stderr
    cold = warm.production(SERVE_PARTIAL, path)
    assert cold == [2.0 * i for i in range(1, 8)], cold
    assert warm.production(SERVE_PARTIAL, path, bundle=bundle_path) == cold
    tunes = warm.json("stats", bundle_path)["tunes"]
    (t8,) = [c for c in tunes[0]["candidates"] if c["name"] == "t8"]
    assert t8["status"] == "failed" and "differs from candidate 't1'" in t8["reason"], t8
