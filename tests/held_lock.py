"""A host workload of `fill` kernels (one per divisor in `DIVS`, "3" unless set) and a raw
sqlite3 writer that holds a bundle's exclusive lock for 6 s or as told (it prints "held" once
it does): what the tests of a production write-back stopped while it waits for a lock share."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = (double)i / (DIV) + 0.5; }"


def workload(rt):
    outs = []
    for d in os.environ.get("DIVS", "3").split(","):
        o = rt.buffer(17, "float64")
        rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), o, 17)
        outs.append(o)
    return outs
"""

# A raw sqlite3 writer holding the exclusive lock for 6 s (or `argv[2]` s): a write-back waits
# for it.
HOLD = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 6)
c.execute("ROLLBACK")
"""


def stopped_in_write_back(produce: subprocess.Popen[str], bundle: Path) -> str:
    """`produce` (a production process waiting on its stdin, write-back on) let end while
    `HOLD` holds `bundle`'s lock, then sent SIGTERM 1 s into its write-back's wait: its stderr."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(bundle)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert produce.stdin is not None
        produce.stdin.write("\n")  # it ends: its write-back waits for the holder's lock
        produce.stdin.flush()
        time.sleep(1.0)
        produce.send_signal(signal.SIGTERM)
        return produce.communicate(timeout=30)[1]
    finally:
        holder.kill()
        holder.wait()
