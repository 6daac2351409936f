"""A hostile review of time (stop 52): what warm decides by a clock it does not own.

Found and fixed:
- a use dated back: a writer whose clock is behind (a fleet machine at 1970, a clock stepped
  back) set the `last_used` of every kernel its run or production write-back was served to
  its own time, so `warm clean --older-than 30d` then removed the kernels it had just used,
  and every tune whose pick they were (`Bundle.touch` now moves a use on, never back, as a
  merge's union of uses already did).
- a cached library dated ahead: a host library written while the clock was ahead (a year,
  the year 3000) was never touched when loaded (its age, negative, was under an hour) and
  sorted newest at every prune of the host library cache, so the files in use were pruned
  before it, and it was kept until the clock reached its date; a load now touches one
  dated ahead, and a prune stamps it now: it ages from then, as `warm clean` takes a time
  of use in the future.
- a compiler dated ahead: a C compiler (or nvcc, or a header) whose mtime is ahead of the
  clock (`touch -d 2100`, a tar made where the clock was ahead) was racy for ever (its
  mtime, not its ctime, under `RACY_SECONDS` before now), so its identity was never
  remembered and found anew in every process: 72 ms of each process's start, 0.3 ms once
  remembered. Racy checks now take such an mtime as its ctime (`stamped.last_change`): a
  write dates both, a `touch -d` its ctime.

The clock is shifted inside the forked CLI by a `sitecustomize` on `PYTHONPATH` that offsets
`time.time` and `time.time_ns` (no libfaketime here): warm reads only those for its dates.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.host import libraries
from warmcli.backends.toolchain import RACY_SECONDS

_SHIM = """import os, time
_shift = float(os.environ["REVIEW52E_CLOCK_SHIFT"])
_time, _time_ns = time.time, time.time_ns
time.time = lambda: _time() + _shift
time.time_ns = lambda: _time_ns() + int(_shift * 1e9)
"""


def _clock(warm: Warm, folder: Path, shift: float) -> Warm:
    """`warm` whose processes read a wall clock `shift` seconds off this machine's."""
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SHIM)
    path = os.pathsep.join(filter(None, [str(folder), warm.env.get("PYTHONPATH")]))
    return warm.with_env(PYTHONPATH=path, REVIEW52E_CLOCK_SHIFT=repr(shift))


def _used(bundle: Path) -> dict[str, float]:
    with sqlite3.connect(bundle) as conn:
        return dict(conn.execute("SELECT key, last_used FROM kernels"))


def test_a_writer_whose_clock_is_behind_never_dates_a_use_back(
    warm: Warm, host_bundle, tmp_path: Path
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    before = _used(bundle)
    at_1970 = _clock(warm, tmp_path / "shim", 86400 * 100 - before[min(before)])
    run = at_1970("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q")
    assert run.returncode == 0, run.stderr
    after = _used(bundle)
    assert all(after[key] >= used for key, used in before.items()), (before, after)
    clean = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    assert clean["removed_count"] == {"kernels": 0, "tunes": 0}, clean


def test_a_cached_library_dated_ahead_ages_from_now(tmp_path: Path) -> None:
    folder = tmp_path / "host-libraries"
    folder.mkdir(mode=0o700)
    now = time.time()
    for i in range(libraries.MAX_LIBRARIES):  # used an hour ago and before, one a second
        (folder / f"{i:064x}.so").touch()
        os.utime(folder / f"{i:064x}.so", (now - 3600 - i, now - 3600 - i))
    ahead = folder / f"{'f' * 64}.so"
    ahead.touch()
    os.utime(ahead, (32503680000.0, 32503680000.0))  # the year 3000
    libraries._prune(str(folder))
    kept = sorted(p.name for p in folder.iterdir())
    assert len(kept) == libraries.PRUNE_TO and ahead.exists()
    assert ahead.stat().st_mtime <= time.time(), "still dated ahead: never pruned"
    assert kept[0] == f"{0:064x}.so"  # the most recently used kept, oldest gone


def test_a_cached_library_dated_ahead_is_touched_when_loaded(
    warm: Warm, made_once: Path, host_bundle, tmp_path: Path
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    home = Path(warm.env["WARM_HOME"])
    home.mkdir(mode=0o700)
    libs = shutil.copytree(made_once / "home" / libraries.DIRECTORY, home / libraries.DIRECTORY)
    for lib in libs.glob("*.so"):  # what made the bundle wrote them, the clock then ahead
        os.utime(lib, (32503680000.0, 32503680000.0))
    assert warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q").returncode == 0
    assert all(lib.stat().st_mtime <= time.time() for lib in libs.glob("*.so"))


def test_a_compiler_dated_ahead_is_remembered(warm: Warm, tmp_path: Path) -> None:
    cc = Path(shutil.copy2(os.path.realpath(shutil.which("cc") or "cc"), tmp_path / "gcc"))
    os.utime(cc, (4102444800.0, 4102444800.0))  # 2100
    time.sleep(RACY_SECONDS + 0.1)  # its ctime (the copy's) settled: only its mtime is ahead
    assert warm.with_env(WARM_CC=str(cc))("devices").returncode == 0
    remembered = (Path(warm.env["WARM_HOME"]) / "toolchains.json").read_text()
    assert f"|{cc}|" in remembered, remembered
