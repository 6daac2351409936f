"""Review 51c (a hostile review of keying: can a stale binary be served?): what it found.

- `LD_RUN_PATH`: GNU ld writes it into a shared object as its `RUNPATH` where no `-rpath` is
  given, and cc's link of every host kernel read it from warm's environment, while no key
  held it. A kernel warmed with `LD_RUN_PATH=/opt/v1` was served, under the key a process
  without it computes, a binary whose `dlopen("libplug.so")` (and whose needed libraries)
  were found in `/opt/v1`, where a cold build finds none there: a hit returned 1, a cold
  start -1. Now no compile warm runs gets `LD_RUN_PATH` (`backends.processes`): a build
  never depends on it (a kernel that wants a run path names `-Wl,-rpath,...`, keyed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A host kernel that opens a plugin by its bare name (the loader searches its caller's
# RUNPATH): the plugin's `v()`, or -1 where none is found.
_DLOPEN_WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('''
void *dlopen(const char *, int);
void *dlsym(void *, const char *);
void f(long *o) {
    void *h = dlopen("libr51cplug.so", 2);
    long (*v)(void) = h ? (long (*)(void))dlsym(h, "v") : 0;
    o[0] = v ? v() : -1;
}
''', "f", "P")
def workload(rt):
    x = rt.upload(np.zeros(1, dtype=np.int64))
    rt.launch(K, x)
    return x
"""
# A production process over argv[1], the workload's folder argv[2]: what a hit computes, its
# binary's RUNPATH, then what a cold build computes.
_SERVED_AND_COLD = """
import json, sys, sqlite3, warmcli
sys.path.insert(0, sys.argv[2])
from dl_workload import workload
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
out = {"served": rt.read(workload(rt)).tolist(), "missed": len(warmcli.report().misses)}
(blob,) = sqlite3.connect(sys.argv[1]).execute("select data from blobs").fetchone()
out["runpath"] = b"/r51c-v1" in blob
warmcli.use_bundle(None)
rt = warmcli.runtime("host")
out["cold"] = rt.read(workload(rt)).tolist()
print(json.dumps(out))
"""


def test_ld_run_path_never_reaches_a_build(warm: Any, tmp_path: Path) -> None:
    """Warmed with `LD_RUN_PATH` naming a folder holding the plugin, served where it is
    unset: before, the hit found the plugin (1) through the RUNPATH ld wrote, the cold build
    did not (-1), under one key. Now the build holds no RUNPATH: hit and cold agree."""
    plugin = tmp_path / "r51c-v1"
    plugin.mkdir()
    (tmp_path / "dl_workload.py").write_text(_DLOPEN_WORKLOAD)
    (plugin / "p.c").write_text("long v(void) { return 1; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", plugin / "libr51cplug.so", plugin / "p.c"], check=True
    )
    bundle = tmp_path / "b.warm"
    proc = warm.with_env(LD_RUN_PATH=str(plugin))(
        "run", tmp_path / "dl_workload.py", "-b", bundle, "-q"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    got = warm.production(_SERVED_AND_COLD, bundle, tmp_path)
    assert got["missed"] == 0, got  # served, under the key a process without it computes
    assert got["served"] == got["cold"] == [-1], got
    assert not got["runpath"], got
