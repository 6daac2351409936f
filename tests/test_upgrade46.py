"""Since warm 46 a host build's toolchain names the `as` and `ld` cc runs: what else must know.

`warm clean` judges a build of another toolchain superseded by "this machine's" toolchain of
that compiler (`warmcli.ops.foreign`), read from the machine's inventory
(`warmcli.backends.machine.Inventory.toolchains`). That read cc's version line alone, while
today's builds name `cc:...; as ...; ld ...` (and where `COMPILER_PATH` or `GCC_EXEC_PREFIX`
is set, the programs and values found there): so a bundle a fleet mid-rollout holds both
warms' builds in (stop 42's, named by cc's line alone, beside today's re-warm) lost today's own
builds to today's `warm clean`, "superseded by this machine's" stop 42 line, and kept stop 42's,
and the next `warm run` built them again; and a bundle holding another cc's builds beside
today's own had none of them removed (`test_cli_depth`'s clean of a foreign cc's builds failed
on main). Stop 42's warm (commit 81fe69a, `/tmp/base42` or a
`git worktree` of it, as `test_upgrade42`'s) builds the older ones; real CLI processes, real
production processes, real SQLite files and the system C compiler throughout.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from upgrades import STORED, Fleet, keys, release, stored

BASE = "81fe69a"
CHECKOUT = Path("/tmp/base42")
WORKLOAD = '''
"""One launched kernel and a tune of two candidates."""
import numpy as np
from warmcli import Kernel, Tunable

SRC = "void axpy(const float *x, float *y, int n) { for (int i = 0; i < n; i++) y[i] += A * x[i]; }"
ZERO = Kernel("void zero(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 0.5f; }",
              "zero", "Pi")
AXPY = Tunable("axpy", {f"a{a}": Kernel(SRC, "axpy", "PPi", defines={"A": a}) for a in (2, 3)},
               lambda rt, k, *args, stream=None: rt.launch(k, *args), check="a2")


def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    y = rt.buffer(64, "float32")
    rt.launch(ZERO, y, 64)
    rt.tune(AXPY, x, y, 64)
    return [y]
'''


@pytest.fixture(scope="module")
def old() -> Iterator[Path]:
    """Stop 42's warm: `/tmp/base42`, else a worktree of 81fe69a made for this module."""
    yield from release(BASE, CHECKOUT)


def _builds(bundle: Path) -> dict[str, tuple[str, str]]:
    """Each kernel's key to what it builds (its key's components less the toolchain: entry,
    defines ...) and the toolchain that built it."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT key, components FROM kernels").fetchall()
    built = {}
    for key, components in rows:
        parts = json.loads(components)
        toolchain = parts.pop("toolchain")
        built[key] = (json.dumps(parts, sort_keys=True), toolchain)
    return built


def test_todays_clean_keeps_its_own_builds_and_drops_stop_42s_it_supersedes(
    tmp_path: Path, old: Path
) -> None:
    """Stop 42's `zero` and `axpy` pick go, superseded by today's; its unpicked candidate
    stays (today's warm built none). The tune, measured on stop 42's pick, is measured again
    by the next `warm run` (README: a pick measured on a build the bundle no longer holds),
    building today's other candidate; then each warm's production serves the bundle."""
    f = Fleet(tmp_path, old)
    f.workload.write_text(WORKLOAD)
    bundle = tmp_path / "fleet.warm"
    cold = f.serve(f.new, None)
    assert cold["compiled"] == 3 and cold["tuned"] == ["axpy"], cold
    done = stored(f.ok(f.old, "run", f.workload, "-b", bundle, "-q"))
    assert done == STORED.format(bundle, 3, 1), done
    theirs = _builds(bundle)
    # Today's re-warm builds what it launches (`zero` and the pick) beside stop 42's.
    assert f.warm(f.new, bundle, cuda=False) == [STORED.format(bundle, 2, 0)]
    mine = {k: b for k, b in _builds(bundle).items() if k not in theirs}
    assert sorted(json.loads(w)["entry"] for w, _ in mine.values()) == ["axpy", "zero"], mine
    (here,) = {t for _, t in mine.values()}
    assert "; as " in here and "; ld " in here, here
    removed = json.loads(f.ok(f.new, "clean", bundle, "--json"))["removed"]
    gone = {k for k, (what, _) in theirs.items() if what in {w for w, _ in mine.values()}}
    assert len(gone) == 2 and {r["key"] for r in removed} == gone, (removed, theirs, mine)
    assert all(r["reason"].endswith(f"(superseded by this machine's {here})") for r in removed)
    assert set(keys(bundle)[0]) == {*theirs, *mine} - gone
    assert f.warm(f.new, bundle, cuda=False) == [STORED.format(bundle, 1, 1)]
    assert f.warm(f.new, bundle, cuda=False) == [STORED.format(bundle, 0, 0)]
    for code in (f.new, f.old):
        assert f.serve(code, bundle, WARM_STRICT="1") == dict(cold, compiled=0, tuned=[])
