"""Output in a narrow terminal, and under a COLUMNS that is no width.

Through the real CLI in a subprocess, on a real bundle (warmed once for the module): with
COLUMNS from 19 down to 1, `warm stats` shows every name with its value beside it (a name
is cut, `…`, before a value is lost), never blank, no line wider than COLUMNS (10 at
least); with COLUMNS=0 or not a number it prints as it does with no COLUMNS, and so does
an error on stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import ForkedWarm, forked_warm  # noqa: F401  (conftest's `warm`, forked)

INC = """\
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(INC, rt.upload(np.zeros(4, np.int32)), 4)
"""

# Every name `warm stats` shows beside a value, in its manifest and its records.
NAMES = (
    "bundle",
    "format",
    "created",
    "updated",
    "device",
    "toolchain",
    "device / tunable",
    "arch",
    "kernels",
    "binary bytes",
    "kernel",
    "bytes",
    "compile",
    "key",
    "last used",
)
TITLES = ("Contents", "Kernels (1)", "Kernels", "(1)")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """The bundle of `INC`, warmed once for the module (each test only reads it)."""
    base = tmp_path_factory.mktemp("narrow")
    (base / "workload.py").write_text(INC)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    assert warm("run", base / "workload.py", "-b", base / "bundle.warm", "-q").returncode == 0
    return base / "bundle.warm"


def _with(warm: Warm, columns: str | None) -> Warm:
    env = {k: v for k, v in warm.env.items() if k != "COLUMNS"}
    return Warm(env if columns is None else dict(env, COLUMNS=columns))


def _bare(line: str) -> bool:
    """A line that is a name with no value beside it (the name whole or cut)."""
    text = line.strip()
    cut = text.endswith("…") and any(n.startswith(text[:-1]) for n in NAMES)
    return bool(text) and (text in NAMES or cut) and text not in TITLES


@pytest.mark.parametrize("columns", [19, 15, 12, 10, 5, 1])
def test_a_narrow_listing_cuts_names_and_keeps_every_value(
    warm: Warm, made: Path, columns: int
) -> None:
    proc = _with(warm, str(columns))("stats", made)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= max(columns, 10), proc.stdout
    assert not [line for line in lines if _bare(line)], proc.stdout
    kernel_rows = [line.split() for line in lines if line.startswith(("kernel ", "kern…", "ker…"))]
    assert ["inc"] in [row[1:] for row in kernel_rows], proc.stdout  # the value, whole
    cut = [ln for ln in lines if ln.startswith("dev") and "…" in ln.split()[0]]
    tunable = [ln for ln in lines if ln.startswith("device /")] + cut
    assert any(ln.split()[-1] == "host" for ln in tunable), proc.stdout  # not `h`, `o`, ...


def test_columns_zero_or_no_number_prints_as_no_columns(warm: Warm, made: Path) -> None:
    unset = _with(warm, None)("stats", made)
    assert unset.returncode == 0 and "inc" in unset.stdout, unset.stderr
    for columns in ("0", "abc", "-3", ""):
        proc = _with(warm, columns)("stats", made)
        assert (proc.returncode, proc.stdout) == (0, unset.stdout), (columns, proc.stdout)
        missing = _with(warm, columns)("stats", made.parent / "nope.warm")
        assert missing.returncode == 2
        assert "no such bundle" in missing.stderr, (columns, missing.stderr)
