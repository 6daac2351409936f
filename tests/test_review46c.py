"""Stop 46's hostile review (review46c): what a user sees of a normal bundle, as before.

`warm diff --json` names each kernel listed only in one bundle by the tunable candidates it
is (README: "`warm diff --json` lists kernels in the same form" as `warm stats --json`, whose
`candidates` are "the tunable candidates it is, `operation/name`"): since hostile46b kept a
listed tune with its pick's candidate alone, every kernel but a pick was named by none. The
real CLI, the real cc, real bundles.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "many_kernels_host.py"

ONE = """\
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void one(float *x) { x[0] += 1.0f; }", "one", "P")

def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def test_diff_json_names_every_listed_kernel_by_its_candidates(warm: Warm, tmp_path: Path) -> None:
    five, one = tmp_path / "five.warm", tmp_path / "one.warm"
    (tmp_path / "one.py").write_text(ONE)
    warm.with_env(WARM_EXAMPLE_KERNELS="5").json("run", EXAMPLE, "--bundle", five)
    warm.json("run", tmp_path / "one.py", "--bundle", one)
    stats = {k["key"]: k["candidates"] for k in warm.json("stats", five)["kernels"]}
    assert sorted(c for names in stats.values() for c in names) == ["op0/v0", "op0/v1", "op0/v2"]

    doc = warm.json("diff", five, one)
    assert {k["key"]: k["candidates"] for k in doc["kernels"]["only_a"]} == stats
    assert doc["kernels"]["only_b"][0]["candidates"] == []
    back = warm.json("diff", one, five)  # the same of B's
    assert {k["key"]: k["candidates"] for k in back["kernels"]["only_b"]} == stats


def test_diff_holds_the_listed_kernels_names_within_its_bound() -> None:
    """Pure logic, fake readers: names of megabytes each (a row of kilobytes deflates them)
    are held up to `NAMED_CHARS` in all, not one per candidate of every listed tune."""
    from warmcli.ops.diff import NAMED_CHARS, Key, diff_keys
    from warmcli.records import CandidateMeasurement, KernelRecord, TuneRecord

    kernel = KernelRecord("a" * 64, "host", "host", "x86_64", "e", "e", "e", "b" * 64, "cc:x")
    long = NAMED_CHARS // 3

    def fake_read(kind: str, key: str) -> object:
        if kind == "kernel":
            return kernel
        names = [f"{key}{i}{'x' * long}" for i in range(2)]
        cands = tuple(CandidateMeasurement(n, kernel.key, "failed") for n in names)
        return TuneRecord(key, "op", "s", "host", "c" * 64, "measured", names[0], cands, 1.0, 0)

    tunes = [Key(f"t{i}") for i in range(8)]
    diff = diff_keys("a", "b", ([Key(kernel.key)], []), (tunes, []), (fake_read, fake_read))
    held = sum(map(len, diff.named_a[kernel.key]))
    assert 3 <= len(diff.named_a[kernel.key]) <= 4 and held < NAMED_CHARS + long + 100
    assert len(diff.tunes_only_a) == 8 and diff.named_b == {}
