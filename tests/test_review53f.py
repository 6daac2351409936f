"""A hostile review of stop 53's changes: a served pick the launch function refuses, measured
again (`warmcli.runtime.tune_served`), and the CLI that cannot start (`__main__._cannot_start`).
Real cc, real SQLite bundles, the real CLI (forked) and a real `python -m warmcli`.
What it found:
- a stale pick's refusal was told from one after an executed launch by a count every thread
  shared: another thread's launch meanwhile (a server's other request) made it raise, by chance;
- a pick measured in this process that its launch function refuses for other inputs of its key
  was measured again, each call that alternates (1.1 ms a call, not 0.03, two CPU candidates);
- an ImportError of running out of memory (`ulimit -v`) as the CLI started said `pip install
  'typer>=0.29'`, as one from a library installed as warm needs that failed its own import (a
  broken numpy), and its text reached the terminal unescaped.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_trial53d import SERVE  # a production process: its bits and its misses

from warmcli.errors import OUT_OF_MEMORY

ROOT = Path(__file__).resolve().parents[1]

# u1 spins first, so u4 is the bundle's pick; REFUSED (the edit) is refused after another
# thread's launch executed, as a server's other request would launch meanwhile.
STALE = """
import threading
import numpy as np
from warmcli import Kernel, Tunable

SRC = '''void ax(float *y, const float *x, float a, int n) {
  for (volatile int s = 0; s < (U == 1) * 20000; s++) {}
  for (int i0 = 0; i0 < n; i0 += U) for (int i = i0; i < i0 + U && i < n; i++) y[i] = a * x[i];
}'''
REFUSED = None

def go(rt, kernel, y, x, a, n, *, stream=None):
    if kernel.define("U") == REFUSED:
        other = threading.Thread(target=rt.launch, args=(AX.candidates["u1"], y, x, a, 0))
        other.start()
        other.join()
        raise AssertionError(f"no U={REFUSED}")
    rt.launch(kernel, y, x, a, n, stream=stream)

AX = Tunable("ax", {f"u{u}": Kernel(SRC, "ax", "PPfi", defines={"U": u}) for u in (1, 4)}, go)

def workload(rt):
    x = rt.upload(np.arange(16, dtype=np.float32))
    y = rt.buffer(16)
    rt.tune(AX, y, x, 1.5, 16)
    return y
"""


def test_a_stale_pick_is_measured_again_whatever_another_thread_launched(
    warm, tmp_path: Path
) -> None:
    work, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    work.write_text(STALE)
    warm.with_env(WARM_BUNDLE_WRITE="1").production(SERVE, work, bundle=bundle)  # warmed so
    work.write_text(STALE.replace("REFUSED = None", "REFUSED = '4'"))
    hot = warm.production(SERVE, work, bundle=bundle)  # (before: AssertionError, exit 1)
    (miss,) = hot["misses"]
    assert "launch: the launch function here refuses the bundle's pick 'u4'" in miss
    y = [1.5 * i for i in range(16)]
    assert hot["bits"] == __import__("numpy").array(y, dtype="float32").tobytes().hex()


# A guard by input, not by pick, under a key= that does not tell its inputs apart: the pick
# measured for a > 0 is refused for a < 0.
ALTERNATING = """
import json, numpy as np, warmcli
from warmcli import Kernel, Tunable
SRC = '''void ax(float *y, const float *x, float a, int n) {
  for (int i0 = 0; i0 < n; i0 += U) for (int i = i0; i < i0 + U && i < n; i++) y[i] = a * x[i];
}'''
def go(rt, kernel, y, x, a, n, *, stream=None):
    assert (a < 0) == (kernel.define("U") == "1"), f"u{kernel.define('U')} refuses a={a}"
    rt.launch(kernel, y, x, a, n, stream=stream)
AX = Tunable("ax", {f"u{u}": Kernel(SRC, "ax", "PPfi", defines={"U": u}) for u in (1, 4)}, go,
             key=lambda y, x, a, n: n)
rt = warmcli.runtime("host")
x, y = rt.upload(np.ones(8, dtype=np.float32)), rt.buffer(8)
said = [rt.tune(AX, y, x, 1.0, 8)]
try:
    said.append(rt.tune(AX, y, x, -1.0, 8))
except AssertionError as exc:
    said.append([str(exc), *exc.__notes__])
print(json.dumps(said))
"""


def test_a_pick_measured_here_refused_for_other_inputs_of_its_key_is_not_measured_again(
    warm,
) -> None:
    first, second = warm.production(ALTERNATING)  # (before: "u4", "u1": measured each call)
    assert first == "u4"
    error, note = second
    assert error == "u4 refuses a=-1.0"
    assert note.startswith("warm: tune ax: the launch function refuses 'u4', the pick this ")
    assert "its key= or bucket= tells apart less than what the launch function refuses" in note


def _start(tmp_path: Path, error: str, address_space: int | None = None) -> tuple[int, str]:
    """`python -m warmcli stats` where importing typer raises `error` (first on the path),
    under `address_space` (RLIMIT_AS) if given: its exit code and stderr."""
    (tmp_path / "typer").mkdir()
    (tmp_path / "typer" / "__init__.py").write_text(f"raise ImportError({error!r}, name='typer')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

    def limit() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, resource.RLIM_INFINITY))

    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "stats"],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit,
        timeout=60,
    )
    return proc.returncode, proc.stderr


def test_running_out_of_memory_as_the_cli_starts_says_so(tmp_path: Path) -> None:
    error = "libffi.so.8: failed to map segment from shared object"
    code, err = _start(tmp_path, error, address_space=64 << 30)
    assert (code, err) == (2, f"warm: error: {OUT_OF_MEMORY}\n")


def test_a_library_installed_as_warm_needs_that_fails_its_import_is_no_install_advice(
    tmp_path: Path,
) -> None:
    code, err = _start(tmp_path, "libstdc++.so.6: cannot open shared object file\x1b]0;x\x07")
    assert code == 2
    assert err.startswith("warm: error: the CLI cannot start: libstdc++.so.6: cannot open ")
    assert "\x1b" not in err and "\\x1b]0;x\\x07" in err
    assert "pip install" not in err and "is installed, as warm needs: its own import failed" in err
