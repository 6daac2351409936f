"""Production write-backs into one bundle, at once or one after another: nothing is lost.

`test_upgrade42::test_production_write_backs_of_both_at_once` (stop 42's warm and today's
writing back into one bundle, each launching `zero`, which each keys differently since
toolid46 put `as` and `ld` into a host compiler's identity) found 15 kernel rows, not 16,
about 1 run in 3 under load: stop 42's `zero` missing, its process reporting one kernel
fewer compiled. Nothing was lost: a build is served wherever its binary runs (README,
"Where a build is served"; `BundleLookup.key` in both warms: no build of its own toolchain,
then `_served_key`, another toolchain's that runs here), and a kernel is keyed at its first
launch, reading the bundle then. Where today's process (faster to import, with less to do)
had committed its write-back before stop 42's first launch keyed `zero`, stop 42 was served
today's build, compiled nothing for it and had nothing of it to write back; either warm is
served the other's alike (`test_a_write_back_committed_first_serves_the_other_its_build`).
The upgrade test now has both look their first kernel up before either exits
(`upgrades.MEETING`), as "at once" meant. Two of today's processes writing back at once,
round after round, some meeting so both write back together, never lose a kernel or tune
either process reported built or measured. Real processes (a fresh `python -c` each where
two run at once; those run one after another each a fork of one that imported its warm once,
`tests/forked_tool_env.py`), real SQLite files and the system C compiler; stop 42's warm is
`/tmp/base42` where it is, else a `git worktree` of 81fe69a (skipped where neither can be
had).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from forked_tool_env import ToolEnvPythons
from upgrades import SERVE, Fleet, meeting, release

WORKLOAD = """
import os
from warmcli import Kernel, Tunable

DEVICE = "host"
W, R = int(os.environ["W"]), int(os.environ["R"])  # a process's own, and a round's shared
ZERO = Kernel("void zero(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 0.25f; }",
              "zero", "Pi", options=("-std=c11",))


def k(name, **defines):
    return Kernel("void %s(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * A + B; }"
                  % name, name, "Pi", defines=defines)


OWN = [k("own", A=W, B=b) for b in (1, 2)]
SHARED = k("shared", A=R, B=3)


def run(rt, kernel, x, n, stream=None):
    rt.launch(kernel, x, n, stream=stream)


# candidates computing alike (`V` unused): a cold start's pick computes a hit's bits
MINE = Tunable(f"mine{W}", {f"v{v}": k("mine", A=W, B=1, V=v) for v in (1, 2)}, run)
BOTH = Tunable(f"both{R}", {f"v{v}": k("both", A=R, B=2, V=v) for v in (1, 2)}, run)


def workload(rt):
    x = rt.buffer(64, "float32")
    rt.launch(ZERO, x, 64)
    for kernel in (*OWN, SHARED):
        rt.launch(kernel, x, 64)
    rt.tune(MINE, x, 64)
    rt.tune(BOTH, x, 64)
    return [x]
"""
# `SERVE`, naming what the process compiled (kernel names and keys) and measured (tune keys).
NAMED = SERVE.replace(
    '"compiled": len(done.kernels)',
    '"compiled": sorted([k.name, k.key] for k in done.kernels), '
    '"measured": sorted(t.key for t in done.tunes)',
)
assert NAMED != SERVE
WRITE = {"WARM_BUNDLE_WRITE": "1"}


@pytest.fixture(scope="module")
def old() -> Iterator[Path]:
    """Stop 42's warm: `/tmp/base42`, else a worktree of 81fe69a made for this module."""
    yield from release("81fe69a", Path("/tmp/base42"))


@pytest.fixture
def fleet(tmp_path: Path, old: Path) -> Fleet:
    f = Fleet(tmp_path, old)
    f.workload.write_text(WORKLOAD)
    return f


@pytest.fixture(scope="module")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolEnvPythons]:
    """A server a warm, whatever W and R a process sets; started in a folder holding no warm
    (`python -c`'s first import folder), so each imports the one its PYTHONPATH names."""
    pythons = ToolEnvPythons(tmp_path_factory.mktemp("servers"), "W", "R")
    yield pythons
    pythons.close()


def _serve(
    pythons: ToolEnvPythons, f: Fleet, code: Path, bundle: Path | str, **env: str
) -> dict[str, object]:
    """`f.serve(code, bundle, script=NAMED, **env)`, a fork of `pythons`' server of `code`."""
    environ = dict(f.env, PYTHONPATH=str(code), WARM_BUNDLE=str(bundle), **env)
    whose = pythons.run("import warmcli; print(warmcli.__file__)", env=environ, cwd=f.folder)
    assert whose.stdout.startswith(str(code)), (code, whose.stdout, whose.stderr)
    done = pythons.run(NAMED, str(f.workload), env=environ, cwd=f.folder, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _kernels(bundle: Path) -> dict[str, str]:
    """A bundle's kernel rows: key -> entry name, read only."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        return {str(k): str(e) for k, e in db.execute("SELECT key, entry FROM kernels")}


def _tunes(bundle: Path) -> set[str]:
    """A bundle's tune keys (hex), read only."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        return {bytes(k).hex() for (k,) in db.execute("SELECT key FROM tunes")}


def _names(done: dict[str, object]) -> list[str]:
    return sorted(name.split("[")[0] for name, _ in done["compiled"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("first", ["new", "old"])
def test_a_write_back_committed_first_serves_the_other_its_build(
    fleet: Fleet, pythons: ToolEnvPythons, first: str
) -> None:
    """The failing runs' order made sure: one warm's process ends (its write-back committed)
    before the other's starts; the second is served the first's `zero` (keyed by another
    toolchain: `as` and `ld` in today's), builds only its own kernels, writes back those, and
    computes a cold start's bits."""
    f, bundle = fleet, fleet.folder / "prod.warm"
    one, two = (f.new, f.old) if first == "new" else (f.old, f.new)
    cold = _serve(pythons, f, two, "", W="2", R="1")
    assert "zero" in _names(cold)
    done = _serve(pythons, f, one, bundle, W="1", R="1", **WRITE)
    assert _names(done) == ["both", "both", "mine", "mine", "own", "own", "shared", "zero"]
    zero = [key for name, key in done["compiled"] if name == "zero"]  # type: ignore[attr-defined]
    then = _kernels(bundle)
    assert len(then) == 8 and zero[0] in then
    served = _serve(pythons, f, two, bundle, W="2", R="1", **WRITE)
    # its own tune's candidates and own kernels only: `zero`, `shared` and `both`'s pick
    # (the tune's key holds no toolchain: served) are the first's builds
    assert _names(served) == ["mine", "mine", "own", "own"], served
    assert served["digest"] == cold["digest"]
    rows = _kernels(bundle)
    assert len(rows) == 12 and set(then) < set(rows)
    assert [k for k, e in rows.items() if e == "zero"] == zero  # the first's build only
    assert all(key in rows for _, key in served["compiled"])  # type: ignore[attr-defined]


def test_two_of_todays_write_backs_at_once_lose_no_row(fleet: Fleet) -> None:
    """Two rounds of `write_back_rounds`: one apart, one meeting (the six of stop 48:
    `make stress`, `..._stress`)."""
    write_back_rounds(fleet, 2)


@pytest.mark.slow
def test_two_of_todays_write_backs_at_once_lose_no_row_stress(fleet: Fleet) -> None:
    write_back_rounds(fleet, 6)


def write_back_rounds(fleet: Fleet, rounds: int) -> None:
    """Round after round, two of today's processes over one bundle at once, each with
    kernels and a tune of its own and some of the round's both launch (each builds them, or
    is served the other's where its write-back came first); every other round they meet
    after their first launch, so both write back together. Every kernel and tune either
    reported built or measured is in the bundle after the round, and all earlier rows."""
    f, bundle = fleet, fleet.folder / "both.warm"
    meet = f.folder / "meet"
    held: dict[str, str] = {}
    tunes: set[str] = set()
    for r in range(rounds):
        more: dict[str, str] = dict(WRITE, R=str(r + 1))
        script = NAMED
        if r % 2:
            (room := meet / str(r)).mkdir(parents=True)
            more.update(MEET=str(room), MEET_N="2")
            script = meeting(NAMED)
        started = [
            f.serving(f.new, bundle, script=script, W=str(10 * r + w), **more) for w in (1, 2)
        ]
        done = [f.served(p) for p in started]
        rows, stored = _kernels(bundle), _tunes(bundle)
        built = {key for d in done for _, key in d["compiled"]}  # type: ignore[attr-defined]
        measured = {key for d in done for key in d["measured"]}  # type: ignore[attr-defined]
        assert built <= set(rows) and measured <= stored, (r, done)
        assert set(held) <= set(rows) and tunes <= stored, r
        assert len(stored) == len(tunes) + 3, r  # each's own tune and the round's shared one
        held, tunes = rows, stored
    assert len(held) == 1 + rounds * (2 * 2 + 2 * 2 + 1 + 2), held  # `zero` once, then each round's
