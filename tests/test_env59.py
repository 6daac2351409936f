"""Trials of warm's environment variables and miss explanations from the README alone (stop 59):
real bundles, the real CLI and production processes in subprocesses, the system C compiler."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm

# A kernel row's field changed, as its components (its key) do not name it: (field, SQL).
CHANGED = {
    "toolchain": "UPDATE kernels SET toolchain = toolchain || ' (other)' WHERE entry = 'row_sum'",
    "arch": "UPDATE kernels SET arch = 'aarch64' WHERE entry = 'row_sum'",
    "entry": "UPDATE kernels SET entry = 'row_sun', symbol = substr(symbol, 1, 22) || 'row_sun' "
    "WHERE entry = 'row_sum'",
}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_row_its_key_does_not_name_is_explained_as_corrupt(
    made: tuple[Warm, Path], tmp_path: Path, field: str
) -> None:
    """README, "Explaining misses": a kernel row whose components name another arch, toolchain
    or entry than the row's is `corrupt`. Production (`WARM_EXPLAIN=1`, `WARM_STRICT=1`) named
    it `toolchain`, `arch` or `binary` before (a reason that sends a user to re-warm or to check
    the machine, for a bundle that was changed after warming); `corrupt` now, and it names the
    field only for that row (the verdict on the target's own builds, kept per toolchain, was
    shared by a changed row and the sound ones after it)."""
    warm, good = made
    bundle = tmp_path / "b.warm"
    shutil.copy(good, bundle)
    with sqlite3.connect(bundle) as db:
        assert db.execute(CHANGED[field]).rowcount == 1
    db.close()
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_EXPLAIN="1")
    code = SERVE_MATMUL.format(examples=str(EXAMPLES))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    misses = [line for line in done.stderr.splitlines() if line.startswith("warm: miss:")]
    assert len(misses) == 1, done.stderr  # (bias_relu, a sound row of the same toolchain: served)
    assert misses[0].startswith(f"warm: miss: kernel row_sum: corrupt: row names {field} ")
    strict = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(env, WARM_STRICT="1"),
        cwd=ROOT,
        timeout=120,
    )
    assert strict.returncode == 1
    assert "StrictMissError" in strict.stderr and ": corrupt: row names " in strict.stderr


@pytest.mark.parametrize(
    ("value", "said"),
    [(":", "no trusted keys"), ("/nonexistent/ci.pub", "/nonexistent/ci.pub: cannot read key")],
)
def test_a_trusted_key_that_cannot_be_read_names_warm_trusted_keys(
    made: tuple[Warm, Path], value: str, said: str
) -> None:
    """README: WARM_TRUSTED_KEYS names the key files `warm verify`, `warm check`, `warm run`
    and production trust, and nothing else names them; its error said `warm: error: /x.pub:
    cannot read key` (or `no trusted keys`), naming no variable, which a user who set no
    `--key` could not trace. It names WARM_TRUSTED_KEYS now, one line, exit 2."""
    warm, good = made
    done = warm.with_env(WARM_TRUSTED_KEYS=value)("verify", good)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(f"warm: error: WARM_TRUSTED_KEYS: {said}"), done.stderr


def test_warm_cc_not_found_stops_warm_run_only_where_a_kernel_must_be_built(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """README, `WARM_CC` (corrected at 59): a C compiler not found stops `warm run` at the first
    kernel it must build; a workload the bundle named by `-b` holds whole is served from it, as
    on a machine with no compiler (`stored 0 new kernel(s)`, exit 0), whatever WARM_CC names."""
    warm, good = made
    bundle = tmp_path / "b.warm"
    shutil.copy(good, bundle)
    missing = warm.with_env(WARM_CC=str(tmp_path / "no-such-cc"))
    whole = missing("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--no-verify")
    assert whole.returncode == 0 and "stored 0 new kernel(s)" in whole.stdout, whole.stderr
    fresh = missing("run", EXAMPLES / "matmul_host.py", "-b", tmp_path / "new.warm")
    assert fresh.returncode == 2, fresh.stdout + fresh.stderr
    assert "no-such-cc' not found (the host backend's C compiler" in fresh.stderr, fresh.stderr


def test_a_blank_warm_home_is_the_default_home_not_a_folder_named_by_spaces(
    warm: Warm, tmp_path: Path
) -> None:
    """WARM_HOME set to spaces (`WARM_HOME="$HOME_FOR_WARM "` with the variable unset) made a
    folder named ` ` in the working folder and kept the default bundle there; `pin_relative`
    and WARM_BUNDLE already read a blank value as none. Now the default home: the user cache
    directory (`$XDG_CACHE_HOME/warm`)."""
    cwd, xdg = tmp_path / "cwd", tmp_path / "xdg"
    cwd.mkdir()
    blank = warm.with_env(WARM_HOME="  ", XDG_CACHE_HOME=str(xdg), PYTHONPATH=str(ROOT))
    done = blank("run", EXAMPLES / "matmul_host.py", "-q", "--no-verify", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(cwd.iterdir()) == [] and (xdg / "warm" / "bundle.warm").is_file(), done.stdout
