"""A kernel library shipping a warmed bundle as package data (trial 41c), and the warm run
of a PyCUDA-style script whose entry takes no argument, named with `--entry`.

Real parts only: the CLI in a subprocess, real bundles, the system C compiler."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

# A `--pycuda` script whose GPU work is in a `main()` taking no argument (PyCUDA's style),
# here launching on the run's host runtime (a GPU-less pre-build, `--arch`, needs no pycuda).
NO_ARG_MAIN = """
import numpy as np
import warmcli
from warmcli import Kernel

K = Kernel("void twice(float *y, int n) { for (int i = 0; i < n; i++) y[i] *= 2.0f; }",
           "twice", "Pi")

def {name}():
    rt = warmcli.runtime("host")
    rt.launch(K, rt.upload(np.ones(8, np.float32)), 8)
"""


def test_pycuda_entry_named_main_is_called_as_warm_finds_it(warm: Warm, tmp_path: Path) -> None:
    """`warm run s.py --pycuda` calls a script's `main()` with no argument; naming that same
    entry, `--entry main` (or another no-argument function, `--entry go`), was refused:
    `main() must take the runtime as its one argument`."""
    cli = warm
    for name in ("main", "go"):
        script = tmp_path / f"s_{name}.py"
        script.write_text(NO_ARG_MAIN.replace("{name}", name))
        args = [script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", tmp_path / f"{name}.warm"]
        if name == "main":
            found = cli("run", *args)
            assert found.returncode == 0, found.stderr
        named = cli("run", *args, "--entry", name)
        assert named.returncode == 0, named.stderr
        assert "stored 1 new kernel" in named.stdout or "stored 0 new kernel" in named.stdout
        assert "the bundle is complete" in named.stdout
