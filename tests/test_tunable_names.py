"""A `Tunable` whose name, candidate names or candidates a bundle cannot hold is refused
where it is made, naming the tunable: candidate names that are ints crashed `warm run`
with a traceback as it stored the tune; a name that is no str, or longer than a bundle
holds, was stored as a row every reader calls corrupt (the verify pass failed on it); a
candidate that is no Kernel, or candidates given as pairs, was an AttributeError. The
real CLI in a subprocess, the host backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

HEAD = """\
from warmcli import Kernel, Tunable

DEVICE = "host"
K = Kernel("void f(float *x, int n) { }", "f", "Pi")
K2 = Kernel("void f(float *x, int n) { (void)0; }", "f", "Pi")


def launch(rt, k, *args, stream=None):
    rt.launch(k, *args, stream=stream)


T = Tunable({args}, launch)


def workload(rt):
    rt.tune(T, rt.buffer(4), 4)
"""
CASES = {  # the Tunable's first arguments: what the one line names
    '"op", {1: K, 2: K2}': "candidate name 1 (int) is no str",
    '5, {"a": K, "b": K2}': "tunable 5: its name is no str (int)",
    '"x" * 5000, {"a": K, "b": K2}': "name is 5000 characters, over the 4096 a bundle holds",
    '"op", {"a": K, "b" * 5000: K2}': "candidate name of 5000 characters, over the 4096",
    '"op", {"a": K, "b": 5}': "candidate 'b' is no Kernel (int)",
    '"op", [("a", K), ("b", K2)]': "candidates are a mapping of names to kernels, not a list",
}


@pytest.mark.parametrize("args", CASES)
def test_a_tunable_a_bundle_cannot_hold_is_refused_where_it_is_made(
    warm: Warm, workload_file, bundle_path: Path, args: str
) -> None:
    script = workload_file(HEAD.replace("{args}", args))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert f"{script}:12: workload failed to import: " in line, line
    assert CASES[args] in line, line
    assert not bundle_path.exists() or bundle_path.stat().st_size == 0


def test_the_name_limit_is_the_bundles() -> None:
    from warmcli.bundle.rows import MAX_NAME_CHARS
    from warmcli.runtime.tune_spec import MAX_NAME

    assert MAX_NAME == MAX_NAME_CHARS


@pytest.mark.parametrize(
    "tolerance",
    [
        *("(float('nan'), 1e-6)", "(1e-5, -1)", "(1e-5,)", "1e-5", "(1e-5, 'x')"),
        *("'12'", "b'12'", "{1e-5, 1e-6}"),  # text (1 and 2; bytes 49 and 50), no order
    ],
)
def test_a_check_tolerance_that_is_no_pair_of_finite_numbers_at_least_0_is_refused(
    warm: Warm, workload_file, bundle_path: Path, tolerance: str
) -> None:
    args = f'"op", {{"a": K, "b": K2}}, launch, check="a", check_tolerance={tolerance}'
    script = workload_file(HEAD.replace("Tunable({args}, launch)", f"Tunable({args})"))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "tunable op: check_tolerance is (rtol, atol)" in line, line
