"""Found while shrinking test_faults34's bundles: out of memory said with a traceback.

`warm stats --json` of a 5,000-kernel, 5,000-tune bundle under `ulimit -v 50` MB ran out of
memory while reading it, and then failed to say so: the line goes through Rich, imported
only when first needed, and that import (`random`'s `_random` extension) was refused with
an `ImportError` ("failed to map segment from shared object") that no handler caught. The
real CLI in a subprocess, a real bundle, a real address-space limit.
"""

from __future__ import annotations

from pathlib import Path

from big_bundle import build_big
from conftest import Warm
from memory_limit import ended_as_promised, stats_json_under


def test_out_of_memory_is_one_line_even_where_rich_cannot_be_imported(
    warm: Warm, tmp_path: Path
) -> None:
    big = build_big(tmp_path / "big.warm", 5000, 5000)
    ends = []
    for megabytes in (45, 48, 50, 52, 55):  # (52, then 50: a stack overflow, test_main49)
        ends.append(ended_as_promised(stats_json_under(warm, big, megabytes), megabytes))
    assert 2 in ends, ends
