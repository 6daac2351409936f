"""readme38: the README's commands run as written, where warm disagreed with it, each
through the real CLI in a subprocess (CUDA compiled for real with NVRTC under `--arch`,
no GPU): a PyCUDA launch given a numpy structured scalar (a struct by value, which the
README says warm refuses, naming it), a string or a complex number for a declared scalar
parameter, which warm converted (the struct's one field, `2.5` passed as `2`; `"3"` as 3;
a complex's real part) where PyCUDA's `struct.pack` passes bytes or refuses; and
`warm --help`'s exit codes, which left out the exit 1 of a merge whose shards are not one
whole run (the README's table has it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

PYCUDA = """import os
import numpy as np
import pycuda.driver as drv
from warmcli.pycuda import SourceModule

MOD = SourceModule("__global__ void k(float *y, int n, float s) { y[0] = n * s; }")
ARGS = {
    "struct": (np.array([(2.5,)], dtype=[("a", "f4")])[0], np.float32(1)),
    "struct_int": (np.array([(2,)], dtype=[("a", "i4")])[0], np.float32(1)),
    "struct_0d": (np.array((2,), dtype=[("a", "i4")]), np.float32(1)),
    "text": ("3", np.float32(1)),
    "complex": (np.int32(3), np.complex64(1 + 2j)),
    "half": (np.int32(3), np.float16(1)),
    "fine": (np.int32(3), np.float32(1)),
}

def workload(rt):
    f = MOD.get_function("k")
    y = drv.mem_alloc(4)
    n, s = ARGS[os.environ["CASE"]]
    if os.environ.get("PREPARED"):
        f.prepare("Pif")
        f.prepared_call((1, 1), (1, 1, 1), y, n, s)
    else:
        f(y, n, s, block=(1, 1, 1), grid=(1, 1))
"""


@pytest.mark.parametrize("prepared", ["", "1"])
def test_pycuda_refuses_a_struct_by_value_a_string_and_a_complex_for_a_number(
    warm: Warm, tmp_path: Path, prepared: str
) -> None:
    """README (PyCUDA code): a struct passed by value is not served, said naming the call;
    a float for an integer parameter is refused, never truncated. A structured scalar for
    `int n` was taken as its one field (`2.5` launched as `n = 2`), `"3"` as 3 and a
    complex `s` as its real part: each is refused now, in one line, exit 2."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()

    def script(case: str) -> Path:
        """The workload of one case (CASE and PREPARED written in its text, not read from
        the environment: every run here forked from one server, `tests/forked_cli.py`)."""
        path = tmp_path / f"pyc_{case}.py"
        text = PYCUDA.replace('os.environ["CASE"]', repr(case))
        path.write_text(text.replace('os.environ.get("PREPARED")', repr(prepared)))
        return path

    wanted = {
        "struct": "struct passed by value",
        "struct_int": "struct passed by value",
        "struct_0d": "struct passed by value",
        "text": "'3' (str) is no number",
        "complex": "complex64",
    }
    if not prepared:  # a call's numpy scalar is packed as its bytes; prepare's letter converts
        wanted["half"] = "float16 scalar has no kernel letter"
    for case, says in wanted.items():
        args = ("--pycuda", "--arch", "sm_90", "-b", tmp_path / "p.warm", "-q")
        done = warm("run", script(case), *args)
        assert done.returncode == 2, (case, done.stdout, done.stderr)
        position = "argument 3" if case in ("complex", "half") else "argument 2"
        assert says in done.stderr and position in done.stderr, (case, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    done = warm(
        "run", script("fine"), "--pycuda", "--arch", "sm_90", "-b", tmp_path / "p.warm", "-q"
    )
    assert done.returncode == 0, done.stderr


def test_help_exit_codes_name_a_merge_of_a_partial_run(warm: Warm) -> None:
    """`warm --help`'s exit codes agree with the README's table: exit 1 also when `merge`
    wrote OUT but its shards are not one whole run."""
    done = warm("--help", timeout=60)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "1 verify found something missing or corrupt, diff a corrupt entry" in text, text
    assert "merge wrote OUT but its shards are not one whole run" in text, text
