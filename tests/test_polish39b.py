"""polish39b: four small wrongs today's helpers saw.

- A `key=` dict keyed by `1` and one keyed by `"1"` (so `True`/`"true"`, `None`/`"null"`,
  `1.5`/`"1.5"`) gave one tune key: a pick measured for one was served for the other.
- An exit function of the workload that crashed `warm run`'s worker (SIGSEGV) was silent:
  exit 0, nothing said, where `python w.py` dies of it (139).
- A process forked after its parent's bundle file was deleted called each of its misses
  `corrupt: bundle's entry: the bundle was removed while open`: no entry is corrupt.
- A bundle named as a folder (`b.warm/`) was read (`warm stats b.warm/`, `WARM_BUNDLE`)
  where every write refuses it: POSIX says a file's `/` is no such folder (ENOTDIR).

Real CLI in a subprocess, real cc, real SQLite files; the fork forks for real.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Two kernels: a server loads `a` before its bundle file is deleted and forks, and the
# child launches `b`, which neither had loaded.
TWO = """
from warmcli import Kernel
DEVICE = "host"
A = Kernel("void a(int *x) { x[0] += 1; }", "a", "P")
B = Kernel("void b(int *x) { x[0] += 10; }", "b", "P")
def workload(rt):
    x = rt.buffer(1)
    rt.launch(A, x)
    rt.launch(B, x)
"""

SERVER = """
import os, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
from two import A, B
rt = warmcli.runtime()
x = rt.upload(np.zeros(1, np.int32))
rt.launch(A, x)
os.remove(os.environ["WARM_BUNDLE"])  # deleted, not replaced: the server serves on
pid = os.fork()
if pid == 0:
    rt.launch(B, x)
    print("child", rt.read(x)[0], flush=True)
    sys.exit(0)
os.waitpid(pid, 0)
rt.launch(B, x)
print("parent", rt.read(x)[0], flush=True)
"""

OPEN = """
import sys
import warmcli
try:
    warmcli.runtime()
except warmcli.WarmError as exc:
    print(type(exc).__name__, exc)
"""


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A bundle of both kernels of `TWO`, and the folder holding `two.py`."""
    folder = tmp_path_factory.mktemp("two")
    (folder / "two.py").write_text(TWO)
    warm = Warm(_env(folder))
    done = warm("run", folder / "two.py", "-b", folder / "b.warm", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / "b.warm", folder


def _env(folder: Path) -> dict[str, str]:
    import os

    return dict(os.environ, WARM_HOME=str(folder / "home"), PYTHONPATH=str(ROOT))


def test_a_dict_keyed_by_a_number_and_one_keyed_by_its_text_key_apart() -> None:
    """leftovers39 tagged a `key=` str that reads as another JSON value; a dict's str key
    that JSON writes as it writes an int's, float's, bool's or None's key shared a key
    text with it. Such a str key is tagged now; every other key keeps today's text."""
    from warmcli import Kernel, Tunable
    from warmcli.runtime.tune_spec import key_text

    for value, today in (  # today's keys, unchanged
        ({64: "f32"}, '{"64": "f32"}'),
        ({"M": 64}, '{"M": 64}'),
        ({"M": {"N": {32: [1, 2]}}}, '{"M": {"N": {"32": [1, 2]}}}'),
        ({1: 0, None: 1, False: 2, 1.5: 3}, '{"1": 0, "null": 1, "false": 2, "1.5": 3}'),
        ([{"a": 1}, ({"b": None},)], '[{"a": 1}, [{"b": null}]]'),
        ({"1e5": 0, "inf": 1, "-inf": 2, "01": 3, " 1": 4}, None),  # no other key's text
        ({float("inf"): 0, float("nan"): 1}, '{"Infinity": 0, "NaN": 1}'),
    ):
        text = key_text("t", value)
        assert text == (today or json.dumps(value)), (value, text)
    pairs = (
        ({1: 0}, {"1": 0}),
        ({True: 0}, {"true": 0}),
        ({False: 0}, {"false": 0}),
        ({None: 1}, {"null": 1}),
        ({1.5: 0}, {"1.5": 0}),
        ({1e16: 0}, {"1e+16": 0}),
        ({-2: 0}, {"-2": 0}),
        ({float("inf"): 0}, {"Infinity": 0}),
        ({"a": [{7: 0}]}, {"a": [{"7": 0}]}),
    )
    for number, text in pairs:
        assert key_text("t", number) != key_text("t", text), (number, text)
    assert key_text("t", {"1": 0}) == '{"str:1": 0}'
    assert key_text("t", {"str:1": 0}) == '{"str:str:1": 0}'  # the tag itself is tagged
    assert key_text("t", {"str:1": 0}) != key_text("t", {"1": 0})
    import numpy as np

    assert key_text("t", {np.int64(1): 0}) == key_text("t", {1: 0}) == '{"1": 0}'
    kernel = Kernel("void k(float *x) {}", "k", "P")
    made = [
        Tunable(name="op", candidates={"a": kernel}, launch=_launch, key=lambda x, v=v: v)
        for v in ({1: "rows"}, {"1": "rows"})
    ]
    assert made[0].shape_key((None,)) != made[1].shape_key((None,))


def _launch(rt: object, kernel: object, x: object) -> None:
    pass


CRASHING_EXIT = """
import atexit, os, signal
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void one(float *x) { x[0] = 1; }", "one", "P")
atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def test_an_exit_function_that_crashes_the_worker_is_said_in_one_line(
    warm: Warm, tmp_path: Path, workload_file: Callable[..., Path]
) -> None:
    """atexit39 kept the run's code when the workload's exit functions crash its worker
    (the bundle is sound), but said nothing: `warm run w.py -q` exited 0 silently, where
    `python w.py` dies of SIGSEGV. One warning line names the signal; the code stands."""
    bundle = tmp_path / "b.warm"
    done = warm("run", workload_file(CRASHING_EXIT), "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout
    said = done.stderr.splitlines()
    assert len(said) == 1, done.stderr
    assert said[0].startswith("warm: warning: the workload's exit functions killed its process")
    assert "SIGSEGV" in said[0] and "Traceback" not in done.stderr, said


def test_a_process_forked_after_its_bundle_was_deleted_says_so_not_corrupt(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """The parent serves on from the file it holds open; a child it forks after the file
    was `rm`-ed opens the path anew and finds nothing: each miss said `corrupt: bundle's
    entry: the bundle was removed while open`. It says the file was removed now, and what
    to do; results are the same in both."""
    bundle = tmp_path / "b.warm"
    shutil.copyfile(two[0], bundle)
    env = dict(_env(tmp_path), WARM_BUNDLE=str(bundle), WARM_REPORT="1", WARM_EXPLAIN="1")
    done = subprocess.run(
        [sys.executable, "-c", SERVER, str(two[1])],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "11", "parent", "11"], done.stdout + done.stderr
    assert "corrupt" not in done.stderr, done.stderr
    assert "warm: miss: kernel b: removed: the bundle's file was deleted" in done.stderr
    assert "served everything" in done.stderr  # the parent: from its open file


def test_a_bundle_named_as_a_folder_is_refused_to_read_as_to_write(
    two: tuple[Path, Path], tmp_path: Path, forked: Any
) -> None:
    """`warm run -b b.warm/` is refused (`ends in '/', so names a folder`); `warm stats
    b.warm/` (so verify, check, diff) and `WARM_BUNDLE=b.warm/` read the file: now they
    are refused alike, one line, exit 2 (a production process: the `BundleError` a write
    back gets). The file itself reads as before."""
    bundle, folder = two
    warm = forked(Warm(_env(tmp_path)))  # (its verdicts forked; WARM_BUNDLE's started below)
    for named, end in ((f"{bundle}/", "/"), (f"{bundle}/.", ".")):
        for args in (("stats", named), ("verify", named), ("check", named)):
            done = warm(*args)
            said = f"warm: error: {named}: ends in '{end}', so names a folder: name the bundle"
            assert done.returncode == 2 and done.stderr.startswith(said), (args, done.stderr)
            assert len(done.stderr.splitlines()) == 1, done.stderr
        done = warm("diff", bundle, named)
        assert done.returncode == 2 and "so names a folder" in done.stderr, done.stderr
    wrote = warm("run", folder / "two.py", "-b", f"{bundle}/", "-q")
    read = warm("stats", f"{bundle}/")
    assert wrote.returncode == read.returncode == 2
    assert wrote.stderr.replace("to write", "to read") == read.stderr, (wrote.stderr, read.stderr)
    env = dict(warm.env, WARM_BUNDLE=f"{bundle}/")
    done = subprocess.run(
        [sys.executable, "-m", "warmcli", "stats"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2 and done.stderr.startswith(f"warm: error: WARM_BUNDLE={bundle}/")
    for extra in ({}, {"WARM_BUNDLE_WRITE": "1"}):
        opened = subprocess.run(
            [sys.executable, "-c", OPEN],
            capture_output=True,
            text=True,
            env=dict(env, **extra),
            timeout=120,
            cwd=ROOT,
        )
        assert opened.stdout == (
            f"BundleError {bundle}/: ends in '/', so names a folder: name the bundle file\n"
        ), (extra, opened.stdout, opened.stderr)
    assert warm("stats", bundle).returncode == 0
