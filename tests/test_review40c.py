"""Review of today's inspection merges (stats40, polish40), read through the real CLI in a
subprocess over real SQLite bundles.

- `warm stats` counts each compile once by telling a compile's rows of one kernel (a CUDA
  kernel's cubin and PTX) by device, toolchain, the kernel's content digest and its share of
  time (`warmcli.bundle.compiles`). A row that names no content digest (a bundle another
  tool wrote, `bench/scale.py`'s, any made-up one) is no twin of anything: it was taken for a
  twin of every row of its device and toolchain whose seconds were equal, so the 5,000 rows
  of one arch in bench/scale.py's bundle each showed 0.01 s / 5,000 (2e-06 s), the streamed
  (`warm stats --json`) and held (`warm diff --json`) listings alike.
- `source_sha256` (stats40, polish40) is the bundle's text: a lone surrogate its JSON spells
  (`\\ud800`) was written as one by `warm stats --json` and `warm check --json`, a document
  strict JSON readers refuse whole; it is written escaped now.
- A PyCUDA prepared call packs a `P` (or `l`, `L`, `q`, `Q`) with `struct.pack`, which takes
  what `operator.index` takes: another library's device array (a PyTorch tensor, a CuPy
  array) has an `__index__` that refuses an array of more than one element, so PyCUDA's
  call fails there ("only integer tensors of a single element can be converted to an
  index"), while warm took it as the array's memory, and a GPU-less pre-build passed a
  script PyCUDA fails. (A pure-logic check of `warmcli.pycuda.args.convert`, with a fake
  of such an array: none of those libraries is installed here.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from forked_cli import forked_warm  # noqa: F401  (the `warm` fixture, each command forked)

from bench.scale import build


@pytest.fixture(scope="module")
def undigested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/scale.py's bundle of 6 kernels (3 an arch, each row 0.01 s), whose rows name
    no content digest."""
    path = tmp_path_factory.mktemp("undigested") / "scale.warm"
    build(path, 6, 0)
    return path


def test_a_row_naming_no_kernel_digest_is_a_compile_of_its_own(
    warm: Any, undigested: Path, tmp_path: Path
) -> None:
    kernels = warm.json("stats", undigested)["kernels"]
    assert len(kernels) == 6
    assert [k["seconds"] for k in kernels] == [0.01] * 6  # each its row's, not 0.01 / 3
    assert [k["compile_seconds"] for k in kernels] == [0.01] * 6
    empty = tmp_path / "empty.warm"
    build(empty, 0, 0)
    only = warm.json("diff", empty, undigested)  # the held listing (kernels_json)
    assert [k["seconds"] for k in only["kernels"]["only_b"]] == [0.01] * 6


@pytest.fixture(scope="module")
def odd_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/scale.py's 6 kernels, the three on sm_90 of one label, one naming a source
    "digest" a bundle's JSON can spell but no strict reader takes (a lone surrogate,
    `\\ud800`), one no text at all (an object)."""
    import json
    import sqlite3

    path = tmp_path_factory.mktemp("odd") / "odd.warm"
    build(path, 6, 0)
    with sqlite3.connect(path) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM kernels WHERE arch = 'sm_90'")]
        for key, source in zip(keys, ["\ud800x", {"a": 1}, "0" * 64], strict=True):
            parts = {"arch": "sm_90", "entry": "k1", "source": source}
            text = json.dumps(parts)  # (ASCII: the surrogate as the escape \ud800)
            db.execute("UPDATE kernels SET components = ?, label = 'k1' WHERE key = ?", (text, key))
    return path


def _strict(text: str) -> Any:
    """`text` as a strict JSON reader takes it: every string in it Unicode (a lone surrogate,
    which Python's reader takes, is refused by serde_json's: 'lone leading surrogate')."""
    import json

    doc = json.loads(text)
    json.dumps(doc, ensure_ascii=False).encode("utf-8")  # (UnicodeEncodeError where one is)
    return doc


def test_a_source_digest_a_bundle_spells_oddly_is_text_strict_json_takes(
    warm: Any, odd_sources: Path
) -> None:
    stats = warm("stats", odd_sources, "--json")
    assert stats.returncode == 0, stats.stderr
    sources = sorted(k["source_sha256"] for k in _strict(stats.stdout)["kernels"])
    assert sources == ["", "", "", "0" * 64, "\\ud800x", "{'a': 1}"]  # (the row reader's text)
    check = warm("check", odd_sources, "--arch", "sm_90", "--json")
    assert check.returncode == 1, check.stderr  # (nvcc:13's builds: not servable here)
    entries = _strict(check.stdout)["unservable"]
    assert sorted(e["source_sha256"] for e in entries if e["kind"] == "kernel") == sources
    table = warm("check", odd_sources, "--arch", "sm_90")
    assert "\\ud800x" in table.stdout and "\ud800" not in table.stdout


class FakeDeviceArray:
    """A fake: another library's device array, as a PyTorch tensor or a CuPy array of 8
    floats is (its memory in `__cuda_array_interface__`; its `__index__` refuses an array of
    more than one element, as theirs do)."""

    __cuda_array_interface__ = {  # noqa: RUF012  (a class's constant, as the protocol reads it)
        "shape": (8,),
        "typestr": "<f4",
        "data": (4096, False),
        "version": 3,
        "strides": None,
    }

    def __index__(self) -> int:
        raise TypeError("only integer tensors of a single element can be converted to an index")


@pytest.mark.parametrize("letters", ["Pi", "Qi"])
def test_a_prepared_call_refuses_an_address_struct_pack_refuses(letters: str) -> None:
    from warmcli.pycuda.args import ArgumentError, StandInAllocation, convert

    with pytest.raises(ArgumentError, match="argument 1: a FakeDeviceArray is no address"):
        convert(letters, [FakeDeviceArray(), 3], "sm_90", "k", packed=True)
    convert(letters, [StandInAllocation(32), 3], "sm_90", "k", packed=True)  # an __index__ one
    convert("Pi", [FakeDeviceArray(), 3], "sm_90", "k")  # a call (not packed) takes it, as PyCUDA's


@pytest.fixture(scope="module")
def many_ptx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """saxpy_cuda.py pre-built for sm_90 by NVRTC (8 kernels, a cubin and a PTX each), and
    1,100 kernels more held only as compute_90 PTX (rows keyed as warm keys them, naming the
    real PTX blob): 1,108 kernels an sm_100 GPU is served by PTX JIT."""
    import hashlib
    import json
    import os
    import sqlite3
    import subprocess
    import sys

    from conftest import EXAMPLES, ROOT, nvrtc_release_or_skip

    from warmcli.kernel_parts import key_of

    nvrtc_release_or_skip()
    folder = tmp_path_factory.mktemp("ptx")
    path = folder / "p.warm"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(folder / "home")
    argv = [sys.executable, "-m", "warmcli", "run", str(EXAMPLES / "saxpy_cuda.py")]
    argv += ["--arch", "sm_90", "--compiler", "nvrtc", "-b", str(path), "-q"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(path) as db:
        names = [r[1] for r in db.execute("PRAGMA table_info(kernels)")]
        query = "SELECT * FROM kernels WHERE arch = 'compute_90' AND entry = 'saxpy' LIMIT 1"
        row = dict(zip(names, db.execute(query).fetchone(), strict=True))
        parts = json.loads(row["components"])
        rows = []
        for i in range(1100):
            content = hashlib.sha256(f"made {i}".encode()).hexdigest()
            made = {**parts, "kernel": content}
            cubin = key_of(content, "sm_90", made.get("headers", ""), made["toolchain"])
            key = key_of(content, "compute_90", made.get("headers", ""), made["toolchain"])
            row.update(key=key, label=f"made{i}", components=json.dumps(made))
            row["symbol"] = f"warm_{cubin[:16]}_saxpy"  # (its cubin's, as a PTX row's names it)
            rows.append(tuple(row[n] for n in names))
        db.executemany(f"INSERT INTO kernels VALUES ({','.join('?' * len(names))})", rows)
    return path


def test_kernels_served_by_ptx_jit_are_counted_and_the_first_listed(
    warm: Any, many_ptx: Path
) -> None:
    """`warm check` kept every kernel served by PTX JIT, with (since polish40) its source
    digest beside it: memory grew with the bundle (100,007 such kernels: 108 MB, 153 MB with
    the digests). It keeps the first 1,000, as it keeps what is not servable, and counts
    them all (`ptx_jit_count`)."""
    import json

    done = warm("check", many_ptx, "--arch", "sm_100", "--json")
    assert done.returncode == 1, done.stderr  # (its 6 tunes, pending: not servable)
    doc = json.loads(done.stdout)
    assert doc["kernels"] == 1108 and doc["unservable_count"] == 6
    assert doc["ptx_jit_count"] == 1108 and len(doc["ptx_jit"]) == 1000
    table = warm("check", many_ptx, "--arch", "sm_100")
    assert "1108 kernel(s) served by PTX JIT here" in table.stdout
    assert "the first 1,000 of 1,108 served by PTX JIT are grouped above" in table.stdout
