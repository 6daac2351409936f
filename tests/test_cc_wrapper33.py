"""A C compiler that is a wrapper script is told from the compiler it runs.

The host toolchain's identity was the compiler's version line: `WARM_CC=./fast-cc`, a
script running `cc -DSCALE=3 "$@"` (a Spack or Nix wrapper, or one adding `-ffast-math`),
keyed as plain `cc`: `warm run` through it stored nothing (cc's build held its key) and a
process through it was served cc's build, a different result from its cold start. A
script's text is in its identity now; editing it makes another toolchain. (Serving is as
README's "Where a build is served" says: a wrapper script's builds and other compilers'
are not served for each other, this machine's own toolchain's build preferred; see
test_review33.) nvcc is not concerned:
toolkits ship it as a wrapper script finding the real one, and a pre-build must serve where
the toolkit's runs.

Commands and production processes are forks (`tests/forked_cli.py`), but for the test of a
wrapper's version line, whose processes are started (`Warm(env)`): each reads the compiler
under a `PATH` of its own, what a process finds as it starts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """import numpy as np
from warmcli import Kernel
SOURCE = '''
#ifndef SCALE
#define SCALE 1
#endif
void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] = SCALE; }
'''
K = Kernel(SOURCE, "k", "Pl")
def workload(rt):
    y = rt.upload(np.zeros(2, np.float32))
    rt.launch(K, y, 2)
    return y
"""
PRODUCTION = (
    "import json, runpy, sys, warmcli\n"
    "rt = warmcli.runtime('host')\n"
    "y = runpy.run_path(sys.argv[1])['workload'](rt)\n"
    "print(json.dumps({'y': float(rt.read(y)[0]), 'compiled': len(warmcli.report().kernels)}))\n"
)


def _wrapper(path: Path, scale: int) -> Path:
    path.write_text(f'#!/bin/sh\nexec cc -DSCALE={scale} "$@"\n')
    path.chmod(0o755)
    past = time.time() - 10  # settled: its version line is remembered, as on a real machine
    os.utime(path, (past, past))
    return path


def test_a_wrapper_script_keys_apart_from_the_compiler_it_runs(warm: Warm, tmp_path: Path) -> None:
    """Warmed with plain cc, then through the wrapper: the wrapper's run builds its own (it
    said 'stored 0', and a process through the wrapper was served cc's build, 1.0), and
    a process through the wrapper is served the wrapper's build (this machine's toolchain's
    build is preferred), as one through the edited wrapper is after warming again."""
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0  # plain cc: SCALE 1
    wrapper = _wrapper(tmp_path / "fast-cc", 3)
    into = warm.with_env(WARM_CC=str(wrapper))  # (its commands forked, as warm's)
    doc = into.json("run", workload, "-b", bundle)
    assert doc["stored"]["kernels"] == 1, doc["stored"]
    assert into.production(PRODUCTION, workload, bundle=bundle) == {"y": 3.0, "compiled": 0}
    assert warm.production(PRODUCTION, workload, bundle=bundle) == {"y": 1.0, "compiled": 0}
    _wrapper(wrapper, 5)
    assert into.json("run", workload, "-b", bundle)["stored"]["kernels"] == 1
    assert into.production(PRODUCTION, workload, bundle=bundle) == {"y": 5.0, "compiled": 0}


def test_a_binary_compiler_keeps_its_identity() -> None:
    """A compiler binary's version is its version line alone, as before (keys unchanged)."""
    from warmcli.backends.host.compiler import host_cc
    from warmcli.backends.toolchain import _version_line

    assert "wrapper script" not in _version_line("cc", host_cc())


def test_a_wrapper_s_version_follows_the_compiler_it_runs(warm: Warm, tmp_path: Path) -> None:
    """A wrapper running whichever `gcc` is first on PATH: its version line was remembered
    by the script's own stamp, so after the compiler under it changed, every process keyed
    with the old compiler's version. It is read in each process now."""
    bins = []
    for release in ("1.0", "2.0"):
        folder = tmp_path / f"cc{release[0]}"
        folder.mkdir()
        fake = folder / "gcc"
        fake.write_text(
            '#!/bin/sh\ncase " $* " in *" --version "*)'
            f' echo "gcc (fake) {release}"; exit 0;; esac\nexec cc "$@"\n'
        )
        fake.chmod(0o755)
        bins.append(folder)
    wrapper = tmp_path / "mycc"
    wrapper.write_text('#!/bin/sh\nexec gcc -O2 "$@"\n')
    wrapper.chmod(0o755)
    time.sleep(2.5)  # settled (its ctime too): a version line of it could be remembered
    seen = []
    for folder in bins:
        env = dict(warm.env, WARM_CC=str(wrapper), PATH=f"{folder}:{os.environ['PATH']}")
        seen.append(
            Warm(env).production(
                "import json; from warmcli.backends.host.compiler import HostCompiler\n"
                "print(json.dumps(HostCompiler().toolchain.version))\n"
            )
        )
    assert seen[0].startswith("gcc (fake) 1.0") and seen[1].startswith("gcc (fake) 2.0"), seen
