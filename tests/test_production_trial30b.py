"""Production trials, continued (real subprocesses, the system cc): a runtime `use_bundle`
closed runs a kernel its bundle lacks cold, neither explained as corrupt nor refused by
strict mode (as its tunes); Ctrl-C while a miss compiles; WARM_REPORT's exact lines."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_production_trial30 import _py

OLD_RUNTIME_KERNEL = """
import sys, numpy as np, warmcli, svc
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1], strict=True)
old = warmcli.runtime()
svc.one(old, 0)
warmcli.use_bundle(None, strict=True)  # closes `old` and the bundle it served from
y = old.buffer(1, "float32")
old.launch(Kernel("void z(float *y) { y[0] = 7; }", "z", "P", name="z"), y)
print(old.read(y)[0])
"""


def test_a_kernel_on_a_runtime_use_bundle_closed_runs_cold_unrefused(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    done = _py(tmp_path, warm, OLD_RUNTIME_KERNEL, str(served), WARM_EXPLAIN="1")
    assert done.returncode == 0 and done.stdout == "7.0\n", done.stderr
    assert "corrupt" not in done.stderr, done.stderr


REPORTED = """
import sys, numpy as np, warmcli, svc
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime()
for i in range(4):
    svc.one(rt, i)
if len(sys.argv) > 2:  # a kernel and a tune the bundle lacks
    y = rt.buffer(1, "float32")
    rt.launch(Kernel("void z(float *y) { y[0] = 7; }", "z", "P", name="z"), y)
    rt.tune(svc.T, rt.upload(np.ones(77, np.float32)), rt.buffer(77, "float32"), 77)
print("done")
"""


def test_warm_report_at_exit_is_the_readmes_on_stderr_only(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    hit = _py(tmp_path, warm, REPORTED, "b.warm", WARM_REPORT="1")
    assert hit.returncode == 0 and hit.stdout == "done\n", hit.stderr
    assert (
        hit.stderr
        == "warm: bundle b.warm served everything: compiled 0 kernels, tuned 0 operations\n"
    )
    miss = _py(tmp_path, warm, REPORTED, "b.warm", "miss", WARM_REPORT="1")
    assert miss.returncode == 0 and miss.stdout == "done\n", miss.stderr
    head, kernel, tune = miss.stderr.splitlines()
    assert head == (
        "warm: bundle b.warm lacked 1 kernel(s) and 1 tune(s); this process compiled and tuned "
        "them itself (re-warm it with `warm run`):"
    )
    assert kernel.startswith("  kernel z on host (key ") and tune.startswith("  tune t float32[77]")
    quiet = _py(tmp_path, warm, REPORTED, "b.warm", "miss")
    assert quiet.returncode == 0 and quiet.stdout == "done\n" and quiet.stderr == ""


# A C compiler that answers `--version` and `-print-search-dirs` (the host identity's probes)
# as cc does and takes a minute to build anything,
# noting its pid in `<its path>.pids`: a binary, as cc's builds are served to cc's binary (a
# wrapper script's identity is its own: it may add options).
SLOW_CC = r"""#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  char pids[4096];
  FILE *f;
  if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-print-search-dirs"))) {
    argv[0] = "cc";
    execvp("cc", argv);
    return 127;
  }
  snprintf(pids, sizeof pids, "%s.pids", argv[0]);
  f = fopen(pids, "a");
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  execlp("sleep", "sleep", "60", (char *)0);
  return 127;
}
"""

MISSING = """
import sys, warmcli, svc
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1], write=sys.argv[2] == "write")
rt = warmcli.runtime()
for i in range(4):
    svc.one(rt, i)
y = rt.buffer(1, "float32")
rt.launch(Kernel("void z(float *y) { y[0] = 7; }", "z", "P", name="z"), y)  # compiles: slow
"""


def _entries(bundle: Path) -> list[tuple[str, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{bundle}?mode=ro", uri=True)) as db:
        rows = "SELECT hex(key) FROM kernels UNION ALL SELECT hex(key) FROM tunes ORDER BY 1"
        return db.execute(rows).fetchall()


@pytest.mark.parametrize("mode", ["read", "write"])
def test_ctrl_c_while_a_miss_compiles_is_a_keyboardinterrupt_leaving_nothing(
    warm: Warm, tmp_path: Path, served: Path, mode: str
) -> None:
    cc = tmp_path / "slowcc"
    (tmp_path / "slowcc.c").write_text(SLOW_CC)
    subprocess.run(["cc", "-o", str(cc), str(tmp_path / "slowcc.c")], check=True)
    pids = Path(f"{cc}.pids")
    before = _entries(served)
    env = dict(warm.env, PYTHONPATH=f"{tmp_path}:{warm.env.get('PYTHONPATH', '')}")
    proc = subprocess.Popen(
        [sys.executable, "-c", MISSING, str(served), mode],
        cwd=tmp_path,
        env=dict(env, WARM_CC=str(cc), WARM_REPORT="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not pids.exists() and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, err  # by SIGINT, write-back or not
    assert "\nKeyboardInterrupt\n" in err, err
    assert "served everything" not in err  # the report names the kernel it lacked
    assert "  kernel z (compile interrupted: nothing stored) on host (key " in err, err
    compiler = int(pids.read_text().split()[0])
    assert (
        not Path(f"/proc/{compiler}").exists()
        or "Z" in Path(f"/proc/{compiler}/stat").read_text().split()[2]
    )
    assert _entries(served) == before  # (write-back moves last-used times only)
    assert not Path(f"{served}-journal").exists()
    assert warm("verify", served).returncode == 0


INTERRUPTED_AFTER_A_MISS = """
import sys, warmcli
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1], write=True)
rt = warmcli.runtime()
rt.launch(Kernel("void q(float *y) { y[0] = 7; }", "q", "P", name="q"), rt.buffer(1, "float32"))
raise KeyboardInterrupt
"""


def test_a_keyboardinterrupt_after_a_miss_written_back_still_exits_by_sigint(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    before = len(_entries(served))
    done = _py(tmp_path, warm, INTERRUPTED_AFTER_A_MISS, str(served))
    assert "KeyboardInterrupt" in done.stderr and len(_entries(served)) == before + 1  # q
    assert done.returncode == -signal.SIGINT, done.stderr
