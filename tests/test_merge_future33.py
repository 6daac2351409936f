"""A tune measurement dated in the future does not win every merge.

Newer wins a merge; a tune row dated far after the merge (a clock set wrong, or a bundle
from elsewhere dated 1e300 to win every merge for ever) displaced the user's own
measurements, each later one too. One dated more than a day ahead of the merging machine's
clock now ranks below every measurement dated sanely; of two such, the earlier input's stays.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_format3 import _tune

from warmcli.bundle.store import Bundle


def _bundle(path: Path, when: float, pick: str) -> Path:
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[dataclasses.replace(_tune(0), measured_at=when, pick=pick)])
    return path


def _pick(warm: Warm, *inputs: Path, out: Path) -> str:
    warm.json("merge", *inputs, "-o", out, "--force")
    return warm.json("stats", out)["tunes"][0]["pick"]  # type: ignore[no-any-return]


def test_a_measurement_dated_in_the_future_does_not_outrank_one_dated_sanely(
    warm: Warm, tmp_path: Path
) -> None:
    theirs = _bundle(tmp_path / "theirs.warm", 1e300, "c2")
    ahead = _bundle(tmp_path / "ahead.warm", time.time() + 3 * 86400, "c2")
    mine = _bundle(tmp_path / "mine.warm", time.time() - 3600, "c0")
    out = tmp_path / "out.warm"
    for future in (theirs, ahead):
        assert _pick(warm, mine, future, out=out) == "c0"
        assert _pick(warm, future, mine, out=out) == "c0"
    assert _pick(warm, theirs, ahead, out=out) == "c2"  # both insane: the first input's
    doc = warm.json("merge", mine, theirs, "-o", out, "--force")
    assert [c["kept_pick"] for c in doc["choices"]] == ["c0"], doc["choices"]


def test_dates_within_a_day_ahead_and_past_ones_rank_by_date(warm: Warm, tmp_path: Path) -> None:
    """A clock a few hours ahead is another machine's, not an attack: its newer measurement
    wins, as a past newer one does."""
    old = _bundle(tmp_path / "old.warm", time.time() - 100, "c0")
    skewed = _bundle(tmp_path / "skewed.warm", time.time() + 3 * 3600, "c2")
    new = _bundle(tmp_path / "new.warm", time.time() - 10, "c2")
    out = tmp_path / "out.warm"
    assert _pick(warm, old, skewed, out=out) == "c2"
    assert _pick(warm, new, old, out=out) == "c2"
    assert _pick(warm, old, new, out=out) == "c2"
