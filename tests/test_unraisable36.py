"""Out of memory as the CLI unwinds is its one line, never Python's `Exception ignored`.

Under `ulimit -v` a finalizer that ran out of memory (a generator closed, a `__del__`) as a
command unwound made Python print `Exception ignored in: ...`, then, its own hook out of
memory too, `Exception ignored in sys.unraisablehook` and `MemoryError`, beside warm's
`out of memory` line (seen in `test_faults34`'s 50 MB case, now and then). The CLI's hook
says nothing of a `MemoryError` and everything else as Python does. Real `warm` entry
point in a subprocess (`warmcli.__main__.main`, a command that ends at once), with an
object whose finalizer raises.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

SCRIPT = """
import sys
from warmcli.__main__ import main

class Finalized:
    def __init__(self, error):
        self.error = error
    def __del__(self):
        raise self.error

sys.argv = ["warm", "--help"]
try:
    main()
except SystemExit:
    pass
held = Finalized(MemoryError())  # out of memory in a finalizer: nothing said
del held
held = Finalized(ValueError("a finalizer's own bug"))  # anything else: as Python says it
del held
"""


def test_a_finalizer_out_of_memory_says_nothing_and_any_other_error_is_said() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "MemoryError" not in proc.stderr, proc.stderr
    assert "a finalizer's own bug" in proc.stderr, proc.stderr
