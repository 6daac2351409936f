"""A library that embeds warm's production API, and its users' processes (real subprocesses,
the system cc): its bundle shipped as package data and served from a read-only folder whose
path holds spaces and non-ASCII letters, `multiprocessing` (fork after the parent served and
compiled, spawn, forkserver, a `ProcessPoolExecutor`), threads and `asyncio.to_thread` on one
runtime, two libraries calling `use_bundle` in turn, and a process ending while a miss
compiles; a cold start, a partial bundle and a full one compute the same bytes.
`WARM_BUNDLE_WRITE=1` writes back what a library's `use_bundle(path)` missed."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm, scaled
from forked_python import ForkedPython

# The library: kernels, a tunable, and the bundle it ships beside its code.
LIBRARY = (
    r"""
import hashlib
from importlib import resources
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
"""
    + scaled(6)
    + r"""def open_shipped(path=None, **kw):
    warmcli.use_bundle(resources.files("mylib") / "warm.bundle" if path is None else path, **kw)
def digest(parts):
    return hashlib.sha256(b"".join(parts)).hexdigest()
"""
)
# Warmed with PART=3 (kernels and tunes 0-2) for a partial bundle, else all six.
WORKLOAD = """
import os, mylib
DEVICE = "host"
def workload(rt):
    for i in range(int(os.environ.get("PART", "6"))):
        mylib.one(rt, i, False)
"""
# argv: the bundle ("-": none, "ship": the package's own); prints the digest of every result.
APP = """
import sys, warmcli, mylib
where = sys.argv[1]
if where == "-":
    warmcli.use_bundle(None)
else:
    mylib.open_shipped(None if where == "ship" else where)
rt = warmcli.runtime()
print(mylib.digest([mylib.one(rt, i) for i in range(6)]))
"""
# argv: bundle, start method; the parent serves and compiles before its children start.
PROCESSES = """
import os, sys, warmcli, mylib, multiprocessing as mp, concurrent.futures as cf
_rt = []
def rt():
    if not _rt:
        where = os.environ["LIB_BUNDLE"]
        mylib.open_shipped(where) if where != "-" else warmcli.use_bundle(None)
        _rt.append(warmcli.runtime())
    return _rt[0]
def task(i):
    return mylib.one(rt(), i)
if __name__ == "__main__":
    parent = [task(i) for i in (0, 3)]
    method = sys.argv[1]
    if method == "pool":
        with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
            got = list(ex.map(task, range(6)))
    else:
        with mp.get_context(method).Pool(2) as p:
            got = p.map(task, range(6))
    print(mylib.digest(parent + got))
"""
# Threads, then coroutines through `asyncio.to_thread`, on one runtime; argv: bundle or -.
THREADS = """
import asyncio, sys, threading, warmcli, mylib
warmcli.use_bundle(None if sys.argv[1] == "-" else sys.argv[1])
rt = warmcli.runtime()
out = [b""] * 12
def work(j):
    out[j] = mylib.one(rt, j % 6)
threads = [threading.Thread(target=work, args=(j,)) for j in range(12)]
[t.start() for t in threads]
[t.join() for t in threads]
async def main():
    return await asyncio.gather(*(asyncio.to_thread(mylib.one, rt, i) for i in range(6)))
print(mylib.digest(out + list(asyncio.run(main()))))
"""
# argv: bundle, how the process ends while a thread compiles kernel 4 (a slow WARM_CC).
ENDING = """
import os, sys, threading, time, warmcli, mylib
mylib.open_shipped(sys.argv[1], write=True)
rt = warmcli.runtime()
[mylib.one(rt, i) for i in range(4)]  # 3: compiled and tuned, to be written back
threading.Thread(target=mylib.one, args=(rt, 4), daemon=True).start()
time.sleep(0.3)
how = sys.argv[2]
if how == "exit":
    sys.exit(3)
if how == "_exit":
    os._exit(4)
raise RuntimeError("the app failed")
"""
# Slow for kernel 4's source only (`SC` its define): the process ends while it compiles; the
# misses before it (kernels 0-3, the tunable's candidates) compile at cc's own speed.
SLOW_CC = """#!/bin/sh
for f in "$@"; do case "$f" in *.c) grep -q 'define SC 4.5f' "$f" && sleep 0.6 ;; esac; done
exec cc "$@"
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warm, Path]:
    """The library's package in `site/mylib` with its full bundle shipped beside it, and
    `part.warm` (half of it), warmed once for the module."""
    base = tmp_path_factory.mktemp("embed")
    (base / "site" / "mylib").mkdir(parents=True)
    (base / "site" / "mylib" / "__init__.py").write_text(LIBRARY)
    (base / "wl.py").write_text(WORKLOAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    site = f"{base / 'site'}:{env.get('PYTHONPATH', '')}"
    warm = Warm(dict(env, WARM_HOME=str(base / "home"), PYTHONPATH=site))
    for bundle, part in (("site/mylib/warm.bundle", "6"), ("part.warm", "3")):
        warm.env["PART"] = part
        done = warm("run", base / "wl.py", "--bundle", base / bundle, "-q", cwd=base)
        assert done.returncode == 0, done.stderr
    (base / "site" / "mylib" / "warm.bundle.lock").unlink()
    return warm, base


def _run(
    warm: Warm, base: Path, code: str, *args: str, prefix: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    script = base / f"app{abs(hash(code))}.py"  # a file: spawn's children import it
    script.write_text(code)
    return subprocess.run(
        [*prefix, sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        cwd=base,
        env=dict(warm.env, **env),
        timeout=120,
    )


@pytest.fixture(scope="module")
def producing(lib: tuple[Warm, Path]) -> Iterator[ForkedPython]:
    """The library's users' processes whose results are what a test looks at, each a fork
    of one that imported numpy and warmcli (`tests/forked_python.py`); those of how a
    process ends, forks or starts others (multiprocessing, exit codes, a fork inside) and
    the one run as another user are started as they always were (`_run`)."""
    warm, base = lib
    server = ForkedPython(warm.env, base)
    yield server
    server.close()


def _forked(
    producing: ForkedPython, warm: Warm, base: Path, code: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """As `_run`: `code` written to a script in `base` and run there with `args`, in
    `warm`'s environment with `env`; the process a fork of `producing`'s server."""
    script = base / f"app{abs(hash(code))}.py"
    script.write_text(code)
    return producing.run(script, *args, env=dict(warm.env, **env), cwd=base, timeout=120)


def _entries(bundle: Path) -> int:
    db = sqlite3.connect(f"file:{bundle}?mode=ro", uri=True)
    try:
        sql = "SELECT (SELECT count(*) FROM kernels) + count(*) FROM tunes"
        return int(db.execute(sql).fetchone()[0])
    finally:
        db.close()


def _digests(
    producing: ForkedPython, warm: Warm, base: Path, code: str, wheres: list[str]
) -> set[str]:
    seen = set()
    for where in wheres:
        done = _forked(producing, warm, base, code, where)
        assert done.returncode == 0 and len(done.stdout) == 65, (where, done.stderr)
        seen.add(done.stdout)
    return seen


def test_a_read_only_package_bundle_computes_what_cold_and_partial_do(
    lib: tuple[Warm, Path],
    producing: ForkedPython,
) -> None:
    """The package's folder read-only (as another user, where the tests run as root), the
    bundle also at a path with spaces and non-ASCII letters, relative to the working folder."""
    warm, base = lib
    odd = base / "dir with spå ce" / "ü"
    odd.mkdir(parents=True, exist_ok=True)
    shutil.copy(base / "part.warm", odd / "part é.warm")
    ro = base / "ro"
    if not ro.exists():
        shutil.copytree(base / "site", ro)
        subprocess.run(["chmod", "-R", "a-w", str(ro)], check=True)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root as an ordinary user: no capability to write others' folders
        if not shutil.which("setpriv"):
            pytest.skip("root without setpriv: every folder is writable")
        subprocess.run(["chown", "-R", "65534:65534", str(ro)], check=True)
        caps = "-dac_override,-dac_read_search,-fowner"
        prefix = ("setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}")
    wheres = ["-", "part.warm", "dir with spå ce/ü/part é.warm", "ship"]
    seen = _digests(producing, warm, base, APP, wheres)
    strict = _run(
        warm, base, APP, "ship", prefix=prefix, WARM_STRICT="1", WARM_REPORT="1",
        PYTHONPATH=f"{ro}:{warm.env['PYTHONPATH']}",
    )  # fmt: skip
    assert strict.returncode == 0, strict.stderr
    assert seen == {strict.stdout}
    assert strict.stderr.endswith("served everything: compiled 0 kernels, tuned 0 operations\n")
    assert sorted(p.name for p in (ro / "mylib").iterdir()) == ["__init__.py", "warm.bundle"]


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver", "pool"])
def test_processes_of_a_library_compute_what_a_cold_one_does(
    lib: tuple[Warm, Path], method: str
) -> None:
    warm, base = lib
    seen = set()
    wheres = ["-", "part.warm", str(base / "site" / "mylib" / "warm.bundle")]
    for where in wheres if method in ("fork", "pool") else wheres[:2]:  # (spawn's are slow)
        done = _run(warm, base, PROCESSES, method, LIB_BUNDLE=where)
        assert done.returncode == 0 and done.stderr == "", (where, done.stderr)
        seen.add(done.stdout)
    assert len(seen) == 1 and len(seen.pop()) == 65


def test_threads_and_coroutines_on_one_runtime_compute_what_cold_does(
    lib: tuple[Warm, Path],
    producing: ForkedPython,
) -> None:
    warm, base = lib
    wheres = ["-", "part.warm", str(base / "site" / "mylib" / "warm.bundle")]
    assert len(_digests(producing, warm, base, THREADS, wheres)) == 1


@pytest.mark.parametrize("how", ["exit", "_exit", "raise"])
def test_a_process_ending_while_a_miss_compiles_loses_nothing(
    lib: tuple[Warm, Path], tmp_path: Path, how: str, forked: Any
) -> None:
    """sys.exit and an uncaught exception write back what was finished; os._exit writes
    nothing; either way every stored entry stays and the bundle verifies."""
    warm, base = lib
    bundle = tmp_path / "b.warm"
    shutil.copy(base / "part.warm", bundle)
    cc = tmp_path / "slowcc"
    cc.write_text(SLOW_CC)
    cc.chmod(0o755)
    before = _entries(bundle)
    done = _run(warm, base, ENDING, str(bundle), how, WARM_CC=str(cc))
    assert done.returncode == {"exit": 3, "_exit": 4, "raise": 1}[how], done.stderr
    assert "warm:" not in done.stderr, done.stderr
    assert _entries(bundle) >= before + (0 if how == "_exit" else 2)  # kernel 3 and its tune
    assert forked(warm)("verify", bundle).returncode == 0  # (a fork: its verdict is tested)
    assert not Path(f"{bundle}-journal").exists()


TWO_LIBRARIES = """
import sys, warmcli, mylib
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1])  # library one
out = [mylib.one(warmcli.runtime(), 0)]
warmcli.use_bundle(sys.argv[2])  # library two, in turn: one bundle a process
y = warmcli.runtime().buffer(4, "int32")
warmcli.runtime().launch(Kernel("void k(int *y) { y[0] = 9; }", "k", "P"), y)
warmcli.use_bundle(sys.argv[1])  # library one again, after the other closed its runtime
out.append(mylib.one(warmcli.runtime(), 1))
print(mylib.digest(out))
"""


def test_libraries_taking_use_bundle_in_turn_compute_the_same(
    lib: tuple[Warm, Path], producing: ForkedPython
) -> None:
    warm, base = lib
    full = str(base / "site" / "mylib" / "warm.bundle")
    done = _forked(producing, warm, base, TWO_LIBRARIES, full, "part.warm", WARM_STRICT="warn")
    cold = _forked(
        producing, warm, base, TWO_LIBRARIES.replace("(sys.argv[1])", "(None)"), full, full
    )
    assert done.returncode == 0 and cold.returncode == 0, done.stderr + cold.stderr
    assert done.stdout == cold.stdout
    assert "strict: kernel k: absent" in done.stderr, done.stderr  # only the one part lacks


LIBRARY_OPENS = """
import sys, warmcli, mylib
mylib.open_shipped(sys.argv[1])  # the library names its bundle; the operator asks to write
rt = warmcli.runtime()
print(mylib.digest([mylib.one(rt, i) for i in range(6)]))
"""


def test_warm_bundle_write_writes_back_what_a_librarys_use_bundle_missed(
    lib: tuple[Warm, Path], tmp_path: Path, producing: ForkedPython
) -> None:
    """README: `use_bundle(path, write=True)` (or `WARM_BUNDLE_WRITE=1`); `WARM_STRICT`
    reaches `use_bundle(path)` where `strict` is not given, and so should this: the report
    said 're-warm it with `warm run`' and nothing was written."""
    warm, base = lib
    bundle = tmp_path / "b.warm"
    shutil.copy(base / "part.warm", bundle)
    before = _entries(bundle)
    done = _forked(
        producing, warm, base, LIBRARY_OPENS, str(bundle), WARM_BUNDLE_WRITE="1", WARM_REPORT="1"
    )
    assert done.returncode == 0, done.stderr
    assert "(written back into it):" in done.stderr, done.stderr
    assert _entries(bundle) == before + 6
    done = _forked(producing, warm, base, LIBRARY_OPENS, str(bundle), WARM_STRICT="1")
    assert done.returncode == 0 and done.stderr == "", done.stderr


KEPT_RUNTIME = """
import sys, warmcli, mylib
warmcli.use_bundle(sys.argv[1])  # library one, at its import, keeps its runtime
ONE = warmcli.runtime()
mylib.one(ONE, 0)
warmcli.use_bundle(sys.argv[1])  # library two (here the same bundle), at its import
mylib.one(warmcli.runtime(), 0)
mylib.one(ONE, 1)  # library one's runtime, closed by library two: tuned cold
ONE.launch(warmcli.Kernel("void k(int *y) { y[0] = 9; }", "k", "P"), ONE.buffer(1, "int32"))
"""


def test_the_report_counts_what_a_runtime_use_bundle_closed_did_cold(
    lib: tuple[Warm, Path],
    producing: ForkedPython,
) -> None:
    """The report said 'served everything: compiled 0 kernels, tuned 0 operations' of a
    process whose first library's runtime, closed by the second library's `use_bundle`,
    measured a tune and compiled a kernel cold."""
    warm, base = lib
    full = str(base / "site" / "mylib" / "warm.bundle")
    done = _forked(producing, warm, base, KEPT_RUNTIME, full, WARM_REPORT="1")
    assert done.returncode == 0, done.stderr
    assert "compiled 0 kernels" not in done.stderr, done.stderr
    # how many kernels it compiled cold depends on what that runtime had loaded: 1 (the
    # kernel k) here, 4 on the GPU machine's Python 3.12 (its tune's candidates too)
    said = re.search(
        r"a runtime that an earlier use_bundle\(\) closed compiled (\d+) kernel\(s\) and "
        r"tuned 1 operation\(s\) cold \(ask warmcli.runtime\(\) again after use_bundle\)\n$",
        done.stderr,
    )
    assert said is not None and int(said.group(1)) >= 1, done.stderr


ZIPPED = """
import sys, warmcli
sys.path.insert(0, sys.argv[1])
import mylib
try:
    mylib.open_shipped()
except TypeError as exc:
    print(exc)
"""


def test_a_bundle_inside_a_zipped_package_is_refused_naming_what_it_is(
    lib: tuple[Warm, Path], tmp_path: Path, producing: ForkedPython
) -> None:
    """`importlib.resources.files(pkg) / name` of a zipped package is a `zipfile.Path`, no
    `os.PathLike`: the refusal said 'not Path', of what reads as a path."""
    warm, base = lib
    archive = tmp_path / "lib.zip"
    shutil.make_archive(str(archive.with_suffix("")), "zip", base / "site", "mylib")
    done = _forked(producing, warm, base, ZIPPED, str(archive))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "use_bundle: path must be a str or os.PathLike (or None), not zipfile.Path: a file "
        "inside an archive, which SQLite cannot open: copy it out to a file and name that\n"
    ), done.stdout


CLOSED_WHILE_KEYING = """
import sys, warmcli, mylib
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime()
mylib.one(rt, 0)
def closing(frame, event, arg):  # another library's use_bundle, just as the bundle is asked
    if event == "call" and frame.f_code.co_name == "_served_key":  # for another's build
        sys.settrace(None)
        warmcli.use_bundle(None)
    return None
sys.settrace(closing)
y = rt.buffer(1, "int32")
rt.launch(Kernel("void q(int *y) { y[0] = 5; }", "q", "P"), y)  # a miss: compiled cold
print(rt.read(y)[0])
"""


def test_a_launch_whose_runtime_use_bundle_closes_meanwhile_runs_cold(
    lib: tuple[Warm, Path],
    producing: ForkedPython,
) -> None:
    """A thread's launch or tune, on a runtime another thread's `use_bundle` closed between
    its lookups, raised `BundleError: ...: closed (Cannot operate on a closed database.)`
    (four threads and a `use_bundle` every 0.15 s: once in a few thousand launches)."""
    warm, base = lib
    full = str(base / "site" / "mylib" / "warm.bundle")
    done = _forked(producing, warm, base, CLOSED_WHILE_KEYING, full)
    assert done.returncode == 0 and done.stdout == "5\n", done.stderr
    assert done.stderr == ""


FORKED_REPORT = """
import os, sys, warmcli, mylib
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime()
[mylib.one(rt, i) for i in range(4)]  # 3: compiled and tuned by the parent
pid = os.fork()
if pid == 0:  # a worker forked after the parent's miss (gunicorn's --preload)
    mylib.one(rt, 4)  # the child's own miss
    sys.exit(0)  # through atexit: its own report
os.waitpid(pid, 0)
"""


def test_a_forked_child_reports_its_own_misses_not_its_parents(
    lib: tuple[Warm, Path],
) -> None:
    """Each forked child reported its parent's misses as its own ('this process compiled and
    tuned them itself'): N workers forked after one miss told it N + 1 times."""
    warm, base = lib
    done = _run(warm, base, FORKED_REPORT, "part.warm", WARM_REPORT="1")
    assert done.returncode == 0, done.stderr
    child, parent = done.stderr.split("warm: bundle ")[1:]
    assert "lacked 1 kernel(s) and 1 tune(s)" in child and "kernel scale[SC=4.5f]" in child
    assert "lacked 1 kernel(s) and 1 tune(s)" in parent and "kernel scale[SC=3.5f]" in parent


FORKED_THEN_SWITCHED = """
import os, sys, warmcli, mylib
warmcli.use_bundle(sys.argv[1])
[mylib.one(warmcli.runtime(), i) for i in range(4)]  # 3: compiled and tuned by the parent
if os.fork() == 0:
    warmcli.use_bundle(sys.argv[1])  # the child's own runtime, a cache of its own
    mylib.one(warmcli.runtime(), 3)  # so compiled and tuned again, by the child
    os._exit(0 if [m.name for m in warmcli.report().misses] == ["scale[SC=3.5f]",
              "t float32[53] float32[53] 53"] else 1)
print(os.waitstatus_to_exitcode(os.wait()[1]))
"""


def test_a_forked_child_that_takes_a_bundle_again_reports_what_it_redid(
    lib: tuple[Warm, Path],
) -> None:
    warm, base = lib
    done = _run(warm, base, FORKED_THEN_SWITCHED, "part.warm")
    assert done.returncode == 0 and done.stdout == "0\n", done.stderr


FORK_WHILE_IMPORTING = """
import os, sys, threading, time, warmcli, mylib
warmcli.use_bundle(sys.argv[1], write=True)
rt = warmcli.runtime()
[mylib.one(rt, i) for i in range(4)]  # 3: a miss, written back by the thread below
importing = threading.Event()
def gate(frame, event, arg):  # the thread is in the first import of warm's write lock module
    code = frame.f_code
    if code.co_name == "<module>" and code.co_filename.endswith("/bundle/lock.py"):
        importing.set()
        time.sleep(0.5)
    return None
def switch():  # another library's use_bundle: writes back (the process's first write)
    sys.settrace(gate)
    warmcli.use_bundle(sys.argv[1], write=True)
threading.Thread(target=switch).start()
importing.wait(30)
pid = os.fork()
if pid == 0:
    mylib.one(warmcli.runtime(), 4)
    sys.exit(0)  # its write-back at exit imports the lock module too
deadline = time.time() + 30
while not os.waitpid(pid, os.WNOHANG)[0]:
    if time.time() > deadline:
        os.kill(pid, 9)
        sys.exit("the child hung")
    time.sleep(0.05)
"""


def test_a_fork_while_a_thread_imports_warms_writer_leaves_a_child_that_ends(
    lib: tuple[Warm, Path], tmp_path: Path, forked: Any
) -> None:
    """A child forked while another thread ran the first import of a module warm loads on
    first use (the write lock's, for a `use_bundle` write-back) waited for ever on that
    module's import lock when it imported it (its write-back at exit): it never ended."""
    warm, base = lib
    bundle = tmp_path / "b.warm"
    shutil.copy(base / "part.warm", bundle)
    done = _run(warm, base, FORK_WHILE_IMPORTING, str(bundle))
    assert done.returncode == 0, done.stderr
    assert forked(warm)("verify", bundle).returncode == 0  # (a fork: its verdict is tested)


# While this process explains its tune miss, another process writes that very tune back.
WRITTEN_MEANWHILE = """
import os, subprocess, sys, warmcli, mylib
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime()
mylib.one(rt, 0)
WRITE = "import sys, warmcli, mylib; warmcli.use_bundle(sys.argv[1], write=True); "
WRITE += "mylib.one(warmcli.runtime(), 3)"
def gate(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "explain_tune":
        sys.settrace(None)
        subprocess.run([sys.executable, "-c", WRITE, sys.argv[1]], check=True)
    return None
sys.settrace(gate)
print(mylib.digest([mylib.one(rt, 3)]))  # a miss here, written meanwhile by the other
"""


def test_a_tune_another_process_wrote_while_this_one_missed_it_is_explained(
    lib: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Two processes sharing a bundle, one writing back: the other's miss, explained after
    the tune was written, failed `assert found is not None` in `explain_tune` (an
    `AssertionError` out of `rt.tune`)."""
    warm, base = lib
    bundle = tmp_path / "b.warm"
    shutil.copy(base / "part.warm", bundle)
    done = _run(warm, base, WRITTEN_MEANWHILE, str(bundle), WARM_EXPLAIN="1")
    assert done.returncode == 0 and len(done.stdout) == 65, done.stderr
    assert "warm: miss: tune t float32[53] float32[53] 53: absent: " in done.stderr, done.stderr


# A fork while another thread opens a bundle (`use_bundle`): the child starts after the open.
FORK_WHILE_OPENING = """
import os, sys, threading, time, warmcli, mylib
warmcli.use_bundle(sys.argv[1])
mylib.one(warmcli.runtime(), 0)
opening, opened = threading.Event(), []
def gate(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_connect":
        opening.set()
        time.sleep(0.5)  # SQLite about to take its process-wide mutexes in this thread
        return lambda frame, event, arg: opened.append(event == "return") or None
    return None
def other():
    sys.settrace(gate)
    warmcli.use_bundle(sys.argv[1])
threading.Thread(target=other).start()
opening.wait(30)
pid = os.fork()
if pid == 0:
    os._exit(0 if any(opened) else 1)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_fork_while_another_thread_opens_a_bundle_waits_for_the_open(
    lib: tuple[Warm, Path],
) -> None:
    """A child forked while another thread was inside SQLite's open of a bundle (another
    library's `use_bundle`) could stop for ever in its own first `sqlite3.connect`: SQLite's
    process-wide mutexes, copied held (1 in about 20 forks in a stress run)."""
    warm, base = lib
    done = _run(warm, base, FORK_WHILE_OPENING, "part.warm")
    assert done.returncode == 0 and done.stdout == "0\n", done.stderr
