"""A malformed row production needs, and a tune whose pick is not one of its candidates:
production, `warm verify` and `warm check` agree. Production serves everything else and
treats the row as a miss with reason `corrupt` (explained, counted, refused under strict
mode); verify and check fail the bundle naming the entry. A text over its limit is
refused by its length, never read. Real parts: a bundle from
`warm run`, edited with plain SQL, served by a real production process (a fork of one that
imported numpy and warmcli once, `tests/forked_python.py`; one whose memory peak is
measured, started), the CLI's commands forked (`tests/forked_cli.py`).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from big_bundle import peak_rss
from conftest import EXAMPLES, ROOT, Warm
from forked_python import ForkedPythons

EXAMPLE = EXAMPLES / "matmul_host.py"
FIRST_TUNE = "WHERE rowid = (SELECT min(rowid) FROM tunes)"
CASES = {  # name: (what production misses, the SQL that spoils one row, what verify says)
    "kernel field": (
        "kernel",
        "UPDATE kernels SET seconds = 'abc' WHERE entry = 'row_sum'",
        "seconds",
    ),
    "tune candidates": ("tune", f"UPDATE tunes SET candidates = '{{}}' {FIRST_TUNE}", "candidates"),
    "pick not a candidate": (
        "tune",
        f"UPDATE tunes SET pick = 'tile999' {FIRST_TUNE}",
        "not one of its candidates",
    ),
    "measured, no pick": (
        "tune",
        f"UPDATE tunes SET pick = NULL {FIRST_TUNE}",
        "measured tune with no pick",
    ),
}
SERVE = """
import json, runpy, sys, warmcli
from warmcli import ProcessMode, ProcessModeOverride, StatisticsCollector
example = runpy.run_path(sys.argv[1])
collector = StatisticsCollector()
with ProcessModeOverride(ProcessMode.EXECUTE, collector):
    example["workload"](warmcli.runtime("host"))
r = collector.reader()
print(json.dumps({"kernel": r.compilation.misses, "tune": r.autotune.misses,
                  "lines": [m.line() for m in r.misses()]}))
"""


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory, made_once: Path) -> Path:
    """The example's bundle, as `warm run matmul_host.py --bundle sound.warm --quiet` makes
    it (conftest's `made_once`, which runs that command once a test process, copied)."""
    path = tmp_path_factory.mktemp("malformed") / "sound.warm"
    shutil.copyfile(made_once / "good.warm", path)
    return path


def spoiled(warmed: Path, tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "spoiled.warm"
    shutil.copyfile(warmed, path)
    conn = sqlite3.connect(path)
    assert conn.execute(sql).rowcount == 1
    conn.commit()
    conn.close()
    return path


_python = ForkedPythons(ROOT)  # `serve`'s servers, one an environment apart from WARM_*


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """`serve`'s forking servers, ended with the module."""
    yield
    _python.close()


def serve(path: Path, warm: Warm, **extra: str) -> subprocess.CompletedProcess[str]:
    """`SERVE` of the example over `path` (a fork: what it serves and says is the test)."""
    env = {**warm.env, "WARM_BUNDLE": str(path), **extra}
    return _python(env).run(SERVE, str(EXAMPLE), env=env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("case", CASES)
def test_production_verify_and_check_agree_on_a_malformed_row(
    case: str, warmed: Path, warm: Warm, tmp_path: Path
) -> None:
    kind, sql, problem = CASES[case]
    path = spoiled(warmed, tmp_path, sql)

    served = serve(path, warm)
    assert served.returncode == 0, served.stderr
    doc = json.loads(served.stdout)
    assert doc[kind] == {"corrupt": 1}, doc
    other = "tune" if kind == "kernel" else "kernel"
    assert doc[other] == {}, doc  # everything else is served
    [line] = doc["lines"]
    assert line.startswith(f"{kind} ") and ": corrupt: bundle's entry: corrupt " in line
    assert problem in line

    strict = serve(path, warm, WARM_STRICT="1")
    assert strict.returncode == 1
    assert "StrictMissError: strict mode: would" in strict.stderr
    assert f": corrupt: bundle's entry: corrupt {kind} entry" in strict.stderr

    verified = warm("verify", path)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"corrupt {kind} entry" in verified.stdout and problem in verified.stdout
    assert not re.search(r"\b[A-Z][a-z]+Error\b", verified.stdout)  # words, not Python's names

    checked = warm("check", path, "--json")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["unservable_count"] == 1
    [entry] = report["unservable"]
    assert (entry["kind"], entry["reason"]) == (kind, "corrupt") and problem in entry["detail"]
    table = warm("check", path)
    assert table.returncode == 1 and "corrupt entry" in table.stdout


def test_the_sound_bundle_passes_all_three(warmed: Path, warm: Warm) -> None:
    served = serve(warmed, warm, WARM_STRICT="1")
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == {"kernel": {}, "tune": {}, "lines": []}
    assert warm("verify", warmed).returncode == 0
    assert warm("check", warmed).returncode == 0


HUGE = f"UPDATE tunes SET candidates = '[' || hex(zeroblob(70000000)) || ']' {FIRST_TUNE}"


def test_an_oversized_text_is_refused_by_its_length_never_read(
    warmed: Path, warm: Warm, tmp_path: Path
) -> None:
    """A 140 MB `candidates` text: production misses that one tune (corrupt) and serves the
    rest, `stats` and `verify` refuse the bundle in one line; none of them reads the text
    (each peaks within 32 MiB of the same process on the sound bundle)."""
    path = spoiled(warmed, tmp_path, HUGE)
    produce = [sys.executable, "-c", SERVE, str(EXAMPLE)]
    served, peak = peak_rss(produce, {**warm.env, "WARM_BUNDLE": str(path)})
    _, sound = peak_rss(produce, {**warm.env, "WARM_BUNDLE": str(warmed)})
    assert served.returncode == 0, served.stderr
    doc = json.loads(served.stdout)
    assert (doc["kernel"], doc["tune"]) == ({}, {"corrupt": 1}), doc
    assert peak - sound < 32, (peak, sound)
    for command in ("stats", "verify"):
        args = [sys.executable, "-m", "warmcli", command, str(path), "--json"]
        refused, peak = peak_rss(args, warm.env)
        _, sound = peak_rss([*args[:4], str(warmed), "--json"], warm.env)
        assert refused.returncode in (1, 2), refused.stdout + refused.stderr
        assert "Traceback" not in refused.stderr
        assert "corrupt" in refused.stdout + refused.stderr
        assert peak - sound < 32, (command, peak, sound)
