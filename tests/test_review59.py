"""Holes review59 found reading stop 59's merges (tune59, fold59, install59), each reproduced
for real: the real CLI in a subprocess, a real bundle from `warm run` (the host example, built
by the system C compiler), edited with sqlite3 as an attacker would.

tune59 bounded the width of a tune's median and ratio as `warm stats` and `warm diff` show
them (a row's times are untrusted, kept up to 2^993 s); a kernel's compile time, the column
beside it in the same listing and as untrusted (any finite time not negative is kept), was
still shown with every digit: 1e200 s a cell of 204 characters.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm

from warmcli.build_clock import clock_reason, reads_clock

LONG_NUMBER = re.compile(r"[0-9][0-9,.]{24,}")  # a figure of more than 25 characters


def _compile_time(good: Path, out: Path, seconds: float) -> Path:
    """`good` copied to `out`, its first kernel's compile time `seconds`."""
    shutil.copyfile(good, out)
    with sqlite3.connect(out) as conn:
        conn.execute(
            "UPDATE kernels SET seconds = ? WHERE rowid = (SELECT min(rowid) FROM kernels)",
            (seconds,),
        )
    conn.close()
    return out


def test_a_hostile_compile_time_is_shown_in_a_figure_of_bounded_width(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Before: `warm stats` showed a kernel's compile time of 1e200 s as `99999...671.000`
    (204 characters). Now it reads `1e+200`; a real one keeps its three decimals."""
    warm, good = made
    edited = _compile_time(good, tmp_path / "edited.warm", 1e200)
    for bundle in (good, edited):
        shown = warm("stats", bundle)
        assert shown.returncode == 0, shown.stderr
        assert not LONG_NUMBER.search(shown.stdout), LONG_NUMBER.search(shown.stdout)
        assert re.search(r"\b[0-9]+\.[0-9]{3}\b", shown.stdout), shown.stdout  # (real ones)
    assert "1e+200" in warm("stats", edited).stdout


# A host kernel that spells `__TIME__` across a line splice (`__TI\` ending a line, `ME__`
# opening the next: the preprocessor joins them before it reads a word), in its own source or
# in a header it includes; its value is the seconds into the day of its build.
SPLICED = r"""
import os
import numpy as np
from warmcli import Kernel

DEVICE = "host"
HEAD = {head!r}
K = Kernel(
    HEAD + "void stamp(float *x) {{ const char *t = CLOCK; "
    "x[0] = ((t[0]-'0')*10 + (t[1]-'0'))*3600 + ((t[3]-'0')*10 + (t[4]-'0'))*60 "
    "+ (t[6]-'0')*10 + (t[7]-'0'); }}",
    "stamp", "P", options={options},
)

def workload(rt):
    x = rt.upload(np.zeros(1, np.float32))
    rt.launch(K, x)
    return x
"""
SPLICES = {  # where the kernel spells it: (its source's head, its options)
    "source": ("#define CLOCK __TI\\\nME__\n", "[]"),
    "header": ('#include "stamp.h"\n', '["-I" + os.path.dirname(__file__)]'),
}


@pytest.mark.parametrize("where", sorted(SPLICES))
def test_a_kernel_spelling_the_clock_across_a_line_splice_is_never_served(
    warm: Warm, tmp_path: Path, where: str
) -> None:
    """Warmed at 00:00:00 (SOURCE_DATE_EPOCH=0), run at 23:59:59. Before: the clock test read
    the text unspliced, found no `__TIME__`, and the run stored the build: a hit computed 0, the
    warm run's time, where a cold start computes 86399. Now it is unkeyed as `__TIME__` is."""
    from test_trial58a import warmed_at_midnight_served_at_its_last_second

    head, options = SPLICES[where]
    workload = tmp_path / "w.py"
    workload.write_text(SPLICED.format(head=head, options=options))
    (tmp_path / "stamp.h").write_text("#define CLOCK __TI\\\r\nME__\n")  # (a CRLF line too)
    done = warmed_at_midnight_served_at_its_last_second(warm, workload, tmp_path / "b.warm")
    assert "its build reads the clock (__TIME__)" in done.stdout, done.stdout


SPLICED_TEXTS = {  # a text, and the clock macro it spells once its lines are spliced
    "__TI\\\nME__": "__TIME__",
    "__DA\\ \t\r\nTE__": "__DATE__",  # (blanks after the backslash, a CRLF)
    "__TIMESTAMP_\\\r_": "__TIMESTAMP__",  # (a lone CR ends a line)
    "a\\nb": "",  # (an escape, no line's end)
    "\\": "",
    "TI\\\nME": "",
}


@pytest.mark.parametrize("text", sorted(SPLICED_TEXTS))
def test_the_clock_test_splices_lines_alike_for_every_text(text: str) -> None:
    """A source, header, option and define value are judged alike, spliced as GCC splices."""
    macro = SPLICED_TEXTS[text]
    assert clock_reason(text) == clock_reason(text.encode())
    assert clock_reason(text) == (macro and f"its build reads the clock ({macro})")
    assert reads_clock("", (), (("STAMP", text),)) == clock_reason(text)
    assert reads_clock("", (f"-DS={text}",), ()) == clock_reason(text)
