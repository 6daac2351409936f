"""Upgrades under a warm bundle: what a fleet changes between warming and serving.

Through the real CLI (`warm run`, forked) and production processes (forks of one that
imported numpy and warmcli, `tests/forked_python.py`, where only WARM_* variables differ,
or `EXTRA_CFLAGS` too, `tests/forked_tool_env.py`; else started) compared with a cold
process: a check's helper that lives in a module beside the workload (`from checks import
close`), edited after warming, is another check, never the old pick served unchecked."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, TUNED_READ, Warm
from forked_cli import ForkedWarm
from forked_python import ForkedPython, produced
from forked_tool_env import ToolEnvPythons, ToolEnvServers
from test_compact_tunes import _format1
from test_keys_exact import GLOBAL_TOLERANCE, keys_producing  # noqa: F401  (`producing`)
from test_remote import Store, home, http_store  # noqa: F401  (fixtures)

from warmcli import Kernel, Tunable
from warmcli.bundle.remote import cache_dir, fetch


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


IMPORTED_HELPER = GLOBAL_TOLERANCE.replace(
    """def squares(outputs, inputs):
    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=RTOL)""",
    """import sys
sys.path.insert(0, os.path.dirname(__file__))  # (run by path)
HOW = os.environ.get("WARM_TEST_HOW", "from")
if HOW == "from":
    from checks import close
else:
    import checks


def squares(outputs, inputs):
    if HOW == "from":
        close(outputs[0], inputs[0] ** 2)
    else:
        checks.close(outputs[0], inputs[0] ** 2)""",
)
LOOSE = "import numpy as np\n\n\ndef close(a, b):\n    np.testing.assert_allclose(a, b, rtol=0.1)\n"


def _served_after_helper_edit(
    warm: Warm, workload_file, tmp_path: Path, how: str, producing: ForkedPython
) -> None:
    path = workload_file(IMPORTED_HELPER)
    helper = path.parent / "checks.py"
    helper.write_text(LOOSE)
    env = warm.with_env(WARM_TEST_HOW=how)  # (forked, as `warm`'s commands)
    bundle = tmp_path / "h.warm"
    done = env("run", path, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    assert produced(producing, env, TUNED_READ, path, 9, bundle=bundle)["tunes"] == 0
    helper.write_text(LOOSE.replace("rtol=0.1", "rtol=1e-6"))  # the helper edited
    assert produced(producing, env, TUNED_READ, path, 9) == {"y": 100.0, "tunes": 1}, "cold"
    served = produced(producing, env, TUNED_READ, path, 9, bundle=bundle)
    assert served == {"y": 100.0, "tunes": 1}


def test_a_check_helper_imported_by_name_from_a_module_beside_it_is_keyed(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    _served_after_helper_edit(warm, workload_file, tmp_path, "from", producing)


def test_a_check_helper_read_through_a_module_beside_it_is_keyed(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    _served_after_helper_edit(warm, workload_file, tmp_path, "module", producing)


# A host kernel whose options make cc read a file: SCALE comes from it (WARM_TEST_OPTS, as
# JSON, with HERE for the workload's folder).
FILE_OPTIONS = """
import json, os
from warmcli import Kernel

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
OPTS = tuple(o.replace("HERE", HERE) for o in json.loads(os.environ["WARM_TEST_OPTS"]))
K = Kernel('''#include <stdio.h>
void k(float *y, int n) { for (int i = 0; i < n; i++) y[i] = SCALE; }''', "k", "Pi",
           options=OPTS)


def workload(rt):
    y = rt.buffer(4)
    rt.launch(K, y, 4)
    return y
"""


# gcc's other spellings of `-include`, `-I` and `-idirafter`, and `-imacros`: one kernel
# each (`SPELLED`), all in one workload.
SPELLINGS = [
    ["-includeHERE/scale.h"],
    ["--include=HERE/scale.h"],
    ["--include", "HERE/scale.h"],
    ["-imacros", "HERE/scale.h"],
    ["-imacrosHERE/scale.h"],
    ["--imacros=HERE/scale.h"],
    ["--include-directory=HERE/inc", "-include", "scale.h"],
    ["--include-directory", "HERE/inc", "-include", "scale.h"],
    ["--include-directory-after=HERE/inc", "-include", "scale.h"],
]
SPELLED = f"""
import os
from warmcli import Kernel

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
KS = [Kernel('''#include <stdio.h>
void k(float *y, int i) {{ y[i] = SCALE; }}''', "k", "Pi",
             options=tuple(o.replace("HERE", HERE) for o in opts), name=f"k{{i}}")
      for i, opts in enumerate({SPELLINGS!r})]


def workload(rt):
    y = rt.buffer(len(KS))
    for i, k in enumerate(KS):
        rt.launch(k, y, i)
    return y
"""
# A production process: what each kernel wrote (`y`), and the tunes it measured.
EVERY_READ = TUNED_READ.replace("float(y[int(sys.argv[2])])", "[float(v) for v in y]")


def test_a_header_cc_reads_before_the_source_in_any_spelling_is_keyed(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """gcc's other spellings of `-include`, `-I` and `-idirafter`, and `-imacros`: the
    header edited after warming is another kernel (a miss, 3.0), never the old build (2.0).
    (Each spelling its own kernel of one workload: one served value a spelling, so one
    spelling not keyed is its own 2.0 among the 3.0s.)"""
    path = workload_file(SPELLED)
    (tmp_path / "inc").mkdir()
    headers = [tmp_path / "scale.h", tmp_path / "inc" / "scale.h"]
    for header in headers:
        header.write_text("#define SCALE 2\n")
    bundle = tmp_path / "o.warm"
    done = warm("run", path, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    count = len(SPELLINGS)
    served = produced(producing, warm, EVERY_READ, path, bundle=bundle)
    assert served == {"y": [2.0] * count, "tunes": 0}
    for header in headers:
        header.write_text("#define SCALE 3\n")
    cold = produced(producing, warm, EVERY_READ, path)
    assert cold == {"y": [3.0] * count, "tunes": 0}, "cold"
    served = produced(producing, warm, EVERY_READ, path, bundle=bundle)
    assert served == {"y": [3.0] * count, "tunes": 0}


@pytest.mark.parametrize(
    "option",
    ["@HERE/flags.txt", "-Wl,@HERE/link.txt", "--sysroot=HERE", "-isysroot", "-specs=HERE/x"],
)
def test_an_option_file_cc_would_read_fails_the_kernel_naming_it(
    warm: Warm, workload_file, tmp_path: Path, option: str
) -> None:
    """gcc's `@file` reads options no key covers (an edit of -DSCALE=2 was served the old
    build): the kernel's compile fails naming the option, as nvcc's --options-file does;
    so do a system root (`--sysroot`, `-isysroot`: system headers no key covers) and a
    specs file (`-specs=`: more options)."""
    path = workload_file(FILE_OPTIONS)
    (tmp_path / "flags.txt").write_text("-DSCALE=2\n")
    (tmp_path / "link.txt").write_text("-lm\n")
    opts = [option] if option.startswith("@") else [option, "-DSCALE=2"]
    done = warm.with_env(WARM_TEST_OPTS=json.dumps(opts))("run", path, "-b", tmp_path / "f.warm")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "reads a file" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


ONE_KERNEL = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void k(float *y, int n) { for (int i = 0; i < n; i++) y[i] = 2.0f; }", "k", "Pi")


def workload(rt):
    y = rt.buffer(4)
    rt.launch(K, y, 4)
    return y
"""


def _newer_format(good: Path, to: Path) -> bytes:
    """`good` as a newer warm would have written it: format 4, which this warm does not read."""
    to.write_bytes(good.read_bytes())
    with contextlib.closing(sqlite3.connect(to)) as conn:
        conn.execute("PRAGMA user_version = 4")
        conn.execute("UPDATE manifest SET value = '4' WHERE key = 'format_version'")
        conn.commit()
    return to.read_bytes()


def test_a_newer_formats_bundle_refused_is_not_downloaded_again_at_every_start(
    http_store: tuple[Store, str, Any],  # noqa: F811
    warm: Warm,
    workload_file,
    tmp_path: Path,
    home: Path,  # noqa: F811
) -> None:
    """A newer warm pushed format 4 to the store the fleet serves from: each process of this
    warm downloaded it whole, refused it and served its last good copy; the next process
    downloaded it again (a conditional GET under the good copy's ETag). Now the refusal is
    remembered by the ETag it was made of (and this warm's version): the store is asked
    only whether it still holds that one, and the refusal is said again, no download."""
    store, base, _ = http_store
    good = tmp_path / "good.warm"
    assert warm("run", workload_file(ONE_KERNEL), "-b", good, "-q").returncode == 0
    url = base + "/b.warm"
    store.files["/b.warm"] = good.read_bytes()
    assert fetch(url).downloaded and store.downloads == 1
    store.files["/b.warm"] = _newer_format(good, tmp_path / "four.warm")
    for _ in range(3):
        kept = fetch(url)
        assert not kept.downloaded and kept.path.read_bytes() == good.read_bytes()
        assert "format version 4" in (kept.warning or ""), kept.warning
        assert "last good copy" in (kept.warning or "")
    assert store.downloads == 2  # the good copy once, the refused one once
    meta = cache_dir(url) / "meta.json"  # as another warm (reading other formats) wrote it
    doc = json.loads(meta.read_text())
    meta.write_text(json.dumps({**doc, "refused_by": "warm 0.0.9 formats 1,2"}))
    assert not fetch(url).downloaded and store.downloads == 3  # asked again, then refused
    store.files["/b.warm"] = good.read_bytes() + b""  # the store holds a readable one again
    assert fetch(url).warning is None


def _explained(warm: Warm, bundle: Path, workload: Path) -> list[str]:
    done = warm("verify", bundle, "--workload", workload, "--json")
    assert done.returncode == 1, done.stderr
    return [e["detail"] for e in json.loads(done.stdout)["explanations"] if e["kind"] == "tune"]


def test_a_checked_tunes_miss_says_whether_a_kernel_or_the_check_differs(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Same candidate names, another checksum: the explanation said only that a kernel, the
    check or the launch function differed (a Python upgrade, which changes every check's
    code digest, read as a kernel edit). Now it names the candidate whose kernel is not the
    bundle's build, or says every kernel is and the check or launch function differs."""
    path = workload_file(GLOBAL_TOLERANCE)
    bundle = tmp_path / "c.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    check = workload_file(GLOBAL_TOLERANCE.replace("rtol=RTOL", "rtol=RTOL / 2"), "check.py")
    (detail,) = _explained(warm, bundle, check)
    assert detail.startswith("same candidates and kernels as the bundle's: the output check")
    assert "another Python version" in detail
    kernel = workload_file(GLOBAL_TOLERANCE.replace("1.01f", "1.02f"), "kernel.py")
    (detail,) = _explained(warm, bundle, kernel)
    assert detail.startswith("same candidate names, the kernel of candidate 'off'"), detail


SCALED = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void k(float *y, int n) { for (int i = 0; i < n; i++) y[i] = SCALE; }", "k", "Pi")


def workload(rt):
    y = rt.buffer(4)
    rt.launch(K, y, 4)
    return y
"""


WRAPPERS = {
    "shell": '#!/bin/sh\nexec cc $EXTRA_CFLAGS "$@"\n',
    "python": "#!/usr/bin/env python3\nimport os, sys\n"
    'os.execvp("cc", ["cc", *os.environ.get("EXTRA_CFLAGS", "").split(), *sys.argv[1:]])\n',
}


@pytest.fixture(scope="module")
def flagged() -> Iterator[tuple[ToolEnvPythons, ToolEnvServers]]:
    """Forking servers of production processes and commands whatever `EXTRA_CFLAGS` (which
    no server's imports read) a process sets (`tests/forked_tool_env.py`)."""
    pythons, servers = ToolEnvPythons(ROOT, "EXTRA_CFLAGS"), ToolEnvServers(ROOT, "EXTRA_CFLAGS")
    yield pythons, servers
    pythons.close()
    servers.close()


@pytest.mark.parametrize("language", sorted(WRAPPERS))
def test_a_wrapper_compilers_flags_from_the_environment_key_its_builds(
    warm: Warm,
    workload_file: Any,
    tmp_path: Path,
    language: str,
    flagged: tuple[ToolEnvPythons, ToolEnvServers],
) -> None:
    """`exec gcc $EXTRA_CFLAGS "$@"` as WARM_CC: warmed with -DSCALE=2, served where the
    environment says -DSCALE=3, the old build was served (2.0) where a cold process computed
    3.0, and `warm run` there built nothing new. The variables a wrapper names are keyed."""
    wrapper = tmp_path / "wcc"
    wrapper.write_text(WRAPPERS[language])
    wrapper.chmod(0o755)
    path, bundle = workload_file(SCALED), tmp_path / "w.warm"
    pythons, servers = flagged  # (each process forked, whatever EXTRA_CFLAGS it sets)
    two = ForkedWarm(Warm(dict(warm.env, WARM_CC=str(wrapper), EXTRA_CFLAGS="-DSCALE=2")), servers)
    assert two("run", path, "-b", bundle, "-q").returncode == 0
    served = produced(pythons, two, TUNED_READ, path, 0, bundle=bundle)  # type: ignore[arg-type]
    assert served == {"y": 2.0, "tunes": 0}
    three = ForkedWarm(Warm(dict(two.env, EXTRA_CFLAGS="-DSCALE=3")), servers)
    cold = produced(pythons, three, TUNED_READ, path, 0)  # type: ignore[arg-type]
    assert cold == {"y": 3.0, "tunes": 0}, "cold"
    served = produced(pythons, three, TUNED_READ, path, 0, bundle=bundle)  # type: ignore[arg-type]
    assert served == {"y": 3.0, "tunes": 0}
    done = three("run", path, "-b", bundle)
    assert done.returncode == 0 and "stored 1 new kernel" in done.stdout, done.stdout


TOL64 = np.float64(0.1)
BOUNDS = (np.float64(0.5), np.float32(2.0))
STRICT = np.bool_(True)


def _square_check(outputs: Any, inputs: Any) -> None:
    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=TOL64)
    assert BOUNDS[0] <= BOUNDS[1] or not STRICT


def _launch(rt: Any, k: Any, x: Any, y: Any, n: int, *, stream: Any = None) -> None:
    rt.launch(k, x, y, n, stream=stream)


def test_a_checks_numpy_values_key_alike_under_numpy_1_and_2_printing() -> None:
    """A check reading `TOL = np.float64(0.1)` keyed it by its repr, which numpy 2 prints
    `np.float64(0.1)` and numpy 1 `0.1` (a bundle warmed before a numpy upgrade missed every
    such checked tune: measured again for nothing); `np.bool_` is `bool_` in numpy 1, `bool`
    in 2. numpy 2's legacy printing (`legacy="1.25"`) prints scalars as numpy 1 did."""
    sq = Kernel("void sq(const float *x, float *y, int n) { y[0] = x[0]; }", "sq", "PPi")

    def made() -> str:
        return Tunable("sq", {"a": sq}, _launch, check=_square_check).checksum

    now = made()
    saved = np.get_printoptions()
    try:
        np.set_printoptions(legacy="1.25")
        assert repr(TOL64) == "0.1"  # as numpy 1 prints it
        assert made() == now
    finally:
        np.set_printoptions(**saved)


SERVE_EXPLAINED = """
import json, logging, runpy, sys
import warmcli
seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append(record.getMessage())
logging.getLogger("warmcli").addHandler(Keep())
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
y = rt.read(module["workload"](rt))
r = warmcli.report()
print(json.dumps({"y": float(y[9]), "kernels": len(r.kernels), "tunes": len(r.tunes),
                  "explained": seen}))
"""
CROSS = GLOBAL_TOLERANCE.replace(
    "    rt.tune(SQ, x, y, 1000)\n",
    "    rt.tune(SQ, x, y, 1000)\n    rt.tune(PLAIN, x, y, 1000)\n",
).replace(
    "SQ = Tunable(",
    'PLAIN = Tunable("plain", {"good": GOOD, "off": OFF}, launch, restore=(1,))\nSQ = Tunable(',
)


def _other_pythons() -> list[str]:
    """Interpreters of another Python version than this one that run warm from this checkout
    (its dependencies importable): `WARM_TEST_PYTHONS` (paths joined by `os.pathsep`), then
    pyenv's 3.11 and newer."""
    named = [p for p in os.environ.get("WARM_TEST_PYTHONS", "").split(os.pathsep) if p]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    named += sorted(glob.glob(os.path.join(root, "versions", "3.1[1-9]*", "bin", "python3")))
    found = []
    probe = "import sys, numpy, typer, rich, platformdirs, filelock; print(sys.version_info[:2])"
    for python in named:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        if done.returncode == 0 and done.stdout.strip() != str(sys.version_info[:2]):
            found.append(python)
    return found


def _served(python: str, path: Path, env: dict[str, str]) -> Any:
    """The workload at `path` served by `python` in `env` (warm from this checkout)."""
    done = subprocess.run(
        [python, "-c", SERVE_EXPLAINED, str(path)],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(ROOT), WARM_EXPLAIN="1"),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_bundle_warmed_under_one_python_serves_another_or_misses_cleanly(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Warmed under this Python, served under another: the kernels and the unchecked tune are
    served (nothing in their keys is Python's), the checked tune is measured again (its
    check's code digest is Python's bytecode), said so, and the result is a cold start's."""
    others = _other_pythons()
    if not others:
        pytest.skip("no other Python version here runs warm (WARM_TEST_PYTHONS)")
    path, bundle = workload_file(CROSS), tmp_path / "py.warm"
    assert warm("run", path, "-b", bundle, "-q").returncode == 0
    for python in others:
        cold = _served(python, path, warm.env)
        hot = _served(python, path, dict(warm.env, WARM_BUNDLE=str(bundle)))
        assert hot["y"] == cold["y"] and hot["kernels"] == 0, (python, hot)
        assert hot["tunes"] <= 1, hot  # the checked one, where the digests differ
        if hot["tunes"]:
            (line,) = hot["explained"]
            assert "another Python version" in line, line


def test_a_write_back_that_migrates_an_older_format_says_so(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython
) -> None:
    """A production process writing back (WARM_BUNDLE_WRITE=1) into a format-1 bundle
    migrated it to format 3 without a word (`warm clean` says so): every warm of the fleet
    still reading only format 1 then refused it at start. It says so, once, on stderr."""
    path, bundle = workload_file(ONE_KERNEL), tmp_path / "one.warm"
    _format1(bundle, [])
    with sqlite3.connect(bundle) as conn:  # the whole manifest, as warm wrote it
        conn.executemany(
            "INSERT INTO manifest VALUES (?, ?)",
            [("warm_version", "1.0"), ("created", "1.0"), ("updated", "1.0")],
        )
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1")
    done = producing.run(TUNED_READ, str(path), "0", env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"y": 2.0, "tunes": 0}
    assert "migrated it from format 1 to 3" in done.stderr, done.stderr
    assert "cannot read it now" in done.stderr and "Traceback" not in done.stderr
    with contextlib.closing(sqlite3.connect(bundle)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (1,)


def _format1_bundle(path: Path) -> Path:
    """An empty format-1 bundle at `path`, its manifest whole, as warm 1 wrote it."""
    _format1(path, [])
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO manifest VALUES (?, ?)",
            [("warm_version", "1.0"), ("created", "1.0"), ("updated", "1.0")],
        )
    return path


def test_warm_run_into_an_older_formats_bundle_says_it_migrated_it(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`warm run -b` a format-1 bundle (a warm upgraded in CI) migrated it to format 3 and
    said nothing (`warm clean` says it): the fleet's older warms then refused it at start."""
    path, bundle = workload_file(ONE_KERNEL), _format1_bundle(tmp_path / "one.warm")
    done = warm("run", path, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "migrated from format 1 to 3: a warm that reads only format 1 cannot read" in said
    doc = warm.json("run", path, "-b", _format1_bundle(tmp_path / "two.warm"))
    assert doc["format"] == {"before": 1, "after": 3}
    doc = warm.json("run", path, "-b", tmp_path / "two.warm")  # now format 3: nothing to say
    assert doc["format"] == {"before": 3, "after": 3}


def test_warm_diff_says_a_tune_in_both_differs_by_its_checksum(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Bundles warmed under two Pythons (or with the check edited) hold one checked tune each
    for the same operation, shape and device: `warm diff` listed it as only in A and only in
    B, twice the same row, without a word of why. It says the two differ by their candidate
    set's checksum, and whether their candidates' kernels are the same."""
    a, b = tmp_path / "a.warm", tmp_path / "b.warm"
    assert warm("run", workload_file(GLOBAL_TOLERANCE), "-b", a, "-q").returncode == 0
    edited = workload_file(GLOBAL_TOLERANCE.replace("rtol=RTOL", "rtol=RTOL / 2"), "edited.py")
    assert warm("run", edited, "-b", b, "-q").returncode == 0
    done = warm("diff", a, b)
    said = " ".join(done.stdout.split())
    assert "1 tune(s) in A and B for the same operation, shapes and device" in said, said
    assert "same candidate kernels: the output check or the launch function differs" in said
    doc = warm.json("diff", a, b)
    (twin,) = doc["tunes"]["checksum_differs"]
    assert twin["operation"] == "sq" and twin["same_kernels"] is True
