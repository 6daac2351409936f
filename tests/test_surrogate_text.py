"""Text UTF-8 cannot encode (a lone surrogate, `"\\ud800"`) in a kernel's name, source,
option or define, a tunable's name or candidate name, or a `key=` value, is refused where
it is made or keyed, in one line naming it: a kernel's or tunable's name crashed `warm run`
with a traceback as it stored them, the rest was a bare `UnicodeEncodeError`. The real CLI
in a subprocess, the host backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

HEAD = r"""
from warmcli import Kernel, Tunable

DEVICE = "host"
S = "void f(float *x, int n) { }"
"""
CASES = {
    "kernel name": (
        r'K = Kernel(S, "f", "Pi", name="l\ud800")',
        "kernel f: its name holds '\\ud800'",
    ),
    "kernel source": (
        r'K = Kernel(S + "// \ud800", "f", "Pi")',
        "kernel f: its source holds '\\ud800'",
    ),
    "kernel option": (
        r'K = Kernel(S, "f", "Pi", options=("-DV=\ud800",))',
        "kernel f: option 1 holds '\\ud800'",
    ),
    "kernel define": (
        r'K = Kernel(S, "f", "Pi", defines={"V": "1 /* \ud800 */"})',
        "kernel f: define V holds '\\ud800'",
    ),
    "tunable name": (
        r'T = Tunable("op\ud800", {"a": Kernel(S, "f", "Pi")}, print)',
        "its name holds '\\ud800'",
    ),
    "candidate name": (
        r'T = Tunable("op", {"a\ud800": Kernel(S, "f", "Pi")}, print)',
        "tunable op: candidate name 'a\\ud800' holds '\\ud800'",
    ),
}
KEYED = r"""
K2 = Kernel("void f(float *x, int n) { (void)0; }", "f", "Pi")
T = Tunable("op", {"a": Kernel(S, "f", "Pi"), "b": K2},
            lambda rt, k, *a, stream=None: rt.launch(k, *a, stream=stream),
            key=lambda x, n: "\ud800")

def workload(rt):
    rt.tune(T, rt.buffer(4), 4)
"""


@pytest.mark.parametrize("case", CASES)
def test_text_no_file_can_hold_is_refused_where_it_is_made(
    warm: Warm, workload_file, bundle_path: Path, case: str
) -> None:
    line, said = CASES[case]
    script = workload_file(HEAD + line + "\n\ndef workload(rt):\n    pass\n")
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [error] = proc.stderr.strip().splitlines()
    assert "workload failed to import" in error and said in error, error
    assert "lone surrogate" in error, error


def test_a_key_no_file_can_hold_is_refused_naming_the_tunable(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(HEAD + KEYED), "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [error] = proc.stderr.strip().splitlines()
    assert "TuneSpecError: tunable op: key= gave" in error and "lone surrogate" in error, error
