"""What the round-3 README user trial found and left, fixed (round 4).

Through the real CLI in a subprocess, on real files: a `WARM_HOME` that is a file is
named as the problem; a workload's `DEVICE` that names no device is said to be the
workload's; a `Tunable` with a negative warmup or no repeats is refused where it is made;
`warm check` counts an entry built only for another arch once, as not servable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, Tunable
from warmcli.errors import WarmError

INC = """\
import numpy as np
from warmcli import Kernel

DEVICE = "{device}"
K = Kernel("void inc(int *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1; }}", "inc", "Pi")

def workload(rt):
    rt.launch(K, rt.upload(np.zeros(4, np.int32)), 4)
"""


def test_a_warm_home_that_is_a_file_is_named(warm: Warm, workload_file, tmp_path: Path) -> None:
    home = tmp_path / "homefile"
    home.write_text("")
    warm.env["WARM_HOME"] = str(home)
    said = f"warm: error: WARM_HOME={home} is not a directory"
    for args in (("run", workload_file(INC.format(device="host")), "-q"), ("stats",), ("check",)):
        proc = warm(*args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith(said), proc.stderr
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_an_unknown_device_of_the_workload_names_its_device(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(INC.format(device="gpu")), "-b", bundle_path)
    assert proc.returncode == 2
    assert "unknown device 'gpu' (the workload's DEVICE)" in proc.stderr, proc.stderr
    assert not bundle_path.exists()
    proc = warm("run", workload_file(INC.format(device="host")), "-b", bundle_path, "-d", "gpu")
    assert proc.returncode == 2
    assert "unknown device 'gpu':" in proc.stderr and "DEVICE" not in proc.stderr


def _tunable(**kwargs: int) -> Tunable:
    k = Kernel("void inc(int *x) { x[0] += 1; }", "inc", "P")
    return Tunable("t", {"a": k}, lambda rt, c, *a, stream=None: None, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"warmup": -1}, "tunable t: warmup is -1: give 0 or more launches"),
        ({"repeats": 0}, "tunable t: repeats is 0: give 1 or more timed launches"),
        ({"repeats": 2.5}, "tunable t: repeats is 2.5: give 1 or more timed launches"),
    ],
)
def test_a_tunable_with_no_repeats_or_a_negative_warmup_is_refused(
    kwargs: dict[str, int], said: str
) -> None:
    with pytest.raises(ValueError, match=said) as caught:
        _tunable(**kwargs)
    assert isinstance(caught.value, WarmError)
    assert _tunable(warmup=0, repeats=1).repeats == 1


def test_warm_run_refuses_a_tunable_with_no_repeats_in_one_line(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    source = INC.format(device="host") + (
        "from warmcli import Tunable\n"
        "T = Tunable('t', {'a': K}, lambda rt, k, x, stream=None: None, repeats=0)\n"
    )
    proc = warm("run", workload_file(source), "-b", bundle_path)
    assert proc.returncode == 2
    assert proc.stderr.endswith(
        "workload failed to import: TuneSpecError: tunable t: repeats is 0: give 1 or more "
        "timed launches\n"
    ), proc.stderr
    assert not bundle_path.exists()


def test_check_counts_an_entry_built_only_for_another_arch_once(
    warm: Warm, bundle_path: Path
) -> None:
    """`(14 not for this machine): 14 not servable here` read as 28 entries, not 14."""
    from conftest import EXAMPLES

    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    args = ("--compiler", "nvrtc", "--no-ptx", "-q")
    built = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_80", "-b", bundle_path, *args)
    assert built.returncode == 0, built.stdout + built.stderr
    proc = warm("check", bundle_path, "--arch", "sm_90", "--compiler", "nvrtc")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"bundle {bundle_path}: 8 kernel(s), 6 tune(s): 14 not servable here\n" in proc.stdout
    assert "not for this machine" not in proc.stdout
    doc = json.loads(warm("check", bundle_path, "--arch", "sm_90", "--json").stdout)
    assert doc["not_for_this_machine"] == 0 and doc["unservable_count"] == 14
    doc = json.loads(
        warm("check", bundle_path, "--arch", "sm_90", "--arch", "sm_80", "--json").stdout
    )
    assert doc["not_for_this_machine"] == 0 and doc["unservable_count"] == 20  # + 6 tunes pending


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_a_ptx_arch_the_compiler_cannot_build_is_refused_before_any_pass(
    warm: Warm, bundle_path: Path, compiler: str
) -> None:
    """`--ptx compute_70` with CUDA 13: each candidate failed with NVRTC_ERROR_INVALID_OPTION."""
    from conftest import EXAMPLES, nvcc_or_skip

    from warmcli.backends.cuda import nvcc, nvrtc

    if compiler == "nvrtc" and nvrtc.find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    known = nvrtc.supported_sms() if compiler == "nvrtc" else nvcc.supported_sms(nvcc_or_skip())
    if not known or 70 in known:
        pytest.skip(f"this {compiler} builds compute_70")
    args = ("--arch", "sm_80", "--ptx", "compute_70", "--compiler", compiler, "-b", bundle_path)
    proc = warm("run", EXAMPLES / "saxpy_cuda.py", *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    line = proc.stderr.splitlines()
    assert len(line) == 1 and line[0].startswith("warm: error: --ptx compute_70: the installed ")
    assert "does not build it; it builds compute_" in line[0] and "compute_80" in line[0]
    assert not bundle_path.exists()


def test_a_narrow_terminal_shows_every_name_of_warm_stats_whole(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`COLUMNS=40 warm stats`: the "device / tunable" column shrank to nothing and names
    were cut to `x8…`; under the width its columns need, one record follows another."""
    host_bundle(bundle_path)  # as `warm run examples/matmul_host.py -b B -q` makes it
    doc = warm.json("stats", bundle_path)
    wide = warm("stats", bundle_path).stdout
    warm.env["COLUMNS"] = "40"
    proc = warm("stats", bundle_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "…" not in proc.stdout and max(map(len, lines)) <= 40, proc.stdout
    for k in doc["kernels"]:
        assert any(ln.startswith(f"kernel     {k['entry']}") for ln in lines), proc.stdout
    for t in doc["tunes"]:
        assert any(ln.startswith(f"{t['operation']} ") for ln in lines), proc.stdout
    for k in doc["kernels"]:
        assert f"key        {k['key'][:8]}" in lines
    assert "device / tunable" in wide and "Kernels (" in proc.stdout
    assert any(ln.startswith("device / tunable  ") for ln in lines), proc.stdout


MODULE_LEVEL_RUNTIME = """\
import numpy as np
import warmcli
from warmcli import Kernel

DEVICE = "host"
RT = warmcli.runtime("host")
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")
{at_import}

def workload(rt):
    RT.launch(INC, RT.upload(np.ones(4, np.int32)), 4)
"""


def test_a_module_level_runtime_is_bound_to_the_pass_and_an_import_launch_is_named(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """A module-level `warmcli.runtime()` was the production runtime over WARM_HOME's
    bundle: what workload() launched on it was not stored, yet "the bundle is complete"."""
    script = workload_file(MODULE_LEVEL_RUNTIME.replace("{at_import}", ""))
    proc = warm("run", script, "-b", bundle_path, "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout
    served = warm.production(
        "import json, warmcli, numpy as np\n"
        "from warmcli.production import report\n"
        "rt = warmcli.runtime('host')\n"
        "from warmcli import Kernel\n"
        "K = Kernel('void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }',"
        " 'inc', 'Pi')\n"
        "rt.launch(K, rt.upload(np.ones(4, np.int32)), 4)\n"
        "print(json.dumps(len(report().kernels)))\n",
        bundle=bundle_path,
    )
    assert served == 0
    bundle_path.unlink()
    launch = "RT.launch(DBL, RT.upload(np.ones(4, np.int32)), 4)"
    script = workload_file(MODULE_LEVEL_RUNTIME.replace("{at_import}", launch), "twice.py")
    proc = warm("run", script, "-b", bundle_path, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout
    assert proc.stderr == (
        f"warm: warning: {script}:9: the workload's import used warmcli.runtime() before warm "
        "binds a pass's runtime: what it did there is not warmed (what workload() does on "
        "that runtime is): do it inside workload(rt)\n"
    ), proc.stderr
