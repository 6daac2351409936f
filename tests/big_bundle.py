"""A test helper: a large, sound bundle built fast with SQL (`WITH RECURSIVE` inserts).

`build_big(path, kernels, tunes)` writes a bundle through warm's own schema
(`Bundle.create`) and fills it in one transaction: `kernels` kernels over two
architectures sharing `BLOBS` binaries (a batch shares one; each a cubin header of its
arch, `bench.scale.cubin_like`, so `warm verify` calls them cubins of their rows' arch), and `tunes`
tunes over `OPERATIONS` operations with four measured candidates each, every row
valid as warm writes it (format 3: keys as bytes, candidates packed with their kernel keys
interned, a tune's key is `tune_key` of its fields). The tunes share one candidates
document, made by SQL and packed once, their rows inserted in one batch (a Python function
called per row by SQL cost ~40 µs a tune). Under pytest (`tests/conftest.py` names a
folder of this test process in `CACHE_FOLDER`), a large bundle is built once per
arguments and copied to each new path asked for (the same rows as a build writes, its
manifest's times those of the first build). The tests of bounded memory and time run
the real CLI over its output, each in a process of its own whose peak memory `peak_rss`
reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from bench.scale import cubin_like  # kernels of `sm` share blob `r` where `r % 2` is `sm == 90`
from warmcli.backends.toolchain import BUILD_RECIPE, RECIPE_MARK
from warmcli.bundle.candidates import as_bytes, decode, pack
from warmcli.bundle.store import Bundle
from warmcli.records import tune_key

BLOBS = 8
OPERATIONS = 50
# A toolchain from elsewhere, of this warm's build recipe (an older recipe's builds are
# never served: `warm clean` removes them on any machine).
TOOLCHAIN = f"nvcc:release 12.0, V12.0.0 (a toolchain from elsewhere){RECIPE_MARK}{BUILD_RECIPE}]"

_KERNELS = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?),
b(r, sha256) AS (SELECT 2 * (row_number() OVER (PARTITION BY substr(data, 50, 1)
    ORDER BY sha256) - 1) + (hex(substr(data, 50, 1)) = '5A'), sha256 FROM blobs)
INSERT INTO kernels SELECT
    printf('%064x', i), arch, 'cuda', arch, 'k' || (i % 97), 'k' || (i % 97) || '[V=' || i || ']',
    'warm_' || substr(printf('%064x', i), 1, 16) || '_k' || (i % 97),  -- its key's symbol
    b.sha256, ?,
    '{"arch":"' || arch || '"}', '', 0.01, 1000.0 + i, 1000.0 + i
FROM (SELECT i, CASE i % 2 WHEN 0 THEN 'sm_80' ELSE 'sm_90' END AS arch FROM n)
JOIN b ON b.r = i % ?
"""
_CANDIDATES = (
    "'[' || group_concat(json_object('name', 'c' || j, 'kernel_key', printf('%064x', j), "
    "'status', 'ok', 'seconds', 1e-4 * (1 + j), 'samples', json_array(1e-4 * (1 + j)), "
    "'reason', ''), ',') || ']'"
)
_TUNES = f"""
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
SELECT 'op' || (i % {OPERATIONS}), 'float32[' || i || ']', printf('%064x', i % {OPERATIONS}) FROM n
"""
_DEVICE = "cuda|NVIDIA H100|sm_90|550.54"
# The environment variable naming the folder where `build_big` keeps the bundles it built
# (set by `tests/conftest.py` for each test process), and the sizes kept there: large
# enough to cost a build, small enough to copy (kernels + tunes).
CACHE_FOLDER = "WARM_TESTS_BIG_BUNDLES"
CACHED = range(2_000, 100_001)


def build_big(path: Path, kernels: int, tunes: int, seed: int = 0) -> Path:
    """Write the bundle at `path` (see the module doc) and return `path`."""
    folder = os.environ.get(CACHE_FOLDER)
    if not folder or kernels + tunes not in CACHED or os.path.lexists(path):
        return _build(path, kernels, tunes, seed)  # (onto a bundle there: added to it)
    built = Path(folder) / f"{kernels}-{tunes}-{seed}.warm"
    if not built.exists():
        _build(built.with_suffix(".new"), kernels, tunes, seed)
        for suffix in ("", ".lock"):
            os.replace(f"{built.with_suffix('.new')}{suffix}", f"{built}{suffix}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", ".lock"):  # (the lock file its build leaves beside it)
        shutil.copyfile(f"{built}{suffix}", f"{path}{suffix}")
        shutil.copymode(f"{built}{suffix}", f"{path}{suffix}")
    return path


def _build(path: Path, kernels: int, tunes: int, seed: int) -> Path:
    """`build_big`'s bundle, written at `path`."""
    rng = random.Random(seed)
    binaries = [
        cubin_like(80 if r % 2 == 0 else 90, rng.randbytes(4096 - 64)) for r in range(BLOBS)
    ]
    with Bundle.create(path) as bundle, bundle.transaction() as conn:
        interned: dict[bytes, int] = {}  # format 3: a candidate's kernel key by its id
        conn.executemany(
            "INSERT INTO blobs VALUES (?, ?, ?)",
            [(hashlib.sha256(b).hexdigest(), len(b), b) for b in binaries],
        )
        conn.execute(_KERNELS, (kernels, TOOLCHAIN, BLOBS))
        (document,) = conn.execute(
            f"WITH c(j) AS (VALUES (0), (1), (2), (3)) SELECT {_CANDIDATES} FROM c"
        ).fetchone()
        packed = pack(decode(document), lambda k: interned.setdefault(k, len(interned) + 1))
        rows = conn.execute(_TUNES, (tunes,)).fetchall()  # (one, as ever, for `tunes` 0)
        conn.executemany(
            "INSERT INTO tunes VALUES (?, ?, ?, ?, ?, 0, 'c0', ?, 0.01, 1000.0, 1000.0)",
            [
                (
                    as_bytes(tune_key(op, shape, _DEVICE, sum_)),
                    op,
                    shape,
                    _DEVICE,
                    as_bytes(sum_),
                    packed,
                )
                for op, shape, sum_ in rows
            ],
        )
        conn.executemany(
            "INSERT INTO tune_kernels VALUES (?, ?)", [(i, k) for k, i in interned.items()]
        )
    return path


_MEASURED = """
import json, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps([proc.returncode, proc.stdout, proc.stderr, peak]))
"""


def peak_rss(
    args: list[str], env: dict[str, str], timeout: float = 600
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `args` from a fresh process of its own (so no other child's peak counts) and
    return how it ended and its peak resident memory, in MiB (`ru_maxrss` of its child)."""
    ran = subprocess.run(
        [sys.executable, "-c", _MEASURED, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=True,
    )
    code, out, err, peak = json.loads(ran.stdout)
    return subprocess.CompletedProcess(args, code, out, err), peak / 1024
