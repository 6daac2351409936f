"""What a new user meets following the README literally (stop 34).

Each test is one place where warm did not do what the README shows: the README's own
command, run as printed, through the real CLI in a subprocess.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_keygen_makes_the_keys_own_folder_as_the_readme_shows_it(
    warm: Warm, tmp_path: Path
) -> None:
    # README, Trust: `warm keygen ~/.warm/ci.key` on a machine with no ~/.warm yet.
    home = tmp_path / "user"
    home.mkdir()
    proc = warm("keygen", home / ".warm" / "ci.key")
    assert proc.returncode == 0, proc.stderr
    assert (home / ".warm" / "ci.key").is_file()
    assert (home / ".warm" / "ci.key.pub").is_file()
    # a folder made for a private key is this user's alone
    assert stat.S_IMODE((home / ".warm").stat().st_mode) == 0o700
    assert stat.S_IMODE((home / ".warm" / "ci.key").stat().st_mode) == 0o600


def test_keygen_creates_no_more_than_the_keys_own_folder(warm: Warm, tmp_path: Path) -> None:
    proc = warm("keygen", tmp_path / "typo" / "keys" / "ci.key")
    assert proc.returncode == 2
    assert "no directory" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "typo").exists()


OVERSIZED = """
import numpy as np
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('extern "C" __global__ void k(float *x) { x[0] = 1; }', "k", "P", language="cuda")
def workload(rt):
    x = rt.buffer(4)
    rt.launch(K, x, grid=(1, 70000), block=(2048,))
"""


def _refused_prebuild(warm: Warm, workload: Path, source: str) -> subprocess.CompletedProcess[str]:
    """`warm run` of `source`, written at `workload`, pre-built for sm_90: refused (exit 2)."""
    workload.write_text(source)
    proc = warm("run", workload, "--arch", "sm_90", "-b", workload.with_suffix(".warm"), "-q")
    assert proc.returncode == 2, proc.stderr
    return proc


def test_an_oversized_launch_names_only_the_sizes_over_their_limits(
    warm: Warm, tmp_path: Path
) -> None:
    # README: a pre-build's launch over a GPU's limits fails "naming them"; the block's y
    # (1) and the grid's z (1) are within theirs, so the error does not name them.
    proc = _refused_prebuild(warm, tmp_path / "big.py", OVERSIZED)
    assert "block x 2048 (at most 1024)" in proc.stderr, proc.stderr
    assert "grid y 70000 (at most 65535)" in proc.stderr, proc.stderr
    assert "y 1 " not in proc.stderr and "z 1 " not in proc.stderr, proc.stderr


HOST_WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *x, int n) { x[0] = n; }", "k", "Pi")
def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
"""


def test_a_host_workload_under_arch_is_not_told_to_set_the_device_it_set(
    warm: Warm, tmp_path: Path
) -> None:
    # README: `DEVICE = "host"` picks the device under `--device auto`; `--arch` stands in
    # for a GPU whatever DEVICE says, so the hint must be to leave out --arch.
    proc = _refused_prebuild(warm, tmp_path / "host.py", HOST_WORKLOAD)
    assert "compiles CUDA kernels only" in proc.stderr, proc.stderr
    assert 'DEVICE = "host"` in the workload' not in proc.stderr, proc.stderr
    assert "without --arch" in proc.stderr, proc.stderr


def test_a_restore_that_is_no_list_is_named_plainly() -> None:
    # README: `restore="y"`, `restore=2` are refused where the Tunable is made.

    from warmcli import Kernel, Tunable
    from warmcli.errors import TuneSpecError

    k = Kernel("void k(float *x) { x[0] = 1; }", "k", "P")
    for restore, shown in (("y", "not 'y' (str)"), (2, "not 2 (int)")):
        with pytest.raises(TuneSpecError) as caught:
            Tunable("t", {"a": k, "b": k}, lambda *a, stream=None: None, restore=restore)
        assert shown in str(caught.value), str(caught.value)


FLOAT_ARGS = """
import json, warmcli
from warmcli import Kernel
rt = warmcli.runtime("host")
k = Kernel("void k(float *x, float s) { x[0] = s; }", "k", "Pf")
x = rt.buffer(1)
rt.launch(k, x, float("inf"))
try:
    rt.launch(k, x, 3.5e38)
except warmcli.errors.LaunchError as exc:
    print(json.dumps(str(exc)))
"""


def test_an_out_of_range_float_argument_says_inf_and_nan_are_taken(warm: Warm) -> None:
    # README: `f` takes a real number within ±3.4e38, "inf and nan too"; the error for
    # 3.5e38 must not read as if inf were refused.
    shown = warm.production(FLOAT_ARGS)
    assert "or inf or nan" in shown, shown


def test_a_blank_warm_bundle_is_an_empty_one_not_a_file_named_by_spaces(
    warm: Warm, tmp_path: Path
) -> None:
    # README: WARM_BUNDLE set and empty is no bundle in production and the default bundle
    # for a command (as `--bundle " "` is refused as empty); a blank one wrote a bundle
    # file named " " in the working folder.
    workload = tmp_path / "host.py"
    workload.write_text(HOST_WORKLOAD)
    blank = warm.with_env(WARM_BUNDLE="  ")
    proc = blank("run", workload, "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "  ").exists()
    assert (Path(warm.env["WARM_HOME"]) / "bundle.warm").is_file()
    served = blank.production(
        "import json, runpy, warmcli\n"
        f"runpy.run_path({str(workload)!r})['workload'](warmcli.runtime('host'))\n"
        "print(json.dumps(warmcli.report().bundle))\n"
    )
    assert served is None


STRICT_ARGS = """
import json, warmcli
shown = []
for strict in (2, [], "bogus"):
    try:
        warmcli.use_bundle(None, strict=strict)
    except Exception as exc:
        shown.append([type(exc).__name__, str(exc)])
print(json.dumps(shown))
"""


def test_use_bundle_names_a_strict_of_the_wrong_type_or_value(warm: Warm) -> None:
    # README: an argument of the wrong type is a TypeError naming it; strict=2 was an
    # AttributeError ('int' object has no attribute 'strip'), and strict="bogus" blamed
    # WARM_STRICT, which was not set.
    shown = warm.production(STRICT_ARGS)
    assert [kind for kind, _ in shown] == ["TypeError", "TypeError", "ConfigError"], shown
    assert all("strict" in text and "WARM_STRICT" not in text for _, text in shown), shown
    assert shown[0][1].startswith("use_bundle: strict must be"), shown


def test_a_pass_table_in_a_narrow_terminal_keeps_each_count_beside_its_name(
    warm: Warm, tmp_path: Path
) -> None:
    # README: in a terminal too narrow for a table, each value is under its column's
    # name; a pass table's counts sit in a column with no name, so they were shown each
    # on a line of its own, under nothing ("Compilation  registered" then "  3").
    workload = tmp_path / "host.py"
    workload.write_text(HOST_WORKLOAD)
    narrow = Warm(dict(warm.env, COLUMNS="50"))
    proc = narrow("run", workload, "-b", tmp_path / "b.warm")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # (stats40: each view a list under its name, not records interleaving the three)
    assert "Compilation" in lines and "Execution" in lines, proc.stdout
    assert ["registered", "1"] in [ln.split() for ln in lines], proc.stdout
    assert ["executed", "0"] in [ln.split() for ln in lines], proc.stdout
    assert not [ln for ln in lines if ln.strip().isdigit()], proc.stdout


def test_check_refuses_an_unsigned_bundle_under_trusted_keys_with_exit_2(
    warm: Warm, tmp_path: Path
) -> None:
    # README, Trust: a bundle no trusted key signed is refused: `warm check` too, exit 2
    # in one line (not exit 1 and a table of `unsigned` rows, which is for a signed bundle
    # with rows added after signing).
    workload = tmp_path / "host.py"
    workload.write_text(HOST_WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    assert warm("keygen", tmp_path / "ci.key").returncode == 0
    trusting = warm.with_env(WARM_TRUSTED_KEYS=str(tmp_path / "ci.key.pub"))
    proc = trusting("check", bundle)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "unsigned" in proc.stderr, proc.stderr


FORKED_RAISES = """
import os
from warmcli import Kernel
K = Kernel("void k(float *x, int n) { x[0] = n; }", "k", "Pi")
def workload(rt):
    rt.launch(K, rt.buffer(2), 2)
    pid = os.fork()
    if pid == 0:
        raise ValueError("child boom")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1
"""


def test_a_forked_child_that_raises_says_why_as_python_would(warm: Warm, tmp_path: Path) -> None:
    # README: a forked child that raises out of workload() ends there, exit code 1. Under
    # Python its exception is printed as it dies; under warm it vanished without a word.
    workload = tmp_path / "forks.py"
    workload.write_text(FORKED_RAISES)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "ValueError: child boom" in proc.stderr, proc.stderr
    assert "forks.py:9" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_tunable_whose_launch_is_no_callable_is_refused_where_it_is_made() -> None:
    # README: warm calls `launch(rt, kernel, *inputs, stream=stream)`; a Tunable made with
    # a launch that is no function (its arguments swapped, say) was taken, and every tune
    # of it failed later, each candidate "'int' object is not callable".

    from warmcli import Kernel, Tunable

    k = Kernel("void k(float *x) { x[0] = 1; }", "k", "P")
    with pytest.raises(TypeError, match=r"tunable t: launch is no callable \(int\)"):
        Tunable("t", {"a": k, "b": k}, 3)  # type: ignore[arg-type]
