"""review42f: `tests/forked_cli.py`'s forked commands against real `python -m warmcli`
starts, and trial42c's `warm clean --tune` and WARM_REPORT tune line against hostile input.

Forked against started: each case runs one command both ways and compares exit code,
stdout and stderr byte for byte (errors, `--json`, escapes, an ASCII locale, a narrow
terminal, NO_COLOR); a workload run by `warm run` sees the same `sys.path` and the same
modules imported either way (a workload named as a module warm imported early would
otherwise pass vacuously forked, as `test_readme36`'s `decimal.py`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

ASCII = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
CASES: list[tuple[str, tuple[str, ...], dict[str, str]]] = [
    ("version", ("--version",), {}),
    ("help", ("--help",), {}),
    ("no-args", (), {}),
    ("stats-help", ("stats", "--help"), {}),
    ("unknown", ("frobnicate",), {}),
    ("missing-arg", ("stats",), {}),
    ("bad-option-json", ("stats", "{bundle}", "--nope", "--json"), {}),
    ("no-file-json", ("stats", "{tmp}/none.warm", "--json"), {}),
    ("escaped", ("stats", "{tmp}/a\x1b[31m\nb\u2192.warm"), {}),
    ("stats", ("stats", "{bundle}"), {}),
    ("stats-json", ("stats", "{bundle}", "--json"), {}),
    ("verify", ("verify", "{bundle}"), {}),
    ("garbage-json", ("stats", "{tmp}/garbage.warm", "--json"), {}),
    ("ascii-arg", ("stats", "{tmp}/a\u2192.warm"), ASCII),
    ("ascii-help", ("--help",), ASCII),
    ("ascii-stats", ("stats", "{bundle}"), ASCII),
    ("ascii-home", ("stats", "{bundle}"), {**ASCII, "WARM_HOME": "{tmp}/h\u00e9"}),
    ("columns-40", ("stats", "{bundle}"), {"COLUMNS": "40"}),
    ("columns-40-help", ("--help",), {"COLUMNS": "40"}),
    ("no-color", ("verify", "{bundle}"), {"NO_COLOR": "1"}),
    ("bad-variable", ("stats", "{bundle}"), {"WARM_STRICT": "maybe"}),
    ("clean-dry-json", ("clean", "{bundle}", "--older-than", "1d", "--dry-run", "--json"), {}),
]


@pytest.fixture(scope="module")
def bundle(made_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("r42f")
    shutil.copyfile(made_once / "good.warm", base / "b.warm")
    (base / "garbage.warm").write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)
    return base / "b.warm"


def both(warm: Warm, forked: Any, *args: str | Path, cwd: Path | None = None) -> list[Any]:
    """The command started (`python -m warmcli`) and forked: exit code, stdout, stderr."""
    real = warm(*args, **({"cwd": cwd} if cwd else {}))
    fork = forked(warm)(*args, cwd=cwd)
    return [(p.returncode, p.stdout, p.stderr) for p in (real, fork)]


@pytest.mark.parametrize("name,args,extra", CASES, ids=[c[0] for c in CASES])
def test_a_forked_command_says_what_a_started_one_does(
    warm: Warm, forked: Any, bundle: Path, name: str, args: tuple[str, ...], extra: dict[str, str]
) -> None:
    """Byte for byte, as each reads a command's outcome. Before: `warm --help` listed
    `check` last forked (the server imported each command module itself, and `check`'s
    registration loaded the others first); an argument or a variable no ASCII locale can
    encode was a `UnicodeEncodeError` traceback forked (the server took the test's text,
    not the bytes a started process is given), the refusal's one line started."""
    given = {"tmp": bundle.parent, "bundle": bundle}
    warm.env.update({k: v.format(**given) for k, v in extra.items()})
    real, fork = both(warm, forked, *(a.format(**given) for a in args))
    assert fork == real


PROBE = """
import json, os, sys
def workload(rt):
    with open(os.environ["PROBE_OUT"], "a") as out:
        out.write(json.dumps({"path": sys.path[:3], "modules": sorted(sys.modules)}) + "\\n")
"""


def test_a_forked_run_shows_its_workload_what_a_started_one_does(
    warm: Warm, forked: Any, tmp_path: Path
) -> None:
    """`sys.path` and `sys.modules` as a workload of `warm run` sees them, forked and
    started. Before: forked, the path's second entry was '' (the server's `python -c`), not
    the working folder (`python -m`'s), and `decimal`, `fractions`, `socket`, `base64`,
    rich's tables and 50 of warm's modules were imported before the workload (the server
    imported every command's modules): `test_readme36`'s workload named `decimal.py` passed
    forked even with the bug it guards (warm's tuning importing `statistics`) back."""
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "cwd").mkdir()
    views = []
    for way in ("real", "forked"):
        warm.env["PROBE_OUT"] = str(tmp_path / way)
        run = warm if way == "real" else forked(warm)
        done = run("run", tmp_path / "probe.py", "-b", tmp_path / f"{way}.warm", "-q",
                   cwd=tmp_path / "cwd")  # fmt: skip
        assert done.returncode == 0, done.stderr
        views.append([json.loads(line) for line in (tmp_path / way).read_text().splitlines()])
    (real, *_), (fork, *_) = views
    assert fork["path"] == real["path"]
    assert sorted(set(fork["modules"]) ^ set(real["modules"])) == []
