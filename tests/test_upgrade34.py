"""Upgrades under a warm bundle: what a fleet changes between warming and serving.

Through the real CLI (`warm run`) and fresh production processes compared with a cold
process: a check's helper that lives in a module beside the workload (`from checks import
close`), edited after warming, is another check, never the old pick served unchecked.
"""

from __future__ import annotations

from pathlib import Path

from conftest import TUNED_READ, Warm
from test_keys_exact import GLOBAL_TOLERANCE

IMPORTED_HELPER = GLOBAL_TOLERANCE.replace(
    """def squares(outputs, inputs):
    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=RTOL)""",
    """import sys
sys.path.insert(0, os.path.dirname(__file__))  # (run by path)
HOW = os.environ.get("HOW", "from")
if HOW == "from":
    from checks import close
else:
    import checks


def squares(outputs, inputs):
    if HOW == "from":
        close(outputs[0], inputs[0] ** 2)
    else:
        checks.close(outputs[0], inputs[0] ** 2)""",
)
LOOSE = "import numpy as np\n\n\ndef close(a, b):\n    np.testing.assert_allclose(a, b, rtol=0.1)\n"


def _served_after_helper_edit(warm: Warm, workload_file, tmp_path: Path, how: str) -> None:
    path = workload_file(IMPORTED_HELPER)
    helper = path.parent / "checks.py"
    helper.write_text(LOOSE)
    env = Warm(dict(warm.env, HOW=how))
    bundle = tmp_path / "h.warm"
    done = env("run", path, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    assert env.production(TUNED_READ, path, 9, bundle=bundle)["tunes"] == 0
    helper.write_text(LOOSE.replace("rtol=0.1", "rtol=1e-6"))  # the helper edited
    assert env.production(TUNED_READ, path, 9) == {"y": 100.0, "tunes": 1}, "cold"
    assert env.production(TUNED_READ, path, 9, bundle=bundle) == {"y": 100.0, "tunes": 1}


def test_a_check_helper_imported_by_name_from_a_module_beside_it_is_keyed(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    _served_after_helper_edit(warm, workload_file, tmp_path, "from")


def test_a_check_helper_read_through_a_module_beside_it_is_keyed(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    _served_after_helper_edit(warm, workload_file, tmp_path, "module")
