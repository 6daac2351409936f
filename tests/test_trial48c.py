"""Trial 48c (a new user, the README only: a pytest suite warmed, a REPL, a pre-fork server, a
library's bundle, a CI cache): what the report says after `warmcli.production.close()` (the
README's write-back recipe for a `multiprocessing` pool's workers). Real CLI, real production
processes, real C compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from add_only import warmed_here, warmed_once  # noqa: F401  (fixtures)
from conftest import Warm

# A pytest a test starts loads no plugin by entry point (this venv's xdist and hypothesis):
# a user's suite's own plugins are not what these tests try, pytest's own ones are.
NO_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

# Every test starts from `add_only.warmed`'s folder, as its `warm run` left it (made once).
pytestmark = pytest.mark.usefixtures("warmed_here")

# A served process that launches `add` (in the bundle) and `mul` (not), then `{then}`.
SERVED = """
import numpy as np, warmcli, warmcli.production
from kernels import ADD, MUL
rt = warmcli.runtime("host")
x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)
for k in (ADD, MUL):
    try:
        rt.launch(k, x, o, 4)
    except warmcli.StrictMissError:
        pass
{then}
"""


def _served(warm: Warm, cwd: Path, then: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The served process run in `cwd` with `WARM_BUNDLE=b.warm WARM_REPORT=1` and `env`."""
    environ = dict(warm.env, WARM_BUNDLE="b.warm", WARM_REPORT="1", **env)
    code = SERVED.format(then=then)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=environ, capture_output=True, text=True
    )


def test_the_report_after_close_names_the_bundle_it_wrote_back_into(
    warm: Warm, tmp_path: Path
) -> None:
    """The README's recipe for a `multiprocessing` worker registers `production.close` as a
    finalizer: it writes back, but then the report (the exit's, a `spawn` worker's, and
    `warmcli.report()`) said `warm: no bundle is loaded: this process compiled 1 kernel(s)
    ... (warm them with `warm run`, then set WARM_BUNDLE)`, of a process served by a bundle
    it had just written that kernel into. It names the bundle closed, and says written."""
    then = "warmcli.production.close()\nprint(warmcli.report())"
    proc = _served(warm, tmp_path, then, WARM_BUNDLE_WRITE="1")
    assert proc.returncode == 0, proc.stderr
    for text in (proc.stdout, proc.stderr):
        first = text.splitlines()[0]
        assert "no bundle is loaded" not in text, text
        assert first.startswith("warm: bundle b.warm lacked 1 kernel(s)"), text
        assert first.endswith("(written back into it):"), text
        assert "kernel mul on host" in text, text
    stats = warm("stats", "b.warm", cwd=tmp_path)
    assert " mul " in stats.stdout, stats.stdout


def test_strict_refusals_after_close_are_of_the_bundle(warm: Warm, tmp_path: Path) -> None:
    """Strict, closed before exit: the refusal is reported as the bundle's lack (its reason
    the bundle's, `absent`), not as though no bundle had been loaded."""
    proc = _served(warm, tmp_path, "warmcli.production.close()", WARM_STRICT="1")
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("warm: bundle b.warm lacked 1 kernel(s) and 0 tune(s), which"), first
    assert "absent" in proc.stderr and "no bundle is loaded" not in proc.stderr, proc.stderr


def test_use_bundle_none_after_close_reports_no_bundle(warm: Warm, tmp_path: Path) -> None:
    """`use_bundle(None)` after a close: the process serves none from then, as before."""
    then = "warmcli.production.close()\nwarmcli.use_bundle(None)\nprint(warmcli.report())"
    proc = _served(warm, tmp_path, then)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("warm: no bundle is loaded"), proc.stdout


def test_warm_explain_under_pytest_shows_with_log_cli_level(warm: Warm, tmp_path: Path) -> None:
    """A suite served with `WARM_EXPLAIN=1` printed no miss at all (pytest's logging plugin
    caught the `warmcli` logger's line, and a passing test shows none, with or without `-s`):
    the README said such lines reach stderr. It now says so, and `--log-cli-level=WARNING`
    shows each reason, as pinned here."""
    (tmp_path / "test_k.py").write_text(
        "import numpy as np, warmcli\nfrom kernels import MUL\n\ndef test_mul():\n"
        "    rt = warmcli.runtime('host')\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(MUL, x, o, 4)\n    assert rt.read(o)[0] == 2\n"
    )
    # (NO_AUTOLOAD: the venv's entry-point plugins cost ~0.9 s of CPU a start; the
    # logging plugin that caught the line is pytest's own, loaded as ever)
    environ = dict(warm.env, WARM_BUNDLE="b.warm", WARM_EXPLAIN="1", **NO_AUTOLOAD)
    line = "warm: miss: kernel mul: absent"
    for options, shown in (([], False), (["-s"], False), (["--log-cli-level=WARNING"], True)):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "test_k.py"],
            cwd=tmp_path,
            env=environ,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (line in proc.stdout + proc.stderr) is shown, (options, proc.stdout + proc.stderr)


def test_a_suite_warmed_imports_conftest_once_a_pass(warm: Warm, tmp_path: Path) -> None:
    """'Warming with your test suite' said the test modules are imported once: a
    `conftest.py`'s module-level code runs once a pass (pytest imports it again at each
    `pytest.main`), which the README now says; the test module itself once, as it said."""
    log = tmp_path / "imports.txt"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        f"open({str(log)!r}, 'a').write('conftest\\n')\n"
    )
    (tmp_path / "tests" / "test_k.py").write_text(
        f"open({str(log)!r}, 'a').write('test_k\\n')\n"
        "import numpy as np, warmcli\nfrom kernels import ADD\n\ndef test_add():\n"
        "    rt = warmcli.runtime()\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n"
    )
    (tmp_path / "warm_tests.py").write_text(
        "import pytest\n\ndef workload(rt):\n"
        "    assert pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/']) == 0\n"
    )
    suite = warm.with_env(**NO_AUTOLOAD)  # (as above: what pytest imports is the point)
    proc = suite("run", "warm_tests.py", "-b", "t.warm", "-q", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(log.read_text().split()) == ["conftest"] * 3 + ["test_k"], log.read_text()
