"""Serving many kernels from one bundle: each blob read once, the rows in few queries.

A generated workload of 24 distinct host kernels is warmed by the real CLI (`warm
run`: its batch compiler puts many kernels in each shared object, one blob each).
A production runtime over the real SQLite file then serves them all, with SQLite's
own trace callback counting the statements it runs: one blob read per distinct
blob (not per kernel), and the kernel rows prefetched in a few queries, in chunks
that grow with the kernels asked for. The rows fetched together are still checked
one at a time: under a trusted key, a row edited after signing is not served,
however it was fetched.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from bench import generated
from warmcli import Bundle, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host import HostDevice
from warmcli.bundle.signing import trusted_keys
from warmcli.runtime.lookup import PREFETCH_AFTER
from warmcli.warming.workload import load_workload

KERNELS = 24


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warm, Path, Path]:
    base = tmp_path_factory.mktemp("serving")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(base / "home")))
    workload = generated.write(base / "many.py", KERNELS)
    bundle = base / "many.warm"
    proc = warm("run", workload, "--bundle", bundle, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    return warm, workload, bundle


def _serve(
    workload: Path, bundle: Bundle, monkeypatch: pytest.MonkeyPatch, home: str
) -> tuple[Runtime, list[str]]:
    """Run the workload once under Execute over `bundle`; (runtime, statements run)."""
    monkeypatch.setenv("WARM_HOME", home)
    statements: list[str] = []
    bundle._conn.set_trace_callback(statements.append)  # SQLite's own record of its work
    rt = Runtime(HostDevice(), bundle)
    with ProcessModeOverride(ProcessMode.EXECUTE):
        load_workload(workload).function(rt)
    bundle._conn.set_trace_callback(None)
    return rt, statements


def _served_blobs(rt: Any, bundle: Bundle) -> tuple[Any, set[str]]:
    """The kernels `rt` served from `bundle` and the blobs they came from; `rt` closed."""
    try:
        served = rt.kernels.loaded_from_bundle()
        return served, {r.sha256 for r in (bundle.kernel(k) for k in served) if r is not None}
    finally:
        rt.close()


def test_each_blob_is_read_once_and_rows_in_few_queries(
    warmed: tuple[Warm, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    warm, workload, path = warmed
    with Bundle.open(path) as bundle:
        rt, statements = _serve(workload, bundle, monkeypatch, warm.env["WARM_HOME"])
        served, blobs = _served_blobs(rt, bundle)
    assert len(served) == KERNELS
    assert 1 <= len(blobs) < KERNELS  # the batch shared its objects between kernels
    blob_reads = [  # a chunk's blob sizes (`IN`) or a row's (a subquery): not a blob read
        s
        for s in statements
        if "FROM blobs WHERE sha256" in s and "FROM kernels" not in s and "sha256 IN" not in s
    ]
    size_reads = [s for s in statements if "FROM blobs WHERE sha256 IN" in s]
    row_reads = [s for s in statements if "FROM kernels" in s]  # a chunk's (a join), or by key
    assert len(blob_reads) == len(blobs), blob_reads
    assert 1 <= len(row_reads) <= PREFETCH_AFTER + 1, row_reads
    assert len(size_reads) <= len(row_reads), size_reads  # once per prefetched chunk


def test_each_blob_is_hashed_once(
    warmed: tuple[Warm, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob's sha256 is checked as it is read (`Bundle.blob`); the host library cache
    names its file by that checked digest, not hashing the binary again."""
    import hashlib

    warm, workload, path = warmed
    digested: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes = b"", **kwargs: object) -> object:
        digested.append(len(data))
        return real(data, **kwargs)  # type: ignore[arg-type]

    with Bundle.open(path) as bundle:
        sizes = {size for (size,) in bundle._all("SELECT size FROM blobs")}
        monkeypatch.setattr(hashlib, "sha256", counting)
        rt, _ = _serve(workload, bundle, monkeypatch, warm.env["WARM_HOME"])
        monkeypatch.setattr(hashlib, "sha256", real)
        served, blobs = _served_blobs(rt, bundle)
    assert len(served) == KERNELS
    assert len([n for n in digested if n in sizes]) == len(blobs), digested


def test_a_row_edited_after_signing_is_not_served_when_fetched_together(
    warmed: tuple[Warm, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm, workload, source = warmed
    path = tmp_path / "signed.warm"
    path.write_bytes(source.read_bytes())
    key = tmp_path / "key"
    for args in (("keygen", key), ("sign", path, "--key", key)):
        proc = warm(*args)
        assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(path) as conn:  # as an attacker would: the last kernel's label
        (victim,) = conn.execute("SELECT key FROM kernels ORDER BY label DESC LIMIT 1").fetchone()
        conn.execute("UPDATE kernels SET label = 'edited' WHERE key = ?", (victim,))
    conn.close()
    keys = trusted_keys([str(key) + ".pub"])
    with Bundle.open(path, trusted_keys=keys) as bundle:
        rt, _ = _serve(workload, bundle, monkeypatch, warm.env["WARM_HOME"])
        try:
            served = rt.kernels.loaded_from_bundle()
        finally:
            rt.close()
    assert len(served) == KERNELS - 1 and victim not in served


def test_prefetch_is_bounded_and_the_rest_is_read_by_key(
    warmed: tuple[Warm, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many rows a bundle holds for a device, the prefetch keeps at most its
    budget in memory; a kernel left out is read by its key, and every kernel is served."""
    import warmcli.bundle.core as bundle_module

    warm, workload, path = warmed
    with Bundle.open(path) as bundle:
        one_row = sum(
            len(v)
            for v in next(iter(bundle.kernel_rows("host", HostDevice().arch).values()))
            if isinstance(v, str | bytes)
        )
        monkeypatch.setattr(bundle_module, "PREFETCH_CHARS", one_row * 3)
        assert len(bundle.kernel_rows("host", HostDevice().arch)) <= 3
        rt, statements = _serve(workload, bundle, monkeypatch, warm.env["WARM_HOME"])
        try:
            served = rt.kernels.loaded_from_bundle()
        finally:
            rt.close()
    assert len(served) == KERNELS
    by_key = [s for s in statements if "FROM kernels WHERE key" in s]
    assert len(by_key) > PREFETCH_AFTER  # the rows over the budget were read one at a time
