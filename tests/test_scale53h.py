"""Stop 53's scale study: a cost that grows with a workload's square, counted, never timed.

A second writer storing the kernels a first one stored alike (two CI jobs warming one bundle)
frees each one's own blob where no kernel names it. That was one statement a blob, each
gathering every kernel's digest again (blobs times kernels: 2.5 s for 16,016 kernels); it is
one statement for them all. SQLite's virtual-machine steps, counted by a progress handler,
are the same on every machine: four times the kernels take about four times the steps.
"""

from __future__ import annotations

import hashlib

from warmcli.bundle.store import Bundle
from warmcli.records import KernelRecord


def _kernel(i: int, blob: bytes) -> tuple[KernelRecord, bytes]:
    sha = hashlib.sha256(blob).hexdigest()
    named = ("touch", f"touch[{i}]", f"warm_{i:016x}_touch")
    record = KernelRecord(f"{i:064x}", "host", "host", "x86_64", *named, sha, "cc:gcc", {})
    return record, blob


def _steps_to_store_again(tmp_path, n: int) -> int:
    """SQLite's steps (in hundreds) for a second writer to store `n` kernels a first writer
    stored alike: every one held, none written, and every blob kept (its row names it)."""
    kernels = [_kernel(i, b"binary %d" % i) for i in range(n)]
    path = tmp_path / f"k{n}.warm"
    with Bundle.create(path) as bundle:
        assert bundle.put(kernels) == (n, 0)
    steps, held = [0], set()

    def step() -> int:
        steps[0] += 1
        return 0

    with Bundle.open(path, write=True) as bundle:
        bundle._conn.set_progress_handler(step, 100)
        assert bundle.put(kernels, held=held) == (0, 0)
        bundle._conn.set_progress_handler(None, 0)
        assert all(bundle.blob(record.sha256) == blob for record, blob in kernels)
    assert held == {record.key for record, _ in kernels}
    return steps[0]


def test_a_second_writer_stores_alike_in_steps_linear_in_its_kernels(tmp_path) -> None:
    small, big = _steps_to_store_again(tmp_path, 150), _steps_to_store_again(tmp_path, 600)
    assert big < 6 * small, (small, big)  # (a statement a blob: 1,072 to 15,090; now 188 to 756)


def test_a_rebuilt_kernels_old_blob_goes_only_when_no_kernel_names_it(tmp_path) -> None:
    path = tmp_path / "r.warm"
    first, second = _kernel(1, b"old"), _kernel(2, b"old")  # two kernels, one binary
    with Bundle.create(path) as bundle:
        bundle.put([first, second])
    old = first[0].sha256
    with Bundle.open(path, write=True) as bundle:
        rebuilt = _kernel(1, b"new")
        assert bundle.put([rebuilt]) == (1, 0)
        assert bundle.blob(old) == b"old"  # the second kernel names it still
        assert bundle.put([_kernel(2, b"newer")]) == (1, 0)
        assert bundle._one("SELECT count(*) FROM blobs WHERE sha256 = ?", (old,))[0] == 0
        assert bundle.blob(rebuilt[0].sha256) == b"new"
