"""`warm stats` held what a bundle's candidates name, per candidate (stats48): tunes whose
candidates each name a kernel of their own set its memory (20 tunes of 10,000 such: 152 MB,
`--explain` 180 MB; 100 tunes of 1,000 shown by `--explain` on a large bundle: 417 MB).
Each reproduced for real: the real CLI in a subprocess (its peak memory: one started for it,
whose output is checked too; what it prints of a small bundle: a fork), real SQLite files
(a bundle from `warm run`, its tunes added with sqlite3, packed as warm packs them)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path

from conftest import Warm
from test_hostile46 import _peak, _peak_run
from tune_rows import add_other_tunes, add_tunes

from warmcli.bundle.candidates import pack
from warmcli.records import CandidateMeasurement


def _naming_many_kernels(source: Path, path: Path, tunes: int, candidates: int) -> Path:
    """`source` with `tunes` more tunes of its first's operation (keyed as warm keys them:
    shapes "<first's shape> i"), each of `candidates` measured candidates (`c0` picked),
    every one naming a kernel of its own (a sha256 no kernel row has), packed as warm packs
    them (format 2: kernel keys whole)."""

    def one(i: int, j: int) -> CandidateMeasurement:
        kernel = hashlib.sha256(f"{i} {j}".encode()).hexdigest()
        return CandidateMeasurement(f"c{j}", kernel, "ok", 1e-3 + j * 1e-7, (1e-3 + j * 1e-7,))

    return add_tunes(
        source, path, tunes, lambda i: pack(one(i, j) for j in range(candidates)), "c0"
    )


def test_stats_holds_no_name_per_candidate_of_a_kernel_it_does_not_list(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Every candidate's kernel key was kept with its name (`warm stats` names each kernel
    it lists by the candidates that are it), and `--explain` kept every key its operation's
    candidates name and read each one's kernel row: 12 tunes of 8,000 candidates, each
    naming a kernel no bundle holds, took ~50 MiB more (`--explain`: ~70). Only the keys of
    kernels listed are kept now, and a table's tunes beyond those it shows whole are held
    without their candidates (counted)."""
    warm, good = made
    many = _naming_many_kernels(good, tmp_path / "many.warm", tunes=12, candidates=8_000)
    said = {}
    for args in ((), ("--json",), ("--explain", "matmul")):
        flat = _peak(warm, "stats", good, *args)
        peak, said[args] = _peak_run(warm, "stats", many, *args)
        grown = peak - flat
        assert grown < 36 << 20, f"warm stats {' '.join(args)}: {grown >> 20} MiB more"
    listed = said[()]  # what the measured `warm stats MANY` printed (the CLI as warm runs it)
    assert listed.returncode == 0, listed.stderr
    assert "Tunes (15)" in listed.stdout
    rows = [r for r in listed.stdout.splitlines() if r.rstrip().endswith(" 8000")]
    assert len(rows) == 12, listed.stdout[-3000:]  # every candidate counted, none held


def test_stats_explain_of_a_large_bundle_makes_one_tunes_table_at_a_time(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`--explain` on a bundle too large to list shows 100 tunes of the operation, each
    with up to 1,000 candidates: all were held as dicts, then made into one Rich group and
    rendered at once (100 tunes of 1,000: 417 MB). Each tune's candidates are held deflated
    now and each table made and printed in turn."""
    warm, good = made
    many = _naming_many_kernels(good, tmp_path / "many.warm", tunes=30, candidates=400)
    add_other_tunes(many, 201)  # of another operation: a bundle too large to list
    flat = _peak(warm, "stats", good, "--explain", "matmul")
    grown = _peak(warm, "stats", many, "--explain", "matmul") - flat
    assert grown < 24 << 20, f"{grown >> 20} MiB more"


def test_parts_printed_one_at_a_time_are_the_group_printed_at_once(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm stats` prints its parts one at a time now, each made as it is printed: the
    text is what printing them as one group printed (a bundle of few tunes, each a table of
    its candidates, and of many, one line each)."""
    from rich.console import Console, Group

    from warmcli.bundle.store import Bundle
    from warmcli.cli.inspect import stats_stream
    from warmcli.cli.render.stats import stats_renderable

    warm, good = made
    for n, every in ((0, False), (0, True), (20, False), (20, True)):
        path = _naming_many_kernels(good, tmp_path / f"b{n}.warm", tunes=n, candidates=3)
        with Bundle.open(path) as bundle:
            made_doc = stats_stream(bundle, "matmul" if every else None).items()
            doc = {k: list(v) if isinstance(v, Iterator) else v for k, v in made_doc}
        texts = []
        for whole in (True, False):
            console = Console(file=io.StringIO(), width=200, color_system=None)
            parts = list(stats_renderable(str(path), doc, every_candidate=every))
            for part in [Group(*parts)] if whole else parts:
                console.print(part)
            texts.append(console.file.getvalue())  # type: ignore[attr-defined]
        assert texts[0] == texts[1]
        shown = forked(warm)("stats", path, *(("--explain", "matmul") if every else ()))
        assert shown.returncode == 0, shown.stderr
        said = [line.rstrip() for line in shown.stdout.splitlines()[1:]]  # (the path aside)
        assert said == [line.rstrip() for line in texts[1].splitlines()[1:]]
