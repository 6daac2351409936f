"""Review 50a (a hostile review of stops 48 and 49's product changes): what it found.

- A kernel row whose stored options are JSON nested 100,000 deep (a hostile bundle's, under
  4 MiB): a production process missing a build of that entry with other options explained
  the miss (`reordered_hint`, stop 49: are they the same options in another order?) by
  parsing the held options, and Python's JSON parser's `RecursionError` ended the process
  with a traceback (with or without WARM_EXPLAIN), where a cold one runs its kernel.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A production process launching the host example's bias_relu built with -O1 (the bundle
# holds it built with none): a miss, compiled here; what it computed, and the misses.
BIAS_O1 = """\
import json, sys
import numpy as np
import warmcli
from warmcli import Kernel
sys.path.insert(0, "examples")
from matmul_host import BIAS_RELU
k = Kernel(BIAS_RELU.source, "bias_relu", "PPii", options=("-O1",))
rt = warmcli.runtime("host")
c = rt.upload(np.array([-1, 2, -3, 4], dtype=np.float32))
b = rt.upload(np.array([2, 1], dtype=np.float32))
rt.launch(k, c, b, 2, 2)
print(json.dumps({"c": rt.read(c).tolist(), "misses": len(warmcli.report().misses)}))
"""


def _components(path: Path, entry: str, change: Callable[[dict[str, str]], None]) -> None:
    """`change` made to the components of `path`'s kernel row of `entry` (its key kept)."""
    conn = sqlite3.connect(path)
    with conn:
        key, text = conn.execute(
            "SELECT key, components FROM kernels WHERE entry = ?", (entry,)
        ).fetchone()
        components = json.loads(text)
        change(components)
        conn.execute(
            "UPDATE kernels SET components = ? WHERE key = ?", (json.dumps(components), key)
        )
    conn.close()


def test_held_options_nested_deep_leave_a_miss_explained(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "nested.warm")
    _components(bundle, "bias_relu", lambda c: c.update(options="[" * 100_000 + "]" * 100_000))
    cold = warm.production(BIAS_O1)
    assert cold["c"] == [1.0, 3.0, 0.0, 5.0]
    explaining = warm.with_env(WARM_EXPLAIN="1")
    assert explaining.production(BIAS_O1, bundle=bundle) == {"c": cold["c"], "misses": 1}
