"""`warm check` streams one kernel's builds (one tune's devices) however many a bundle
holds: a bundle whose rows are all builds of one kernel (one backend, entry, label and
components), or all one tune on many devices, peaks as a small one does, and says what
it said. Real files, the real CLI in subprocesses."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from big_bundle import peak_rss
from conftest import Warm
from test_hostile_files import hostile

from warmcli.bundle.candidates import as_bytes
from warmcli.records import tune_key

# With a group held whole (1c8a1ba's bug, put back), `warm check` peaked over
# its peak on the small bundle by:
ROWS = 60_000  # builds of one kernel: 83 MiB (at 20,000 only 29: no guard)
DEVICES = 20_000  # devices of one tune: 76 MiB (at 60,000, 222)
GROWTH = 32  # MiB over `warm check` on the small bundle it was made from
_BUILDS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
INSERT INTO kernels SELECT substr(key, 1, 16) || lower(hex(randomblob(24))), 'host', 'host',
    '{arch}', entry, 'l', symbol, sha256, toolchain, '{{}}', '', 0.1, 1.0, 1.0
FROM n, (SELECT key, entry, symbol, sha256, toolchain FROM kernels LIMIT 1)
"""  # each key as the row's symbol names it (`warm_<key[:16]>_<entry>`), else a corrupt row
_DEVICES = f"""
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {DEVICES})
INSERT INTO tunes SELECT warm_key(operation, shape_key, d, checksum), operation, shape_key,
    d, checksum, status, pick, candidates, seconds, measured_at, updated
FROM (SELECT 'host|Other|elsewhere|os' || i AS d FROM n), (SELECT * FROM tunes LIMIT 1)
"""


CHECK = [sys.executable, "-m", "warmcli", "check"]
_SMALL: dict[str, tuple[subprocess.CompletedProcess[str], float]] = {}


def small_check(warm: Warm, good: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """`peak_rss` of `warm check` on the module's small bundle (`made`'s, never written), in
    its home: measured once a module, the measure every large bundle's check is held to."""
    if str(good) not in _SMALL:
        _SMALL[str(good)] = peak_rss([*CHECK, str(good)], warm.env)
    return _SMALL[str(good)]


def checked(
    warm: Warm, small: tuple[subprocess.CompletedProcess[str], float], big: Path
) -> tuple[subprocess.CompletedProcess[str], str]:
    """`warm check` of `big`, and what it held beyond the same on the small bundle (`small`:
    how its `warm check` ended and its peak, `peak_rss`; asserted bounded)."""
    small_peak = small[1]
    proc, peak = peak_rss([*CHECK, str(big)], warm.env)
    assert peak - small_peak < GROWTH, f"{peak:.0f} MiB, on the small one {small_peak:.0f}"
    return proc, proc.stdout


def test_check_of_one_kernel_with_many_builds_peaks_as_a_small_bundle(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    small = small_check(warm, good)  # (measured once: each large bundle's measure)
    here = small[0].stdout.splitlines()[0]  # "here: host  host|NAME|ARCH|OS  cc"
    arch = here.split("  ")[1].split("|")[2]
    for built_for, code, said in (
        (arch, 0, f"7 kernel(s) in {ROWS + 6} build(s), 3 tune(s): every entry is servable here"),
        ("elsewhere", 1, f"7 kernel(s) in {ROWS + 6} build(s), 3 tune(s): 1 not servable here"),
    ):
        path = hostile(good, tmp_path, _BUILDS.format(rows=ROWS, arch=built_for))
        proc, out = checked(warm, small, path)
        assert proc.returncode == code and said in out, out + proc.stderr
    assert f"bundle has elsewhere, this machine has {arch}" in out, out


def test_check_of_one_tune_on_many_devices_peaks_as_a_small_bundle(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    path = tmp_path / "devices.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    conn.create_function(
        "warm_key", 4, lambda o, s, d, c: as_bytes(tune_key(o, s, d, c.hex())), deterministic=True
    )
    conn.execute("DELETE FROM tunes WHERE rowid != (SELECT min(rowid) FROM tunes)")
    conn.execute(_DEVICES)  # the one tune, measured on many other devices
    conn.execute("DELETE FROM tunes WHERE rowid = (SELECT min(rowid) FROM tunes)")  # not here
    conn.commit()
    conn.close()
    proc, out = checked(warm, small_check(warm, good), path)
    said = f"{DEVICES} tune(s): 1 not servable here"
    assert proc.returncode == 1 and said in out and "device fingerprint" in out, out
