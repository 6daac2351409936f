"""review48d: tunes48's serving read (times checked as bytes) and merge (format-3 rows carried
as stored, but for their kernel ids), attacked with crafted rows in real SQLite files.

A serving read and the full read decide every crafted format-3 row alike (NaN payloads,
-0.0, subnormals, +inf, 2^993 exactly, 500,000 samples just under it or at it, a median
NaN, counts lying about the bytes); a merge carries a shard's row under kernel ids it
renumbers to the same kernels; and a `warm run --dask` merge (`as_run`) over a signed
bundle whose kernel ids do not start at 1 (as `warm clean --tune` leaves them) keeps the
bundle's own tunes signed: it renumbered their kernel ids, and a signature covers them."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import ForkedWarm

from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import load_public_key
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
from warmcli.ops.merge import merge_bundles

TWO_TUNABLES = """
import sys
sys.path.insert(0, {examples!r})
import numpy as np
from matmul_host import MATMUL, MATMUL_SOURCE, launch_matmul
from warmcli import Kernel, Tunable

WIDE = Tunable(
    name="wide",
    candidates={{
        f"t{{t}}": Kernel(MATMUL_SOURCE, "matmul", "PPPiii", defines={{"TILE": t}}, name="matmul")
        for t in (4, 128)
    }},
    launch=launch_matmul,
)

def workload(rt):
    rng = np.random.default_rng(0)
    a = rt.upload(rng.standard_normal((8, 8), dtype=np.float32))
    b = rt.upload(rng.standard_normal((8, 8), dtype=np.float32))
    c = rt.buffer((8, 8), "float32")
    rt.tune(MATMUL, a, b, c, 8, 8, 8)
    rt.tune(WIDE, a, b, c, 8, 8, 8)
"""


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> tuple[Warm, Path]:
    """A bundle of two tunables (`matmul`: 4 candidates, kernel ids 1-4; `wide`: 2, ids 5-6)
    warmed by the real CLI, and the warm that warmed it (each command forked,
    `tests/forked_cli.py`)."""
    base = tmp_path_factory.mktemp("review48d")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    workload = base / "two.py"
    workload.write_text(TWO_TUNABLES.format(examples=str(EXAMPLES)))
    bundle = base / "two.warm"
    done = warm("run", workload, "--bundle", bundle, "-q")
    assert done.returncode == 0, done.stderr
    return warm, bundle


def _f(x: float) -> bytes:
    return struct.pack("<d", x)


def _u(bits: int) -> bytes:
    return struct.pack("<Q", bits)


def _document(
    ids: list[int], names: list[str], pick: str, times: bytes, n: int, median: bytes
) -> bytes:
    """A format-3 document (deflated) of `names` naming kernel ids `ids` in turn, `pick`
    holding `n` samples `times` and the median `median`, the others one sample each."""
    raw = bytearray(struct.pack("<I", len(names)))
    for local, name in enumerate(names):
        raw += struct.pack("<BI", 3, len(name)) + name.encode() + struct.pack("<I", local)
        if name == pick:
            raw += median + struct.pack("<I", n) + times + struct.pack("<I", 0)
        else:
            raw += _f(2e-4) + struct.pack("<I", 1) + _f(2e-4) + struct.pack("<I", 0)
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = packer.compress(bytes(raw)) + packer.flush()
    return b"\x03" + struct.pack(f"<I{len(ids)}I", len(ids), *ids) + body


BIG = 2.0**993
CRAFTED = {  # the pick's samples, their count and its median: served (True) or refused
    "plain": (_f(1e-4) * 3, 3, _f(1e-4), True),
    "signalling NaN": (_u(0x7FF0000000000001) + _f(1e-4), 2, _f(1e-4), False),
    "negative NaN": (_u(0xFFF8000000000000), 1, _f(1e-4), False),
    "NaN, sign and payload": (_u(0xFFF0000000000001), 1, _f(1e-4), False),
    "-0.0": (_f(-0.0) * 2, 2, _f(1e-4), True),
    "subnormals": (_u(1) + _u(0x000FFFFFFFFFFFFF), 2, _f(1e-4), True),
    "+inf": (_f(math.inf), 1, _f(1e-4), False),
    "2^993": (_f(BIG), 1, _f(1e-4), True),
    "500,000 just under 2^993": (_f(math.nextafter(BIG, 0)) * 500_000, 500_000, _f(1e-4), True),
    "500,000 of 2^993": (_f(BIG) * 500_000, 500_000, _f(1e-4), True),
    "a sum past the largest float": (_f(1.7e308) * 2, 2, _f(1e-4), False),
    "the least negative": (_f(-5e-324), 1, _f(1e-4), False),
    "a median NaN": (_f(1e-4), 1, _u(0x7FF8000000000001), False),
    "a median -0.0": (_f(1e-4), 1, _f(-0.0), True),
    "a median 2^1023": (_f(1e-4), 1, _f(2.0**1023), True),
    "a count past the samples": (_f(1e-4) * 2, 3, _f(1e-4), False),
    "a count short of them": (_f(1e-4) * 3, 2, _f(1e-4), False),
    "an odd length": (_f(1e-4) + b"\0\0\0", 1, _f(1e-4), False),
}


def _read(path: Path, key: str, samples: bool) -> str:
    try:
        with Bundle.open(path) as bundle:
            return "served" if bundle.tune(key, samples=samples) is not None else "none"
    except BundleError:
        return "refused"


def test_crafted_format3_rows_are_decided_alike_by_both_reads(
    two: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Each crafted row in a copy of a warmed bundle: the serving read (times as bytes) and
    the full read (a float a sample) serve it or refuse it alike, and as its times say."""
    _, source = two
    conn = sqlite3.connect(source)
    key, pick, doc = conn.execute(
        "SELECT key, pick, candidates FROM tunes WHERE operation = 'matmul'"
    ).fetchone()
    conn.close()
    ids = list(struct.unpack_from("<4I", doc, 5))
    names = ["tile8", "tile16", "tile32", "tile64"]
    for what, (times, n, median, good) in CRAFTED.items():
        path = tmp_path / "crafted.warm"
        shutil.copyfile(source, path)
        with sqlite3.connect(path) as conn:
            packed = _document(ids, names, pick, times, n, median)
            conn.execute("UPDATE tunes SET candidates = ? WHERE key = ?", (packed, key))
        conn.close()
        decided = _read(path, key.hex(), True), _read(path, key.hex(), False)
        expected = "served" if good else "refused"
        assert decided == (expected, expected), what


def _heads(path: Path) -> dict[str, tuple[int, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT key, candidates FROM tunes").fetchall()
    finally:
        conn.close()
    heads = {}
    for key, doc in rows:
        (n,) = struct.unpack_from("<I", doc, 1)
        heads[key.hex()] = struct.unpack_from(f"<{n}I", doc, 5)
    return heads


def _candidates(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with Bundle.open(path) as bundle:
        return {t.key: [c._values() for c in t.candidates] for t in bundle.each_tune()}


def test_a_merge_carries_a_shards_tunes_to_the_kernels_they_name(
    two: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A shard whose kernel ids are none a merge writes (0, 7, 100, 2^32 - 1...), one tune's
    head reversed (its candidates name other kernels), the other's with ids repeated and
    unused: whatever the order of the inputs, every tune merged names the kernels it named
    in the shard, and `warm verify` calls the output sound."""
    warm, source = two
    shard = tmp_path / "shard.warm"
    shutil.copyfile(source, shard)
    remap = {1: 2**32 - 1, 2: 7, 3: 0, 4: 100, 5: 12, 6: 11}
    with sqlite3.connect(shard) as conn:
        kept = conn.execute("SELECT id, key FROM tune_kernels").fetchall()
        conn.execute("DELETE FROM tune_kernels")
        conn.executemany("INSERT INTO tune_kernels VALUES (?, ?)", [(remap[i], k) for i, k in kept])
        for key, head in _heads(source).items():
            odd = list(head[::-1]) if len(head) == 4 else [*head, head[1], head[0]]
            ids = [remap[i] for i in odd]
            (doc,) = conn.execute(
                "SELECT candidates FROM tunes WHERE key = ?", (bytes.fromhex(key),)
            ).fetchone()
            doc = doc[:1] + struct.pack(f"<I{len(ids)}I", len(ids), *ids) + doc[5 + 4 * len(head) :]
            conn.execute(
                "UPDATE tunes SET candidates = ?, measured_at = measured_at + 1000 WHERE key = ?",
                (doc, bytes.fromhex(key)),
            )
    conn.close()
    wanted = _candidates(shard)
    assert wanted != _candidates(source)  # (the reversed head: other kernels)
    for inputs in ([source, shard], [shard, source], [shard]):
        out = tmp_path / f"out{len(inputs)}{inputs[0].stem}.warm"
        merged = warm("merge", *inputs, "-o", out)
        assert merged.returncode == 0, merged.stderr
        assert _candidates(out) == wanted, inputs
        verified = warm("verify", out)
        assert verified.returncode == 0 and ": sound" in verified.stdout, verified.stdout


def test_a_run_merge_keeps_its_bundles_tunes_signed_whatever_their_kernel_ids(
    two: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm clean --tune matmul` leaves `wide`'s tune naming kernel ids 5 and 6; signed, then
    merged as `warm run --dask` merges its shards into it (`as_run`): the merge interned
    its kernels anew (1 and 2), a signature covers a tune's ids, so the bundle's own tune
    came out unsigned (production under the trusted keys: a miss). Its ids are kept now."""
    warm, source = two
    out = tmp_path / "out.warm"
    shutil.copyfile(source, out)
    assert warm("clean", out, "--tune", "matmul").returncode == 0
    (wide,) = _heads(out).items()
    assert wide[1] == (5, 6)
    assert warm("keygen", tmp_path / "k").returncode == 0
    assert warm("sign", out, "--key", tmp_path / "k").returncode == 0
    other = tmp_path / "other.warm"  # a shard's: the matmul tune measured again
    shutil.copyfile(source, other)
    trusted = [load_public_key(tmp_path / "k.pub")]
    merge_bundles([out, other], out, overwrite=True, trusted_keys=trusted, as_run=True)
    with Bundle.open(out) as bundle:
        problems = " ".join(signature_report(bundle, trusted).problems)
    assert wide[0][:16] not in problems, problems  # (the shard's matmul rows: not signed)
    assert "tunes" in problems  # (the shard's tune is unsigned: as it should be)
    assert _heads(out)[wide[0]] == (5, 6)
    verified = warm("verify", out)
    assert verified.returncode == 0, verified.stdout
