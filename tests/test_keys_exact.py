"""A bundle never serves what a cold process would not compute: keys as exact as the work.

Through the real CLI (`warm run`, forked) and production processes (forks of one that
imported numpy and warmcli, `tests/forked_python.py`; those under another `CPATH` forks of
servers whose imports read none, `tests/forked_tool_env.py`),
with and without the bundle, compared with a cold process: a tune keyed (`key=`) on a float
array whose elements differ past numpy's 8 printed digits is a miss, not another array's
pick; a header reached by the compiler's search order (`-iquote` before `-I` for a quoted
name, `-I` before `-isystem`, `-idirafter` last) is the one keyed, so its edit is a new
kernel."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, TUNED_READ, Warm
from forked_cli import ForkedWarm
from forked_python import ForkedPython, produced
from forked_tool_env import ToolEnvPythons, ToolEnvServers

from warmcli import Kernel
from warmcli.kernel import kernel_key
from warmcli.runtime.tune_spec import key_text


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


@pytest.fixture(name="producing", scope="module")
def keys_producing() -> Iterator[ForkedPython]:
    """The server of the module's production processes (`produced`): each a fork of one
    that imported numpy and warmcli, in its test's environment (its settings, WARM_* and
    WARM_TEST_* variables, read at call time)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)
    yield server
    server.close()


ARRAY_KEY = """
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
GENERAL = Kernel(r'''
void scale(const double *x, double *y, const double *c, int n) {
    for (int r = 0; r < 200; r++)
        for (int i = 0; i < n; i++) y[i] = x[i] * c[0];
}''', "scale", "PPPi")
UNIT = Kernel(r'''
void scale(const double *x, double *y, const double *c, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i];   /* right only where c[0] == 1 */
}''', "scale", "PPPi")


def launch(rt, k, x, y, c, n, coeffs, *, stream=None):
    rt.launch(k, x, y, c, n, stream=stream)


SCALE = Tunable("scale", {"general": GENERAL, "unit": UNIT}, launch,
                key=lambda x, y, c, n, coeffs: [list(x.shape), coeffs],
                check="general", check_tolerance=(0, 0))


def workload(rt):
    coeffs = np.array([float(os.environ.get("WARM_TEST_C0", "1.0")), 2.0])
    x = rt.upload(np.linspace(1, 2, 4096))
    y = rt.buffer(4096, "float64")
    rt.tune(SCALE, x, y, rt.upload(coeffs), 4096, coeffs)
    return y
"""


def test_a_key_array_differing_past_eight_digits_is_a_miss_not_another_pick(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    path = workload_file(ARRAY_KEY)
    bundle = tmp_path / "a.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    near = warm.with_env(WARM_TEST_C0="1.000000001")
    cold = produced(producing, near, TUNED_READ, path, -1)
    assert cold["y"] == 2 * 1.000000001, "cold: the check excludes 'unit' at c0 != 1"
    served = produced(producing, near, TUNED_READ, path, -1, bundle=bundle)
    assert served == {"y": cold["y"], "tunes": 1}, "a miss, never the pick made at 1.0"
    hit = produced(producing, warm, TUNED_READ, path, -1, bundle=bundle)
    assert hit["tunes"] == 0, "what was warmed hits"


def test_an_arrays_key_text_holds_every_digit_and_short_values_key_as_before() -> None:
    def text(value: object) -> str:
        return key_text("t", value)

    assert text(np.array([1.0, 1 + 1e-9])) != text(np.array([1.0, 1.0]))
    assert text(np.array([123456789012.0, 1.0])) != text(np.array([123456789013.0, 1.0]))
    for value in (np.array([0.1, 0.25]), np.eye(2), np.arange(6), np.float32([1.5, 2])):
        assert text(value) == json.dumps(str(value)), "keys of short values are unchanged"


def _key(source: str, options: tuple[str, ...]) -> str:
    return kernel_key(Kernel(source, "f", "P", options=options), "x86_64", "gcc")


HEADER_WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel('#include "cfg.h"\\nvoid f(int *x) { x[0] = VAL; }', "f", "P",
           options=("-I", HERE + "/a", "-iquote", HERE + "/b"))


def workload(rt):
    x = rt.buffer(1, "int32")
    rt.launch(K, x)
    return x
"""

HEADER_SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
x = rt.read(module["workload"](rt))
print(json.dumps({"val": int(x[0]), "kernels": len(warmcli.report().kernels)}))
"""


def test_an_edit_of_the_header_the_compiler_reads_first_is_a_new_kernel(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """gcc reads a quoted name from the `-iquote` folder before the `-I` one."""
    for folder, val in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cfg.h").write_text(f"#define VAL {val}\n")
    path = workload_file(HEADER_WORKLOAD)
    bundle = tmp_path / "h.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    assert produced(producing, warm, HEADER_SERVE, path, bundle=bundle) == {"val": 2, "kernels": 0}
    (tmp_path / "b" / "cfg.h").write_text("#define VAL 3\n")
    assert produced(producing, warm, HEADER_SERVE, path) == {"val": 3, "kernels": 1}, "cold"
    served = produced(producing, warm, HEADER_SERVE, path, bundle=bundle)
    assert served == {"val": 3, "kernels": 1}, "never the stale build"


def test_headers_are_keyed_in_the_compilers_search_order(tmp_path: Path) -> None:
    for folder in ("q", "i", "s", "d"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cfg.h").write_text("#define VAL 1\n")
    q, i, s, d = (str(tmp_path / f) for f in ("q", "i", "s", "d"))
    quoted, angled = '#include "cfg.h"\nvoid f(int *x) {}', "#include <cfg.h>\nvoid f(int *x) {}"
    cases = [  # options (given in an order the compiler does not search), the folder read
        (quoted, ("-I", i, "-iquote", q), "q"),
        (angled, ("-iquote", q, "-I", i), "i"),  # an angled name: never -iquote's folder
        (angled, ("-isystem", s, "-I", i), "i"),
        (quoted, (f"-idirafter{d}", f"-isystem{s}"), "s"),
    ]
    for case, (source, options, read) in enumerate(cases):
        before = _key(source, options)
        for folder in ("q", "i", "s", "d"):
            (tmp_path / folder / "cfg.h").write_text(f"#define VAL {case + 2}\n")
            changed = _key(source, options) != before
            assert changed == (folder == read), (options, folder)
            before = _key(source, options)


ENV_WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel('#include "cfg.h"\\nvoid f(int *x) { x[0] = VAL; }', "f", "P")


def workload(rt):
    x = rt.buffer(1, "int32")
    rt.launch(K, x)
    return x
"""


def test_a_header_found_through_cpath_or_c_include_path_is_keyed(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """gcc reads include folders from `CPATH` and `C_INCLUDE_PATH` too: the header it
    finds there is keyed as one found in an `-I` folder, never served stale."""
    pythons, servers = ToolEnvPythons(ROOT), ToolEnvServers(ROOT)
    try:
        _header_through_cpath(warm, workload_file, tmp_path, producing, pythons, servers)
    finally:
        pythons.close()
        servers.close()


def _header_through_cpath(
    warm: Warm,
    workload_file: Any,
    tmp_path: Path,
    producing: ForkedPython,
    pythons: ToolEnvPythons,
    servers: ToolEnvServers,
) -> None:
    """The test above, its processes under each `CPATH` forks of `pythons` and `servers`."""
    for folder, val in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cfg.h").write_text(f"#define VAL {val}\n")
    path = workload_file(ENV_WORKLOAD)
    bundle = tmp_path / "e.warm"
    under_a = ForkedWarm(Warm(dict(warm.env, CPATH=str(tmp_path / "a"))), servers)
    assert under_a("run", path, "-b", bundle, "-q").returncode == 0
    served = produced(pythons, under_a, HEADER_SERVE, path, bundle=bundle)  # type: ignore[arg-type]
    assert served == {"val": 1, "kernels": 0}
    for variable in ("CPATH", "C_INCLUDE_PATH"):
        under_b = Warm(dict(warm.env, **{variable: str(tmp_path / "b")}))
        cold = produced(pythons, under_b, HEADER_SERVE, path)  # type: ignore[arg-type]
        assert cold == {"val": 2, "kernels": 1}, "cold"
        served = produced(pythons, under_b, HEADER_SERVE, path, bundle=bundle)  # type: ignore[arg-type]
        assert served == {"val": 2, "kernels": 1}, f"{variable}: never the stale build"
    (tmp_path / "a" / "cfg.h").write_text("#define VAL 3\n")
    served = produced(pythons, under_a, HEADER_SERVE, path, bundle=bundle)  # type: ignore[arg-type]
    assert served == {"val": 3, "kernels": 1}, "an edit there is a new kernel"
    explained = dict(warm.env, WARM_EXPLAIN="1", WARM_BUNDLE=str(bundle))
    # no CPATH at all: a miss, explained; its compile finds no cfg.h
    proc = producing.run(HEADER_SERVE, str(path), env=explained, cwd=ROOT)
    assert proc.returncode != 0 and "KernelCompileError" in proc.stderr, proc.stderr
    assert "miss: kernel f: headers: bundle has sha256" in proc.stderr, proc.stderr
    assert "no headers from include folders" in proc.stderr, proc.stderr


CHECKED_HEADER = """
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
OPTS = ("-I" + os.path.dirname(os.path.abspath(__file__)) + "/inc",)
SAFE = Kernel(r'''
void add(const double *x, double *y, int n) {
    for (int r = 0; r < 300; r++) for (int i = 0; i < n; i++) y[i] = x[i] + 1.0;
}''', "add", "PPi", options=OPTS)
FAST = Kernel(r'''
#include "cfg.h"
void add(const double *x, double *y, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] + 1.0 + SHIFT;   /* right only where SHIFT is 0 */
}''', "add", "PPi", options=OPTS)


def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)


ADD = Tunable("add", {"safe": SAFE, "fast": FAST}, launch, check="safe")


def workload(rt):
    x = rt.upload(np.arange(4096.0))
    y = rt.buffer(4096, "float64")
    rt.tune(ADD, x, y, 4096)
    return y
"""


def test_a_candidates_edited_header_is_a_new_tune_its_check_judges_again(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """The pick was checked with the header as it was: after an edit that makes it wrong,
    a hit would run it unchecked (6.5); a cold process checks it and runs 'safe' (6.0)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.h").write_text("#define SHIFT 0.0\n")
    path = workload_file(CHECKED_HEADER)
    bundle = tmp_path / "t.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    assert produced(producing, warm, TUNED_READ, path, 5, bundle=bundle) == {"y": 6.0, "tunes": 0}
    (tmp_path / "inc" / "cfg.h").write_text("#define SHIFT 0.5\n")
    assert produced(producing, warm, TUNED_READ, path, 5) == {"y": 6.0, "tunes": 1}, "cold"
    assert produced(producing, warm, TUNED_READ, path, 5, bundle=bundle) == {"y": 6.0, "tunes": 1}


def test_a_relative_include_folder_is_the_working_folders_as_gcc_takes_it(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """`-I inc` names `./inc` for the key and for the compiler alike (which runs in a
    scratch folder of its own, where `inc` named nothing: every compile failed)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.h").write_text("#define VAL 1\n")
    path = workload_file(ENV_WORKLOAD.replace('"P")', '"P", options=("-I", "inc"))'))
    bundle = tmp_path / "r.warm"
    run = warm("run", path, "-b", bundle, "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    def served() -> object:  # (in tmp_path: `-I inc` is its `inc`)
        env = dict(warm.env, WARM_BUNDLE=str(bundle))
        proc = producing.run(HEADER_SERVE, str(path), env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert served() == {"val": 1, "kernels": 0}
    (tmp_path / "inc" / "cfg.h").write_text("#define VAL 2\n")
    assert served() == {"val": 2, "kernels": 1}


GLOBAL_TOLERANCE = """
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
RTOL = float(os.environ.get("WARM_TEST_RTOL", "0.1"))
GOOD = Kernel("void sq(const float *x, float *y, int n) { for (int r = 0; r < 300; r++) "
              "for (int i = 0; i < n; i++) y[i] = x[i] * x[i]; }", "sq", "PPi")
OFF = Kernel("void sq(const float *x, float *y, int n) { "
             "for (int i = 0; i < n; i++) y[i] = x[i] * x[i] * 1.01f; }", "sq", "PPi")


def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)


def squares(outputs, inputs):
    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=RTOL)


SQ = Tunable("sq", {"good": GOOD, "off": OFF}, launch, check=squares, restore=(1,))


def workload(rt):
    x = rt.upload(np.arange(1, 1001, dtype=np.float32))
    y = rt.buffer(1000)
    rt.tune(SQ, x, y, 1000)
    return y
"""


CLASS_TOLERANCE = GLOBAL_TOLERANCE.replace(
    'RTOL = float(os.environ.get("WARM_TEST_RTOL", "0.1"))',
    'class Config:\n    RTOL = float(os.environ.get("WARM_TEST_RTOL", "0.1"))',
).replace("rtol=RTOL", "rtol=Config.RTOL")
MODULE_TOLERANCE = GLOBAL_TOLERANCE.replace(
    'RTOL = float(os.environ.get("WARM_TEST_RTOL", "0.1"))',
    "import sys\nsys.path.insert(0, os.path.dirname(__file__))  # (run by path)\nimport tolerances",
).replace("rtol=RTOL", "rtol=tolerances.RTOL")


@pytest.mark.parametrize("held_by", ["global", "class", "module"])
def test_a_tolerance_a_check_reads_keys_its_value(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython, held_by: str
) -> None:
    """Warmed with RTOL=0.1 ('off', 1% high, passes and wins); served with RTOL=1e-6, the
    check that would exclude it is another check: a miss, never 'off' unchecked. The
    tolerance a module global, `Config.RTOL`, or `tolerances.RTOL` (a module beside it)."""
    sources = {"global": GLOBAL_TOLERANCE, "class": CLASS_TOLERANCE, "module": MODULE_TOLERANCE}
    source = sources[held_by]
    path = workload_file(source)
    (path.parent / "tolerances.py").write_text(
        'import os\nRTOL = float(os.environ.get("WARM_TEST_RTOL", "0.1"))\n'
    )
    bundle = tmp_path / "k.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    assert produced(producing, warm, TUNED_READ, path, 9, bundle=bundle)["tunes"] == 0
    tight = warm.with_env(WARM_TEST_RTOL="1e-6")
    assert produced(producing, tight, TUNED_READ, path, 9) == {"y": 100.0, "tunes": 1}, "cold"
    assert produced(producing, tight, TUNED_READ, path, 9, bundle=bundle) == {
        "y": 100.0,
        "tunes": 1,
    }


HELPER_CHECK = GLOBAL_TOLERANCE.replace(
    """def squares(outputs, inputs):
    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=RTOL)""",
    """if os.environ.get("WARM_TEST_TIGHT"):
    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-6)
else:
    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=0.1)


def squares(outputs, inputs):
    close(outputs[0], inputs[0] ** 2)""",
)


def test_a_check_calling_a_helper_of_its_module_keys_the_helpers_code(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """The check's tolerance lives in a helper it calls: an edit there is another check."""
    assert "close(outputs[0]" in HELPER_CHECK
    path = workload_file(HELPER_CHECK)
    bundle = tmp_path / "h.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    assert produced(producing, warm, TUNED_READ, path, 9, bundle=bundle)["tunes"] == 0
    tight = warm.with_env(WARM_TEST_TIGHT="1")
    assert produced(producing, tight, TUNED_READ, path, 9) == {"y": 100.0, "tunes": 1}, "cold"
    assert produced(producing, tight, TUNED_READ, path, 9, bundle=bundle) == {
        "y": 100.0,
        "tunes": 1,
    }


LAUNCH_EDIT = (
    GLOBAL_TOLERANCE.replace("int n) {", "int n, int mode) {")
    .replace('"PPi")', '"PPii")')
    .replace("x[i] * x[i] * 1.01f", "x[i] * x[i] * (mode ? 1.01f : 1.0f)")
    .replace("rtol=RTOL", "rtol=1e-6")
    .replace(
        """def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)""",
        """if os.environ.get("WARM_TEST_MODE"):
    def launch(rt, k, x, y, n, *, stream=None):
        rt.launch(k, x, y, n, 1, stream=stream)
else:
    def launch(rt, k, x, y, n, *, stream=None):
        rt.launch(k, x, y, n, 0, stream=stream)""",
    )
)


def test_an_edited_launch_function_of_a_checked_tunable_is_a_new_tune(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """Warmed with a launch under which 'off' passes the check (and wins); served with a
    launch under which it computes 1% high: the check that excluded it cold must judge it
    again, never the old pick run unchecked."""
    assert "(mode ? 1.01f" in LAUNCH_EDIT and "n, 1, stream" in LAUNCH_EDIT
    path = workload_file(LAUNCH_EDIT)
    bundle = tmp_path / "l.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    assert produced(producing, warm, TUNED_READ, path, 9, bundle=bundle)["tunes"] == 0
    edited = warm.with_env(WARM_TEST_MODE="1")
    assert produced(producing, edited, TUNED_READ, path, 9) == {"y": 100.0, "tunes": 1}, "cold"
    assert produced(producing, edited, TUNED_READ, path, 9, bundle=bundle) == {
        "y": 100.0,
        "tunes": 1,
    }
