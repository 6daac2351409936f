"""Found while shrinking test_faults34's bundles: out of memory said with a traceback.

`warm stats --json` of a 5,000-kernel, 5,000-tune bundle under `ulimit -v 50` MB ran out of
memory while reading it, and then failed to say so: the line goes through Rich, imported
only when first needed, and that import (`random`'s `_random` extension) was refused with
an `ImportError` ("failed to map segment from shared object") that no handler caught. The
real CLI in a subprocess, a real bundle, a real address-space limit.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from big_bundle import build_big
from conftest import ROOT, Warm


def test_out_of_memory_is_one_line_even_where_rich_cannot_be_imported(
    warm: Warm, tmp_path: Path
) -> None:
    big = build_big(tmp_path / "big.warm", 5000, 5000)
    ends = []
    for megabytes in (45, 50, 55):

        def little() -> None:
            size = megabytes << 20  # noqa: B023
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

        proc = subprocess.run(
            [sys.executable, "-m", "warmcli", "stats", "--json", big],
            capture_output=True, text=True, env=warm.env, cwd=ROOT, preexec_fn=little,
            timeout=120,
        )  # fmt: skip
        assert "Traceback" not in proc.stderr, (megabytes, proc.stderr[-600:])
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1, (megabytes, proc.returncode, proc.stderr[-600:])
            assert proc.returncode == 2 and "out of memory" in lines[0], lines
        ends.append(proc.returncode)
    assert 2 in ends, ends
