"""A new user's trial of the README alone (stop 50), in a fresh `HOME` and `WARM_HOME`.

Own host workloads (several kernels, a seeded tunable, kernels from format strings, a
helper module beside the workload, a data file read relative to itself, a `chdir`, one
failing half way, threads) ran cold, over a bundle lacking them and over their own bundle:
the same bytes each way, and every command did what the README says. What it found:
- a C kernel whose helper asks GCC for its own name, `__builtin_FUNCTION()` (what
  `__func__` spells, as a default argument's caller would), read warm's renamed name of
  it, `warm_<key>_h`, in a shared unit and in production's cold build alike, where `cc`
  gives `h`: such a kernel is compiled in a unit of its own now, as one naming `__func__`
  is.
- a workload beside a helper named like a module warm imports before the workload (`copy.py`,
  `uuid.py`, `base64.py`, `zlib.py`, `fnmatch.py`) got the standard library's under `warm
  run`, where `python serve.py` imported the user's: `warm run` failed with `AttributeError:
  module 'copy' has no attribute 'X'` and nothing saying why (or, where both define a name,
  warmed other code than production runs). It warns now, naming the file and what it got.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from c_kernel_fuzz import alone, batched
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.sharing import shares_unit
from warmcli.kernel import Kernel

NEIGHBOUR = Kernel("static int helper(void) { return 1; }\nvoid z(unsigned char *o) { }", "z", "P")
SPELT = "const char *p = {what}; int n = 0; while (p[n] && n < 63) {{ o[n] = p[n]; n++; }}"
BUILTIN_NAMED = {
    "in a helper": "static const char *h(void) { return __builtin_FUNCTION(); }\n"
    "void k(unsigned char *o) { " + SPELT.format(what="h()") + " }",
    "in the entry": "void k(unsigned char *o) { "
    + SPELT.format(what="__builtin_FUNCTION()")
    + " }",
}


@pytest.mark.parametrize("case", BUILTIN_NAMED)
def test_a_kernel_asking_gcc_its_function_name_sees_it_as_written(
    case: str, tmp_path: Path
) -> None:
    kernel = Kernel(BUILTIN_NAMED[case], "k", "P")
    want = alone(kernel, tmp_path)
    assert want is not None and want.rstrip(b"\0") in (b"h", b"k")
    assert batched([kernel, NEIGHBOUR], tmp_path)[0] == want
    assert batched([kernel], tmp_path)[0] == want  # production's cold build: one kernel
    assert not shares_unit(kernel)


SHADOWED = """
import copy
import helper
from base64 import b64encode

def workload(rt):
    return copy.X + helper.Y + len(b64encode(b"x"))
"""


def test_a_helper_named_like_a_module_warm_imported_first_is_warned_of(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    (tmp_path / "copy.py").write_text("X = 41\n")  # what `python w.py` imports as `copy`
    (tmp_path / "base64.py").write_text("def b64encode(b):\n    return b\n")
    (tmp_path / "helper.py").write_text("Y = 1\n")  # no module of warm's: imported as yours
    (tmp_path / "w.py").write_text(SHADOWED)
    proc = warm("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 2, proc.stderr  # it still runs with what it got
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warm: warning:")]
    assert len(warnings) == 2, proc.stderr
    assert warnings[0].startswith("warm: warning: base64.py beside the workload is not the base64")
    assert "copy.py beside the workload is not the copy it imports" in warnings[1]
    assert "rename copy.py" in warnings[1] and "lib/python3" in warnings[1]
    assert "AttributeError: module 'copy' has no attribute 'X'" in proc.stderr
    bundle = host_bundle(tmp_path / "host.warm")  # a sound one: the replay is what fails
    replay = warm("verify", bundle, "--workload", tmp_path / "w.py")
    assert replay.returncode == 2, replay.stderr
    # (`warm verify` imports less before the workload than `warm run`: base64, which only a
    # run's modules import first, is the workload's own there, unwarned, as under python)
    said = [line for line in replay.stderr.splitlines() if line.startswith("warm: warning:")]
    assert any("copy.py beside the workload is not the copy" in line for line in said), said
    assert set(said) <= set(warnings), (said, warnings)


def test_the_quick_starts_serve_py_before_warm_run_is_said_to_fail_fast(tmp_path: Path) -> None:
    """The quick start said `serve.py` "without the bundle" compiles `scale` itself, the same
    `[0. 2. 4. 6.]`; run before `warm run` made `app.warm`, its `use_bundle("app.warm")`
    raises `BundleError: ... no such bundle` (as The bundle says: a named bundle fails fast).
    The README says which is which now."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("# scale.py\n")
    for name in ("scale.py", "serve.py"):
        block = readme[readme.index(f"# {name}\n", start) :].split("```", 1)[0]
        (tmp_path / name).write_text(block)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "serve.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and not (tmp_path / "app.warm").exists()
    assert done.stderr.splitlines()[-1].endswith("/app.warm: no such bundle"), done.stderr
    flat = " ".join(readme[start : readme.index("## Where to look next")].split())
    assert "run before `warm run` made `app.warm`, it raises" in flat
    assert "without the bundle it compiles `scale` itself" not in flat
