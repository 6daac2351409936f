"""`warm check` streams one kernel's builds (one tune's devices) however many a bundle
holds: a bundle whose rows are all builds of one kernel (one backend, entry, label and
components), or all one tune on many devices, peaks as a small one does, and says what
it said. Real files, the real CLI in subprocesses."""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

from big_bundle import peak_rss
from conftest import Warm

from warmcli.bundle.candidates import as_bytes
from warmcli.records import tune_key

ROWS = 60_000
GROWTH = 32  # MiB over `warm check` on the small bundle it was made from
_BUILDS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
INSERT INTO kernels SELECT lower(hex(randomblob(32))), 'host', 'host', '{arch}', 'e', 'l',
    'warm_0123456789abcdef_e', (SELECT sha256 FROM blobs LIMIT 1), toolchain, '{{}}', '',
    0.1, 1.0, 1.0
FROM n, (SELECT toolchain FROM kernels LIMIT 1)
"""


def one_kernel(good: Path, path: Path, arch: str) -> Path:
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    conn.execute(_BUILDS.format(rows=ROWS, arch=arch))
    conn.commit()
    conn.close()
    return path


def test_check_of_one_kernel_with_many_builds_peaks_as_a_small_bundle(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    args = [sys.executable, "-m", "warmcli", "check"]
    small, small_peak = peak_rss([*args, str(good)], warm.env)
    assert small.returncode == 0, small.stdout + small.stderr
    here = small.stdout.splitlines()[0]  # "here: host  host|NAME|ARCH|OS  compiler"
    arch = here.split("  ")[1].split("|")[2]
    for built_for, code, said in (
        (arch, 0, f"{ROWS + 6} kernel(s), 3 tune(s): every entry is servable here"),
        ("elsewhere", 1, f"({ROWS} not for this machine): 1 not servable here"),
    ):
        path = one_kernel(good, tmp_path / f"{built_for}.warm", built_for)
        proc, peak = peak_rss([*args, str(path)], warm.env)
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert said in proc.stdout, proc.stdout
        assert peak - small_peak < GROWTH, f"{peak:.0f} MiB, on the small one {small_peak:.0f}"
    assert f"bundle has elsewhere, this machine has {arch}" in proc.stdout, proc.stdout


def test_check_of_one_tune_on_many_devices_peaks_as_a_small_bundle(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    args = [sys.executable, "-m", "warmcli", "check"]
    _, small_peak = peak_rss([*args, str(good)], warm.env)
    path = tmp_path / "devices.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    conn.create_function(
        "warm_key", 4, lambda o, s, d, c: as_bytes(tune_key(o, s, d, c.hex())), deterministic=True
    )
    conn.execute("DELETE FROM tunes WHERE rowid != (SELECT min(rowid) FROM tunes)")
    conn.execute(  # the one tune, measured on many other devices, not on this one
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) "
        "INSERT INTO tunes SELECT warm_key(operation, shape_key, d, checksum), operation, "
        "shape_key, d, checksum, status, pick, candidates, seconds, measured_at, updated "
        "FROM (SELECT 'host|Other|elsewhere|os' || i AS d FROM n), "
        "(SELECT * FROM tunes LIMIT 1)"
    )
    conn.execute("DELETE FROM tunes WHERE rowid = (SELECT min(rowid) FROM tunes)")
    conn.commit()
    conn.close()
    proc, peak = peak_rss([*args, str(path)], warm.env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = f"{ROWS} tune(s) ({ROWS} not for this machine): 1 not servable here"
    assert said in proc.stdout and "device fingerprint" in proc.stdout, proc.stdout
    assert peak - small_peak < GROWTH, f"{peak:.0f} MiB, on the small one {small_peak:.0f}"
