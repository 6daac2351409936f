"""warm as users install it (stop 59): a wheel and an sdist of the tree, installed non-editable
into fresh venvs, run from other folders, under other homes, beside another warm version.

What the trial found: warm's home followed the platformdirs installed wherever `XDG_CACHE_HOME`
was relative or blank or `HOME` was blank or relative: platformdirs 4.0.0 (which
`platformdirs>=4` allows) took each as it was, so `XDG_CACHE_HOME=rel` with a good `HOME` put
warm's home, its default bundle with it, in `/tmp/warm-<uid>`, and `HOME=` in `/.cache/warm`,
where platformdirs 4.14 names `~/.cache/warm` (the XDG spec: a relative path is ignored). On
Linux warm names these itself now, as the spec does, whatever platformdirs is installed, and a
serving process never imports platformdirs there."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm  # type: ignore[import-not-found]
from test_review42e import VICTIM, _as, tmpdir_shared  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parent.parent
_CODE = (
    "import sys; from warmcli import home; print(home.home_dir()); "
    "print('platformdirs' in sys.modules)"
)


def _home_of(env: dict[str, str], tmp_path: Path) -> list[str]:
    """What a fresh process names as warm's home under `env`, and whether it imported
    platformdirs to name it."""
    base = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME", "WARM_HOME")}
    done = subprocess.run(
        [sys.executable, "-c", _CODE],
        env={**base, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split("\n")[:2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's user cache directory")
@pytest.mark.parametrize(
    "env",
    [
        {"XDG_CACHE_HOME": "rel/cache", "HOME": "HOME"},
        {"XDG_CACHE_HOME": "~/cache", "HOME": "HOME"},
        {"XDG_CACHE_HOME": " ", "HOME": "HOME"},
        {"HOME": ""},
        {"HOME": "relative"},
        {"HOME": "~"},
        {"XDG_CACHE_HOME": "rel", "HOME": ""},
    ],
    ids=repr,
)
def test_a_relative_or_blank_xdg_cache_home_or_home_is_ignored_whatever_platformdirs(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Failed before: each case asked the installed platformdirs (imported: True), whose
    4.0.0 answered `/tmp/warm-<uid>` or `/.cache/warm` where 4.14 answers the passwd home's."""
    given = tmp_path / "home"
    env = {k: str(given) if v == "HOME" else v for k, v in env.items()}
    expected = str(given) if env["HOME"] == str(given) else pwd.getpwuid(os.getuid()).pw_dir
    assert _home_of(env, tmp_path) == [f"{expected.rstrip('/')}/.cache/warm", "False"]


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.getuid() != 0, reason="Linux, root: another uid"
)
@pytest.mark.parametrize(
    "given", [{"HOME": ""}, {"HOME": "rel"}, {"HOME": "", "XDG_CACHE_HOME": "r"}]
)
def test_a_uid_with_no_passwd_entry_and_a_blank_or_relative_home_gets_warm_uid_in_tmpdir(
    given: dict[str, str],
    tmpdir_shared: Path,  # noqa: F811
) -> None:
    """As `HOME` unset or `/`: `warm-<uid>` in `TMPDIR`, named without platformdirs (blocked
    here: importing it fails). Failed before: platformdirs was asked, and 4.0.0 answered
    `/.cache/warm` for `HOME=` (`warm run` exit 2: cannot make it)."""

    def named() -> str:
        sys.modules["platformdirs"] = None  # type: ignore[assignment]
        from warmcli import home

        return home.home_dir()

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmpdir_shared), **given}
    assert _as(VICTIM, named, env) == str(tmpdir_shared / f"warm-{VICTIM}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's user cache directory")
def test_warm_run_and_a_serving_process_share_the_home_a_relative_xdg_cache_home_leaves(
    tmp_path: Path,
) -> None:
    """The real CLI warms the default bundle under `XDG_CACHE_HOME=rel`; a production process
    started in another folder serves it: the same `~/.cache/warm`, whatever platformdirs."""
    given = tmp_path / "home"
    given.mkdir()
    (tmp_path / "w").mkdir()
    workload = tmp_path / "w" / "scale.py"
    workload.write_text(
        "import numpy as np\nfrom warmcli import Kernel\nDEVICE = 'host'\n"
        "SCALE = Kernel('void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }',"
        " 'scale', 'Pi')\n"
        "def workload(rt):\n    x = rt.upload(np.arange(4, dtype=np.float32))\n"
        "    rt.launch(SCALE, x, 4)\n    return x\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(HOME=str(given), XDG_CACHE_HOME="rel", TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    run = Warm(env)("run", workload, "-q", cwd=tmp_path / "w")
    bundle = given / ".cache" / "warm" / "bundle.warm"
    assert run.returncode == 0 and f"bundle {bundle}: stored 1 new kernel(s)" in run.stdout, run
    serve = (
        f"import sys; sys.path.insert(0, {str(tmp_path / 'w')!r}); import warmcli, scale; "
        "rt = warmcli.runtime('host'); print(rt.read(scale.workload(rt)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", serve],
        env={**env, "WARM_REPORT": "1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "[0. 2. 4. 6.]", done
    assert f"bundle {bundle} served everything: compiled 0 kernels" in done.stderr, done.stderr


def test_warm_help_under_python_oo_still_says_what_each_command_does(tmp_path: Path) -> None:
    """`PYTHONOPTIMIZE=2` (a container's setting) drops docstrings, which Typer takes for a
    command's help. Failed before: `warm --help` listed `run` with no line, and `warm run -h`
    said nothing of what it does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(PYTHONOPTIMIZE="2", PYTHONPATH=str(ROOT))
    warm = Warm(env)
    listed = warm("--help", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    for command, line in (("run", "Run WORKLOAD under CompileOnly"), ("stats", "What a bundle")):
        assert re.search(rf"^ +{command} +{line}", listed.stdout, re.MULTILINE), listed.stdout
    one = warm("run", "-h", cwd=tmp_path)
    assert one.returncode == 0 and "Run WORKLOAD under CompileOnly" in one.stdout, one.stdout
