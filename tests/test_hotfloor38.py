"""hotfloor38: a hot production process does less beyond the floor, and nothing else changes.

A process served wholly from its bundle never imports the production report's records, not
even at exit (its misses are none: counted, not listed); one that missed still reports and
lists every miss at exit (`WARM_REPORT=1`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Registered before warm is imported, so it runs after warm's exit handler: the last word.
AT_THE_END = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))
sys.path.insert(0, {examples!r})
import warmcli, matmul_host
{use}
rt = warmcli.runtime("host")
matmul_host.workload(rt)
rt.synchronize()
"""


def _modules_at_exit(warm: Warm, use: str, **env: str) -> tuple[list[str], str]:
    code = AT_THE_END.format(examples=str(EXAMPLES), use=use)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(warm.env, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_a_hot_process_never_imports_the_report_records_even_at_exit(
    warm: Warm, made_here: Path
) -> None:
    bundle_path = made_here  # the host example warmed in warm's home
    modules, err = _modules_at_exit(warm, f"warmcli.use_bundle({str(bundle_path)!r})")
    assert "warmcli.production" in modules  # served by warm, closed by its exit handler
    assert "warmcli.production_report" not in modules
    assert err == ""


def test_a_process_that_missed_still_lists_its_misses_at_exit(warm: Warm) -> None:
    modules, err = _modules_at_exit(warm, "warmcli.use_bundle(None)", WARM_REPORT="1")
    assert "warmcli.production_report" in modules
    assert "bias_relu" in err and "row_sum" in err and "matmul" in err, err
