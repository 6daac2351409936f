"""A new user's trial (stop 52) with the README alone: every command line and example of it
run as written in a scratch folder (the quick start, the trust walk-through, shards and
`warm merge`, bundles over plain `http://` on this machine, `--pycuda` and `--arch`
pre-builds), every `WARM_*` variable and every option against `warm COMMAND --help` and the
code's defaults, and `python -m warmcli` against `warm` (exit codes, stderr, `--version`,
`--help`, completion, Ctrl-C and SIGTERM). The real CLI (forked), real NVRTC, real SQLite
bundles. What it found:
- `--compiler "nvrtc "` (a name with a space around it, as a CI variable pasted with one
  hands it over) passed the check of the name, which strips it, and then ran nvcc: the
  choice compared the name unstripped, `" nvrtc" != "nvrtc"`, while saying `--compiler
  nvrtc` was why (`warm run --dask` gave it to no worker, each choosing its own). The name
  is stripped where it is read, as `WARM_CUDA_COMPILER` always was.
"""

from __future__ import annotations

import json

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc


@pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed (make install has it)")
def test_a_compiler_named_with_spaces_around_it_is_that_compiler(warm: Warm) -> None:
    """`warm devices --compiler " nvrtc "` names NVRTC as the CUDA compiler, as plain
    `--compiler nvrtc` does (it was nvcc, found by PATH, "because" `--compiler  nvrtc`)."""
    for given in (" nvrtc", "nvrtc "):
        proc = warm("devices", "--compiler", given, "--json")
        assert proc.returncode == 0, proc.stderr
        (cuda,) = [c for c in json.loads(proc.stdout)["compilers"] if c["device"] == "cuda"]
        assert (cuda["compiler"], cuda["why"]) == ("nvrtc", "--compiler nvrtc"), (given, cuda)
