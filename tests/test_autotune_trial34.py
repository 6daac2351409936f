"""Autotuning as a performance engineer leans on it, trial 34: the real CLI in a
subprocess, the host backend (real cc), real bundles.

- A tune key whose text is over what a bundle holds (a `key=` of megabytes, a tuple
  input of a million ints) was measured and stored, then every reader called the row
  corrupt: the verify pass failed (`1 tune(s) measured, not in the bundle`, exit 1)
  printing the megabytes of key twice; production missed it on every start. It is
  refused where the tune is called, in one line naming the tunable.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm

HEAD = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, int n) {{ for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f + V; }}"


def launch(rt, kernel, y, n, tag, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


KS = {{f"v{{i}}": Kernel(SRC, "f", "Pi", defines={{"V": 0, "W": i}}) for i in range(2)}}
T = Tunable("big", KS, launch{key})


def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8, {tag})
"""
HUGE = {  # the Tunable's key= and the tag input: a key text over 4 MiB characters
    "key=": (", key=lambda y, n, tag: tag", '"x" * (5 << 20)'),
    "input": ("", "tuple(range(1_000_000))"),
}


@pytest.mark.parametrize("case", HUGE)
def test_a_tune_key_over_what_a_bundle_holds_is_one_line_not_a_corrupt_row(
    warm: Warm, workload_file, bundle_path: Path, case: str
) -> None:
    key, tag = HUGE[case]
    script = workload_file(HEAD.format(key=key, tag=tag))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stderr[:2000]
    assert len(proc.stderr) < 2000, proc.stderr[:2000]
    [line] = proc.stderr.strip().splitlines()
    assert "tunable big: its tune key's text is" in line, line
    assert "over the 4194304 a bundle holds" in line, line


def test_the_key_text_limit_is_the_bundles() -> None:
    from warmcli.bundle.rows import MAX_TEXT_CHARS
    from warmcli.runtime.tune_spec import MAX_KEY_TEXT

    assert MAX_KEY_TEXT == MAX_TEXT_CHARS
