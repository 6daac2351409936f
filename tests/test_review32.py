"""A senior review of round 32's changes: what they broke for a legitimate user.

Through the real CLI in subprocesses and real cc on the host backend (pure logic where
only a digest is compared); a production script whose result is what is tested (served
strict or not) runs as a fork of one process that imported numpy and warmcli
(`tests/forked_python.py`).

Bugs it found:
- the new code digest of a check's and launch function's code (`code_digest`, keyed by
  instruction names and values so `python -OO` is served what plain python warmed) lost
  what the raw bytecode had told apart: the order of a function's parameters (`LOAD_FAST`
  by name: `def check(out, inp)` and `def check(inp, out)` with the same body hashed
  alike) and the ranges a `try` covers (the exception table; a `try:`'s `NOP` was left
  out, so a `try` around one statement more hashed alike). A bundle warmed with one check
  was served strict to a process with the other: a check that computes differently, its
  pick never judged by it. Kind-only parameters and `*args` were never told apart either;
  the digest now holds the code's signature (counts, flags, variable names in order) and
  its exception table by instruction place;
- a call's keyword names were no part of it either (Python 3.11's `dis` gives `KW_NAMES`
  no value: `<unknown>`), so `np.isclose(o, 1.0, rtol=0.5)` and `np.isclose(o, 1.0,
  atol=0.5)` hashed alike; a constant is now read from the code's own table by its index;
- a workload known by its file's name has the functions its module holds renamed as of
  that name, but not a lambda kept in a dict: a check made so, calling a helper of its
  module, lost that helper from its key under `warm run` (no longer "of its module"),
  while a process importing the module keyed it: a strict miss. A helper is of the
  check's module by its name or by its globals now;
- under umask 0 (a container's entry point may set it) warm made its own home writable by
  every user, then refused the default bundle in it: the second `warm run` without
  `--bundle` failed with exit 2 ('others may write it'), and a production process ran
  cold. A folder warm makes is never writable by every user now (`home.make_folder`);
- the code digest found each jump's target by scanning every instruction: a generated
  check of 30,000 branches took minutes to key (in every process, at its first tune); a
  binary search now;
- a `bundle.warm` link to no file, planted in a `WARM_HOME` every user may write, was not
  refused (who may write it was asked only where it exists): `warm run` made the file the
  link names, wherever another user chose. A link is judged as the bundle now;
- a header a host kernel reads by `#import` (GCC's extension) or `#include_next` through
  `CPATH` was not keyed (only `#include` lines were read; today's shortcut tested for the
  word "include"): its edit was served the old build, 1.0 where the source now gives 2.0;
- `warm run -m pkg` whose `__init__.py` raises printed warm's traceback (exit 1): its
  `__main__` was looked for by importing the package outside the guarded import. It is
  looked for as a file in the package's folders now, the package imported where guarded;
- a module global naming a library's function that a check calls (`compare = np.greater`)
  was no part of the key: a bundle warmed with `np.greater` was served strict to a process
  whose `compare` is `np.less`. Which function it names is keyed now (module and name).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from forked_python import ForkedPython
from test_unseen32 import STRICT_SERVE

from warmcli.runtime.check_keys import check_identity
from warmcli.runtime.code_digest import code_digest


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The module's production processes whose result is what is tested (served strict, or
    not), each a fork of one that imported numpy and warmcli (`tests/forked_python.py`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)  # (conftest's `warm`'s, its home aside)
    yield server
    server.close()


def _out_first(out, inp):  # type: ignore[no-untyped-def]
    return out[0][0] == 1.0


def _inp_first(inp, out):  # type: ignore[no-untyped-def]
    return out[0][0] == 1.0


def _try_both(out, inp):  # type: ignore[no-untyped-def]
    try:
        y = out[0]
        return inp[0] is y
    except IndexError:
        return False


def _try_one(out, inp):  # type: ignore[no-untyped-def]
    y = out[0]
    try:
        return inp[0] is y
    except IndexError:
        return False


def _kind_only(out, *, inp=None):  # type: ignore[no-untyped-def]
    return out


def _positional(out, inp=None):  # type: ignore[no-untyped-def]
    return out


def _varargs(out, *inp):  # type: ignore[no-untyped-def]
    return out


def _one_more(out, inp):  # type: ignore[no-untyped-def]
    return out


def _relative(out, inp):  # type: ignore[no-untyped-def]
    return np.isclose(out[0][0], 1.0, rtol=0.5)


def _absolute(out, inp):  # type: ignore[no-untyped-def]
    return np.isclose(out[0][0], 1.0, atol=0.5)


def _nested_order(out, inp):  # type: ignore[no-untyped-def]
    return lambda a, b: a - b


def _nested_swapped(out, inp):  # type: ignore[no-untyped-def]
    return lambda b, a: a - b


def test_functions_computing_differently_have_different_check_keys() -> None:
    """Each pair computes differently for the same call: parameter order (also in a nested
    lambda), what a `try` covers, a keyword-only or a star parameter."""
    pairs = [
        (_out_first, _inp_first),
        (_try_both, _try_one),
        (_kind_only, _positional),
        (_varargs, _one_more),
        (_nested_order, _nested_swapped),
        (_relative, _absolute),
    ]
    for a, b in pairs:
        assert code_digest(a.__code__) != code_digest(b.__code__), (a, b)
        assert check_identity(a, (0.0, 0.0))[1][1] != check_identity(b, (0.0, 0.0))[1][1]


def test_the_same_function_keeps_its_digest() -> None:
    def again(out, inp):  # type: ignore[no-untyped-def]
        return out[0][0] == 1.0

    assert code_digest(again.__code__) == code_digest(_out_first.__code__)


# A checked tunable of two candidates, its check's module and definition before it.
TUNED = """def launch(rt, k, y, *, stream=None):
    rt.launch(k, y, stream=stream)
SRC = "void k(float *y) {{ y[0] += 1 + I - I; }}"
T = Tunable("t", {{f"c{{i}}": Kernel(SRC, "k", "P", defines={{"I": i}}) for i in range(2)}},
            launch, check=check)
def workload(rt):
    y = rt.upload(np.zeros(1, np.float32))
    rt.tune(T, y)
    return y
"""
CHECKED = (
    """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
def check({params}):
    return {body}
"""
    + TUNED
)
SERVE = STRICT_SERVE  # a workload file's result, served (strict where WARM_STRICT says)


SAME = "bool(out[0][0] == 1.0)"


@pytest.mark.parametrize(
    ("warmed_with", "served_with"),
    [
        (("out, inp", SAME), ("inp, out", SAME)),
        (
            ("out, inp", "bool(np.isclose(out[0][0], 1.0, rtol=0.5))"),
            ("out, inp", "bool(np.isclose(out[0][0], 1.0, atol=0.5))"),
        ),
    ],
)
def test_a_check_computing_otherwise_is_not_served_the_others_pick(
    warm: Warm,
    tmp_path: Path,
    warmed_with: tuple[str, str],
    served_with: tuple[str, str],
    producing: ForkedPython,
) -> None:
    """A bundle warmed with one check is a strict miss for a check of the same text but
    for its parameters' order, or a keyword's name: that one judges otherwise (it was
    served the first's pick unjudged)."""
    warmed = tmp_path / "warmed.py"
    warmed.write_text(CHECKED.format(params=warmed_with[0], body=warmed_with[1]))
    bundle = tmp_path / "b.warm"
    done = warm("run", warmed, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    for (params, body), served_strict in ((warmed_with, True), (served_with, False)):
        served = tmp_path / f"served{served_strict}.py"
        served.write_text(CHECKED.format(params=params, body=body))
        ran = producing.run(SERVE, str(served), env=env, cwd=ROOT, timeout=300)
        assert (ran.returncode == 0) is served_strict, (params, ran.stdout, ran.stderr)


# A check made as a lambda kept in a dict at import (no module global of its own), calling
# a helper of its module; the tunable is made inside workload().
KEPT_IN_A_DICT = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
def adds_one(outputs):
    return outputs[0][0] == 1.0
def launch(rt, k, y, *, stream=None):
    rt.launch(k, y, stream=stream)
CHECKS = {"one": lambda outputs, inputs: bool(adds_one(outputs))}
SRC = "void k(float *y) { y[0] += 1 + I - I; }"
def workload(rt):
    t = Tunable("t", {f"c{i}": Kernel(SRC, "k", "P", defines={"I": i}) for i in range(2)},
                launch, check=CHECKS["one"])
    y = rt.upload(np.zeros(1, np.float32))
    rt.tune(t, y)
    return y
"""
IMPORTED = """
import sys, warmcli
sys.path.insert(0, sys.argv[1])
import dict_job
rt = warmcli.runtime()
print(rt.read(dict_job.workload(rt))[0])
"""


def test_a_check_kept_in_a_dict_calling_a_helper_is_served_strict(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    """The workload known by its file's name renamed its module's functions, but not a
    lambda kept in a dict: its helper was no longer of its module, dropped from its key
    under `warm run` (kept by a process importing the module): a strict miss."""
    (tmp_path / "dict_job.py").write_text(KEPT_IN_A_DICT)
    bundle = tmp_path / "b.warm"
    done = warm("run", tmp_path / "dict_job.py", "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    served = producing.run(IMPORTED, str(tmp_path), env=env, cwd=tmp_path, timeout=300)
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == "1.0", served.stdout


TINY = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *y) { y[0] += 1; }", "k", "P")
def workload(rt):
    y = rt.upload(np.zeros(1, np.float32))
    rt.launch(K, y)
"""


def test_warms_own_home_made_under_umask_0_is_not_refused(warm: Warm, tmp_path: Path) -> None:
    """Under umask 0 (a container's entry point may set it) warm made its home writable by
    every user, then refused the default bundle in it: the second `warm run` failed."""
    workload = tmp_path / "tiny.py"
    workload.write_text(TINY)
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home" / "warm"))
    env.pop("WARM_BUNDLE", None)
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "warmcli", "run", workload, "-q"],
            capture_output=True, text=True, env=env, timeout=300, umask=0,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert not (tmp_path / "home" / "warm").stat().st_mode & 0o002


BRANCHY = """
import sys
from warmcli.runtime.code_digest import code_digest
body = "".join(f"    if o[{k}]: x += {k}\\n" for k in range(10000))
space = {}
exec("def check(o, i):\\n    x = 0\\n" + body + "    return x\\n", space)
print(len(code_digest(space["check"].__code__)))
"""


def test_a_check_of_many_branches_is_digested_in_one_pass() -> None:
    """A generated check of 10,000 branches: each jump's target was found by a scan of every
    instruction (quadratic: minutes, at every process's first tune of it; at 10,000 branches
    about 3 minutes on a loaded 2-core machine, 6,000 took 61 s; the fixed digest, about 4 s)."""
    done = subprocess.run(
        [sys.executable, "-c", BRANCHY], capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "64"


def test_a_dangling_link_planted_as_the_default_bundle_is_refused(
    warm: Warm, tmp_path: Path
) -> None:
    """A `bundle.warm` link to no file, planted in a home every user may write: the check
    of who may write the default bundle ran only where it exists (following the link), so
    `warm run` made the file the link names (wherever another user chose)."""
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    target = tmp_path / "elsewhere.warm"
    (home / "bundle.warm").symlink_to(target)
    workload = tmp_path / "tiny.py"
    workload.write_text(TINY)
    warm.env = dict(warm.env, WARM_HOME=str(home))  # (a fork: WARM_ variables alone differ)
    warm.env.pop("WARM_BUNDLE", None)
    done = warm("run", workload, "-q")
    assert done.returncode == 2, done.stderr
    assert "others may write it" in done.stderr, done.stderr
    assert not target.exists()


IMPORTED_HEADER = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("#{directive} <warm_v.h>\\nvoid k(float *y) {{ y[0] = V; }}", "k", "P")
def workload(rt):
    y = rt.upload(np.zeros(1, np.float32))
    rt.launch(K, y)
    return y
"""
RUN_IT = """
import runpy, sys, warmcli
rt = warmcli.runtime()
print(rt.read(runpy.run_path(sys.argv[1])["workload"](rt))[0])
"""


@pytest.mark.parametrize("directive", ["import", "include_next"])
def test_a_header_read_by_import_or_include_next_is_keyed(
    warm: Warm, tmp_path: Path, directive: str
) -> None:
    """cc reads a header by `#import` (GCC's extension) and `#include_next` as by
    `#include`; found through `CPATH`, its edit was served the old build: 1.0, not 2.0."""
    folder = tmp_path / "inc"
    folder.mkdir()
    (folder / "warm_v.h").write_text("#define V 1\n")
    workload = tmp_path / "w.py"
    workload.write_text(IMPORTED_HEADER.format(directive=directive))
    bundle = tmp_path / "b.warm"
    env = dict(warm.env, CPATH=str(folder), WARM_BUNDLE=str(bundle))
    done = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", workload, "-q"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (folder / "warm_v.h").write_text("#define V 2\n")
    served = subprocess.run(
        [sys.executable, "-c", RUN_IT, workload],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == "2.0", served.stdout


@pytest.mark.parametrize("with_main", [False, True])
def test_a_package_whose_init_raises_run_with_dash_m_is_one_line(
    warm: Warm, tmp_path: Path, with_main: bool
) -> None:
    """`warm run -m pkg` looked for the package's `__main__` by importing the package
    outside the guard that turns an import's failure into one line: warm's traceback."""
    package = tmp_path / "broken_pkg"
    package.mkdir()
    (package / "__init__.py").write_text('raise ValueError("bad init")\n')
    if with_main:
        (package / "__main__.py").write_text("def workload(rt):\n    pass\n")
    done = warm("run", "-m", "broken_pkg", "-b", tmp_path / "b.warm", "-q", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ValueError: bad init" in lines[0], done.stderr


ALIASED = (
    """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
compare = np.{name}
def check(out, inp):
    return bool(compare(out[0][0], 0.5))
"""
    + TUNED
)


def test_a_check_calling_a_library_function_by_another_global_is_keyed_apart(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    """A module global naming a library's function (`compare = np.greater`), called by the
    check: what it names was no part of the key, so a bundle warmed with `np.greater` was
    served strict to a process whose `compare` is `np.less` (a check that fails the pick)."""
    warmed = tmp_path / "warmed.py"
    warmed.write_text(ALIASED.format(name="greater"))
    bundle = tmp_path / "b.warm"
    done = warm("run", warmed, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    for name, served_strict in (("greater", True), ("less", False)):
        served = tmp_path / f"served_{name}.py"
        served.write_text(ALIASED.format(name=name))
        ran = producing.run(SERVE, str(served), env=env, cwd=ROOT, timeout=300)
        assert (ran.returncode == 0) is served_strict, (name, ran.stdout, ran.stderr)
