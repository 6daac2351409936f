"""`warm clean --older-than AGE`: what was not used (served or written) for AGE goes, a tune
with its pick's kernel; a production process then serves what was kept and compiles what
was removed, its results identical to a cold process's. Rows are made old by a raw SQLite
UPDATE of their (unsigned) times, as a month of not being served would leave them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm, scaled
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

DAY = 86400
# A production process over the bundle argv[1] (write-back where argv[2] is "write"),
# serving the requests argv[3:] (all three if none): what they computed, and what it
# compiled and tuned itself.
SERVICE = (
    """
import hashlib, json, sys
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
"""
    + scaled(3)
    + """
warmcli.use_bundle(sys.argv[1], write=sys.argv[2] == "write")
rt = warmcli.runtime("host")
h = hashlib.sha256()
for i in [int(a) for a in sys.argv[3:]] or range(3):
    h.update(one(rt, i))
r = warmcli.report()
print(json.dumps({"hash": h.hexdigest(), "compiled": sorted(m.key for m in r.kernels),
                  "tuned": sorted(m.key for m in r.tunes)}))
"""
)


def _serve(warm: Warm, bundle: Path, mode: str, *requests: int) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", SERVICE, str(bundle), mode, *map(str, requests)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _raw_age(bundle: Path, seconds: float, where: str = "") -> None:
    """A raw SQLite UPDATE (the test's, not warm's): every kernel matching `where` last used
    `seconds` ago, and (`where` none: every kernel) every tune written then."""
    then = time.time() - seconds
    with sqlite3.connect(bundle) as conn:
        conn.execute(f"UPDATE kernels SET last_used = ? WHERE {where or 1}", (then,))
        if not where:
            conn.execute("UPDATE tunes SET updated = ?", (then,))
    conn.close()


def _times(bundle: Path) -> dict[str, float]:
    with sqlite3.connect(bundle) as conn:
        rows = conn.execute("SELECT key, last_used FROM kernels").fetchall()
    conn.close()
    return dict(rows)


def _tune_keys(bundle: Path) -> set[str]:
    with sqlite3.connect(bundle) as conn:
        rows = conn.execute("SELECT lower(hex(key)) FROM tunes").fetchall()
    conn.close()
    return {r[0] for r in rows}


@pytest.fixture(scope="module")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder holding `app.warm`, a bundle a production write-back made cold, and `home`,
    the warm home it ran with (once per module), and what that cold process computed."""
    base = tmp_path_factory.mktemp("clean42")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    cold = _serve(Warm(dict(env, WARM_HOME=str(base / "home"))), base / "app.warm", "write")
    assert cold["compiled"] and cold["tuned"]  # it compiled and tuned everything itself
    return base, str(cold["hash"])


@pytest.fixture
def made(warm: Warm, tmp_path: Path, made_once: tuple[Path, str]) -> tuple[Path, str]:
    """A bundle a production write-back made cold (`made_once`'s, copied with the home it
    ran with as `warm`'s home, as that run there would leave them), and what that cold
    process computed. Its rows were used minutes ago at most: "today", as every test's
    ages are days."""
    base, cold = made_once
    shutil.copytree(base, tmp_path, dirs_exist_ok=True, symlinks=True)
    assert warm.env["WARM_HOME"] == str(tmp_path / "home")
    return tmp_path / "app.warm", cold


def test_older_than_removes_what_was_not_served_and_production_compiles_only_that(
    warm: Warm, made: tuple[Path, str]
) -> None:
    bundle, cold = made
    _raw_age(bundle, 40 * DAY)  # a month and more ago, all of it
    served = _serve(warm, bundle, "write", 2)  # today a writing worker serves request 2 only
    assert served["compiled"] == [] and served["tuned"] == []
    cutoff = time.time() - 30 * DAY
    old = {k for k, used in _times(bundle).items() if used < cutoff}
    recent = set(_times(bundle)) - old
    assert old and recent  # request 2's kernel and its tune's pick were stamped today
    tunes = _tune_keys(bundle)

    report = warm.json("clean", bundle, "--older-than", "30d")
    assert report["applied"] and report["older_than_seconds"] == 30 * DAY
    gone = {r["key"] for r in report["removed"]}
    assert {r["key"] for r in report["removed"] if r["kind"] == "kernel"} == old
    assert set(_times(bundle)) == recent
    removed_tunes = tunes - _tune_keys(bundle)
    assert {r["key"] for r in report["removed"] if r["kind"] == "tune"} == removed_tunes
    assert report["removed_by_reason"]["not used in the last 30d"] == len(old)
    assert warm("verify", bundle).returncode == 0  # no tune kept whose pick is gone

    again = _serve(warm, bundle, "read")  # every request, read-only
    assert again["hash"] == cold  # identical to the cold process's results
    assert set(again["tuned"]) == removed_tunes
    assert len(again["compiled"]) >= 2 and set(again["compiled"]) <= gone & old


def test_dry_run_lists_what_goes_and_changes_nothing_then_size_follows_age(
    warm: Warm, made: tuple[Path, str]
) -> None:
    bundle, _ = made
    keys = sorted(_times(bundle))
    _raw_age(bundle, 10 * DAY, f"key = '{keys[0]}'")  # one kernel 10 days old, the rest today
    before = hashlib.sha256(bundle.read_bytes()).hexdigest()
    dry = warm.json("clean", bundle, "--older-than", "1w", "--dry-run")
    assert not dry["applied"] and dry["removed_count"]["kernels"] == 1
    assert [r["key"] for r in dry["removed"] if r["kind"] == "kernel"] == [keys[0]]
    kept = warm.json("clean", bundle, "--older-than", "1w", "--dry-run", "--keep-foreign")
    assert kept["removed"] == dry["removed"]  # nothing here is foreign: the age alone
    text = warm("clean", bundle, "--older-than", "168h", "--dry-run")
    assert text.returncode == 0 and "not used in the last 1w" in text.stdout, text.stdout
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before

    both = warm.json("clean", bundle, "--older-than", "7d", "--max-size", "0", "--dry-run")
    reasons = both["removed_by_reason"]
    assert reasons["not used in the last 1w"] == 1  # age first, the rest then by size
    assert both["removed"][0]["key"] == keys[0]
    assert both["removed_count"]["kernels"] == len(keys) and both["binary_bytes"]["after"] == 0
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before


def test_a_time_in_the_future_is_taken_as_now_and_ages_from_then(
    warm: Warm, made: tuple[Path, str]
) -> None:
    bundle, cold = made
    keys = sorted(_times(bundle))
    _raw_age(bundle, 40 * DAY)
    _raw_age(bundle, -100 * 365 * DAY, f"key = '{keys[0]}'")  # a hostile or skewed clock
    start = time.time()
    dry = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    assert dry["used_in_future_count"] == {"kernels": 1, "tunes": 0}
    assert _times(bundle)[keys[0]] > start + 50 * 365 * DAY  # a dry run stamps nothing
    report = warm.json("clean", bundle, "--older-than", "30d")
    assert keys[0] not in {r["key"] for r in report["removed"]}  # kept: used "now"
    assert report["used_in_future_count"] == {"kernels": 1, "tunes": 0}
    assert start <= _times(bundle)[keys[0]] <= time.time()  # stamped with the clean's time
    time.sleep(0.05)
    later = warm.json("clean", bundle, "--older-than", "0s", "--dry-run")  # not new for ever
    assert keys[0] in {r["key"] for r in later["removed"]}
    assert later["used_in_future_count"] == {"kernels": 0, "tunes": 0}
    assert _serve(warm, bundle, "read")["hash"] == cold


def test_signed_rows_kept_stay_signed(warm: Warm, made: tuple[Path, str], tmp_path: Path) -> None:
    bundle, _ = made
    key = tmp_path / "k"
    assert warm("keygen", key).returncode == 0
    assert warm("sign", bundle, "--key", key).returncode == 0
    keys = sorted(_times(bundle))
    _raw_age(bundle, 40 * DAY, f"key = '{keys[0]}'")  # a time of use is not signed
    _raw_age(bundle, -DAY, f"key = '{keys[1]}'")  # nor is a future one stamped now
    report = warm.json("clean", bundle, "--older-than", "30d")
    assert report["removed_count"]["kernels"] >= 1
    checked = warm.json("verify", bundle)
    signatures = json.dumps(checked)
    assert "INVALID" not in signatures and '"valid": true' in signatures, signatures


def test_a_tune_lives_by_its_picks_kernel_else_by_when_it_was_written(
    warm: Warm, made: tuple[Path, str]
) -> None:
    bundle, _ = made
    with sqlite3.connect(bundle) as conn:  # raw: tunes written long ago, kernels used today
        conn.execute("UPDATE tunes SET updated = ?", (time.time() - 40 * DAY,))
    conn.close()
    dry = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    assert dry["removed_count"] == {"kernels": 0, "tunes": 0}  # served: their picks were
    picks = {t["key"]: t["pick_kernel"] for t in warm.json("stats", bundle)["tunes"]}
    gone = next(iter(picks.values()))
    with sqlite3.connect(bundle) as conn:  # raw: that pick's kernel gone (an earlier clean's)
        conn.execute("DELETE FROM kernels WHERE key = ?", (gone,))
    conn.close()
    dry = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    tunes = {r["key"] for r in dry["removed"] if r["kind"] == "tune"}
    assert tunes == {t for t, k in picks.items() if k == gone}
    assert dry["removed_by_reason"] == {"not used in the last 30d": len(tunes)}
    assert warm.json("clean", bundle, "--older-than", "60d", "--dry-run")["removed"] == []


def test_ctrl_c_at_any_moment_of_an_age_clean_loses_nothing_and_says_what_is_kept(
    warm: Warm, made: tuple[Path, str], tmp_path: Path
) -> None:
    bundle, _ = made
    _raw_age(bundle, 40 * DAY)  # all of it goes: a removal, a vacuum
    source = bundle.read_bytes()
    started = time.monotonic()
    assert warm("clean", bundle, "--older-than", "30d").returncode == 0
    whole, took = len(_times(Path(bundle))), time.monotonic() - started
    assert whole == 0
    for i in range(6):  # SIGINT spread over a clean's run: startup, plan, removal, vacuum
        copy = tmp_path / f"c{i}.warm"
        copy.write_bytes(source)
        proc = subprocess.Popen(
            [sys.executable, "-m", "warmcli", "clean", copy, "--older-than", "30d"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warm.env, cwd=ROOT,
        )  # fmt: skip
        time.sleep(took * (0.4 + i / 10))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        left = len(_times(copy))
        assert "Traceback" not in err and left in (0, 6), err
        if proc.returncode == 130 and left == 0:  # once committed: said, and kept
            assert "removed 6 kernel(s) and 3 tune(s) (kept" in err, err
        elif proc.returncode == 130:
            assert "removed 6" not in err, err
        else:
            assert proc.returncode == 0 and left == 0, out + err


def test_an_age_that_is_none_is_one_line_and_exit_2_touching_nothing(
    warm: Warm, made: tuple[Path, str]
) -> None:
    bundle, _ = made
    before = bundle.read_bytes()
    for age in ("-1d", "1y", "", "1e400d", "99999999999d", "30", "d", "1.d", " 30d"):
        proc = warm("clean", bundle, "--older-than", age)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (age, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("warm: error: --older-than: "), lines
        assert bundle.read_bytes() == before


def test_max_size_alone_takes_a_time_in_the_future_as_now(
    warm: Warm, made: tuple[Path, str]
) -> None:
    """A kernel dated a century ahead (a bundle from elsewhere) is taken by `--max-size`
    alone as used at the clean's time, and a clean that writes stamps it so: it ages from
    then, never kept ahead of everything this machine uses for a century."""
    bundle, cold = made
    keys = sorted(_times(bundle))
    _raw_age(bundle, 2 * DAY)
    _raw_age(bundle, -100 * 365 * DAY, f"key = '{keys[0]}'")
    _raw_age(bundle, DAY, f"key = '{keys[1]}'")  # used after every other but the future one
    everything = warm.json("clean", bundle, "--max-size", "0", "--dry-run")
    order = [r["key"] for r in everything["removed"] if r["kind"] == "kernel"]
    assert order[-1] == keys[0], order  # evicted last: taken as used now, after keys[1]
    assert order.index(keys[1]) == len(order) - 2, order
    assert everything["used_in_future_count"]["kernels"] == 0  # every one evicted
    start = time.time()
    report = warm.json("clean", bundle, "--max-size", str(2**40))  # nothing to evict
    assert report["used_in_future_count"] == {"kernels": 1, "tunes": 0}
    assert start <= _times(bundle)[keys[0]] <= time.time()  # stamped: ages from now on
    assert _serve(warm, bundle, "read")["hash"] == cold
