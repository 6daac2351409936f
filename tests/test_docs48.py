"""README's quick start, run as a new user runs it (docs48).

The README opened with the two make commands, then a 40-line sentence on which kernels share
a compiler unit, before a reader knew how to use warm. It now opens with a quick start: how
to install, a workload, `warm run`, how production loads the bundle, where to look next.
These tests take its fenced blocks exactly as written: the Python ones named by their first
line (`# scale.py`) are written to a fresh folder, and the shell block that runs `warm run`
is run there by bash, `warm` and `python` on `PATH` being this checkout's (the real CLI and
the real C compiler, the host backend). No fakes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

README = ROOT / "README.md"
# GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces `-`.
_DROPPED = re.compile(r"[^\w\- ]")


def _section(title: str) -> str:
    """The README's `## title` section, up to the next `## ` heading."""
    text = README.read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str) -> list[tuple[str, str]]:
    """Each fenced block of `text`: its language and its body."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _files() -> dict[str, str]:
    """The quick start's Python files: each block whose first line is `# NAME.py`."""
    files = {}
    for language, body in _blocks(_section("Quick start")):
        first = body.split("\n", 1)[0]
        if language == "python" and re.fullmatch(r"# \w+\.py", first):
            files[first[2:]] = body
    return files


def _commands() -> str:
    """The quick start's shell block that warms and serves."""
    runs = [b for lang, b in _blocks(_section("Quick start")) if lang == "sh" and "warm run" in b]
    assert len(runs) == 1, runs
    return runs[0]


def _folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh folder holding the quick start's files, and the environment a user who
    installed warm has: `warm` and `python` on `PATH`, a warm home of its own."""
    work = tmp_path / "work"
    work.mkdir()
    for name, body in _files().items():
        (work / name).write_text(body)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, run in (("warm", f'"{sys.executable}" -m warmcli'), ("python", sys.executable)):
        (bin_ / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_ / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(PATH=f"{bin_}:{env['PATH']}", PYTHONPATH=str(ROOT), COLUMNS="200")
    env["WARM_HOME"] = str(tmp_path / "home")
    return work, env


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _quoted(after: str) -> str:
    """The backquoted text the quick start's prose quotes right after `after`."""
    prose = " ".join(_section("Quick start").split())
    return prose.split(after, 1)[1].split("`", 2)[1]


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The quick start's folder after its shell block ran, as written, under bash -e."""
    work, env = _folder(tmp_path_factory.mktemp("quick"))
    done = _run(["bash", "-e", "-c", _commands()], work, env)
    return work, env, done


def test_the_quick_start_runs_as_written(warmed: Any) -> None:
    """`warm run`, `warm stats` and `WARM_REPORT=1 python serve.py`, each as written: warm
    stores and verifies the kernel, production reads the result back and compiled nothing,
    each saying the line the README quotes."""
    work, _env, done = warmed
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"scale.py", "serve.py"} <= set(_files()), _files()
    assert (work / "app.warm").is_file()
    assert _quoted("`warm run` ends with") in done.stdout, done.stdout
    assert re.search(r"^ *host \S+ +scale ", done.stdout, flags=re.MULTILINE), done.stdout
    assert done.stdout.rstrip().endswith("[0. 2. 4. 6.]"), done.stdout
    assert _quoted("and `serve.py` with") in done.stderr.split("\n"), done.stderr
    assert "Traceback" not in done.stderr


def test_serving_through_warm_bundle_and_cold_compute_the_same(warmed: Any) -> None:
    """serve.py's comment: leave out its `use_bundle` line and set `WARM_BUNDLE=app.warm`,
    served as much; with no bundle at all it compiles `scale` itself, the same bytes out."""
    work, env, done = warmed
    assert done.returncode == 0, done.stderr
    source = (work / "serve.py").read_text()
    line = next(x for x in source.splitlines() if x.startswith("warmcli.use_bundle("))
    assert "WARM_BUNDLE=app.warm" in line, line
    (work / "serve_env.py").write_text(source.replace(line, ""))
    report = dict(env, WARM_REPORT="1")
    served = _run([sys.executable, "serve_env.py"], work, dict(report, WARM_BUNDLE="app.warm"))
    assert served.returncode == 0, served.stderr
    assert "served everything: compiled 0 kernels" in served.stderr, served.stderr
    cold = _run([sys.executable, "serve_env.py"], work, report)
    assert cold.returncode == 0, cold.stderr
    assert "compiled 1 kernel(s)" in cold.stderr and "kernel scale on host" in cold.stderr
    assert cold.stdout == served.stdout == "[0. 2. 4. 6.]\n", (cold.stdout, served.stdout)


def test_the_install_block_names_only_extras_warm_has() -> None:
    """Each `pip install 'warmcli[X]'` of the quick start, and each extra its prose names,
    is one of pyproject.toml's."""
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    section = _section("Quick start")
    named = set(re.findall(r"warmcli\[(\w+)\]", section))
    named |= set(
        re.findall(r"Other extras: (.*?)\.\n", section, flags=re.DOTALL)[0].split("`")[1::2]
    )
    named -= {"warm run --dask"}
    assert named and named <= extras, (named, extras)
    assert {"cuda", "nvrtc"} <= named


def test_a_new_user_finds_the_essentials_in_the_first_120_lines() -> None:
    """What warm does, how to install it, a workload, `warm run`, how production loads the
    bundle and where to look next, all before line 120."""
    head = "\n".join(README.read_text().splitlines()[:120])
    for needed in (
        "makes GPU processes start hot",
        "pip install 'warmcli[cuda]'",
        "pip install 'warmcli[nvrtc]'",
        "def workload(rt):",
        "warm run scale.py",
        "warmcli.use_bundle(",
        "WARM_BUNDLE=app.warm",
        "## Where to look next",
    ):
        assert needed in head, needed


def test_every_link_of_the_readme_leads_somewhere() -> None:
    """Each `](#anchor)` is a heading's anchor, each `](path)` a file of the checkout."""
    text = README.read_text()
    headings = re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)
    anchors = {_DROPPED.sub("", h.strip().lower()).replace(" ", "-") for h in headings}
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert "how-warm-run-works" in anchors and "what-shares-a-compiler-unit" in anchors
    for link in links:
        if link.startswith("#"):
            assert link[1:] in anchors, link
        elif "://" not in link:
            assert (ROOT / link).exists(), link
