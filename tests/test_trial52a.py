"""A new user's trial (stop 52) with the README alone: every command line and example of it
run as written in a scratch folder (the quick start, the trust walk-through, shards and
`warm merge`, bundles over plain `http://` on this machine, `--pycuda` and `--arch`
pre-builds), every `WARM_*` variable and every option against `warm COMMAND --help` and the
code's defaults, and `python -m warmcli` against `warm` (exit codes, stderr, `--version`,
`--help`, completion, Ctrl-C and SIGTERM). The real CLI (forked), real NVRTC, real SQLite
bundles. What it found:
- `--compiler "nvrtc "` (a name with a space around it, as a CI variable pasted with one
  hands it over) passed the check of the name, which strips it, and then ran nvcc: the
  choice compared the name unstripped, `" nvrtc" != "nvrtc"`, while saying `--compiler
  nvrtc` was why (`warm run --dask` gave it to no worker, each choosing its own). The name
  is stripped where it is read, as `WARM_CUDA_COMPILER` always was.
- `--compiler auto` and `WARM_CUDA_COMPILER=auto` were taken (the default choice, over the
  variable's) where the README's usage, the variable's row, `--help` and the error for an
  unknown name all said `nvrtc` or `nvcc` only, and "any other name is refused". Each says
  `auto` now.
- `warm --help` listed `WARM_TRUSTED_KEYS`, `WARM_REMOTE_MAX_SIZE` and `WARM_REMOTE_DEADLINE`
  after "in production," only, where the README's table has `warm run`, `verify`, `check`,
  `merge` and `pull` honour the keys, and every command naming a URL (`push` too) the
  bounds: a user reading the help would not set them for a command. They are listed with the
  commands' variables now, and the production list says "in production only".
- `warm verify --help` and `warm check --help` named their BUNDLE a path only, where the
  README's usage reads `warm verify [BUNDLE|URL]` (and `check`), and both take an
  `https://` or `s3://` URL: `warm stats --help` alone said so. Each says it now, and
  `clean` and `sign`, which refuse a URL, do not.
- a `warm run` started with SIGINT ignored (a background job of a script, `warm run w.py &`,
  whose shell ignores it there so that a Ctrl-C at the terminal stops the script only) was
  stopped by it all the same, `warm: interrupted`, exit 130: the entry point answered
  SIGINT whatever it was started with, where it leaves an ignored SIGTERM and SIGHUP
  ignored (`nohup`), as the README says, the worker leaves all three (`_heeded`: "as Python
  leaves them"), and so did warm before the CLI was imported. It stays ignored now.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.choose import check_name
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.backends.toolchain import ToolchainError
from warmcli.cli.app import ENV_HELP
from warmcli.cli.common import CompilerOpt

README = (ROOT / "README.md").read_text()


def _takes(name: str) -> bool:
    try:
        check_name(name)
    except ToolchainError:
        return False
    return True


@pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed (make install has it)")
def test_a_compiler_named_with_spaces_around_it_is_that_compiler(warm: Warm) -> None:
    """`warm devices --compiler " nvrtc "` names NVRTC as the CUDA compiler, as plain
    `--compiler nvrtc` does (it was nvcc, found by PATH, "because" `--compiler  nvrtc`)."""
    proc = warm("devices", "--compiler", " nvrtc ", "--json")
    assert proc.returncode == 0, proc.stderr
    (cuda,) = [c for c in json.loads(proc.stdout)["compilers"] if c["device"] == "cuda"]
    assert (cuda["compiler"], cuda["why"]) == ("nvrtc", "--compiler nvrtc"), cuda


def test_every_cuda_compiler_name_warm_takes_is_documented(
    warm: Warm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The names `--compiler` takes are the README's usage lines', its `WARM_CUDA_COMPILER`
    row's, `--help`'s and the refusal's; `auto` is the default choice, over the variable."""
    monkeypatch.delenv("WARM_CUDA_COMPILER", raising=False)
    taken = {n for n in ("nvrtc", "nvcc", "auto", "default", "NVRTC") if _takes(n)}
    assert taken == {"nvrtc", "nvcc", "auto"}
    usages = re.findall(r"\[--compiler ([a-z|]+)\]", README)
    assert usages and all(set(u.split("|")) == taken for u in usages), usages
    row = next(r for r in README.splitlines() if r.startswith("| `WARM_CUDA_COMPILER` |"))
    variable = ENV_HELP.split("WARM_CUDA_COMPILER (", 1)[1].split(")", 1)[0]
    refusal = warm("devices", "--compiler", "foo")
    assert refusal.returncode == 2
    for name in taken:
        assert f"`{name}`" in row, name
        said = (CompilerOpt.help, variable, refusal.stderr)
        assert all(re.search(rf"\b{name}\b", text) for text in said), (name, said)
    if find_nvrtc() is not None:
        warm.env = {**warm.env, "WARM_CUDA_COMPILER": "nvcc"}
        proc = warm("devices", "--compiler", "auto", "--json")
        assert proc.returncode == 0, proc.stderr
        (cuda,) = [c for c in json.loads(proc.stdout)["compilers"] if c["device"] == "cuda"]
        assert cuda["compiler"] == "nvrtc", cuda


@pytest.mark.parametrize(
    ("name", "value", "command"),
    [
        ("WARM_TRUSTED_KEYS", ":", ("check", "B")),
        ("WARM_REMOTE_MAX_SIZE", "abc", ("stats", "http://127.0.0.1:9/b.warm")),
        ("WARM_REMOTE_DEADLINE", "abc", ("pull", "http://127.0.0.1:9/b.warm", "B")),
    ],
)
def test_a_variable_a_command_reads_is_not_listed_as_productions_only(
    warm: Warm, tmp_path: Path, name: str, value: str, command: tuple[str, ...]
) -> None:
    """A command reads it (its bad value is refused, named, before anything is opened), so
    `warm --help` lists it beside the commands' variables, not after "in production only"."""
    warm.env = {**warm.env, name: value}
    proc = warm(*(str(tmp_path / "b.warm") if a == "B" else a for a in command))
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert not list(tmp_path.iterdir())
    assert name in proc.stderr or "trusted keys" in proc.stderr, proc.stderr
    commands, production = ENV_HELP.split("\n\n", 1)[0].split("; in production only, ")
    assert name in commands and name not in production, ENV_HELP


def test_a_bundle_argument_is_a_url_in_help_where_the_readme_says_so(warm: Warm) -> None:
    """The README's usage lines: `[BUNDLE|URL]` for the commands that read a URL's bundle,
    `[BUNDLE]` for those that refuse one; each command's `--help` names its BUNDLE alike."""
    usage = README.split("## Commands", 1)[1].split("```", 2)[1]
    forms = dict(re.findall(r"^warm (\w+) \[(BUNDLE(?:\|URL)?)\]", usage, re.MULTILINE))
    assert forms == {
        "stats": "BUNDLE|URL",
        "verify": "BUNDLE|URL",
        "check": "BUNDLE|URL",
        "sign": "BUNDLE",
        "clean": "BUNDLE",
    }, forms
    for command, form in forms.items():
        proc = warm(command, "--help")
        assert proc.returncode == 0, proc.stderr
        said = proc.stdout.split("Arguments:", 1)[1].split("Options:", 1)[0]
        assert ("https://" in said) == (form == "BUNDLE|URL"), (command, said)
    refused = warm("clean", "http://127.0.0.1:9/b.warm")
    assert refused.returncode == 2 and "is a URL, which is read-only" in refused.stderr


def _ignoring_ctrl_c() -> None:  # (in the child, before it runs Python: as a shell's `&`)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_ctrl_c_warm_was_started_ignoring_stays_ignored(warm: Warm, tmp_path: Path) -> None:
    """`warm run` started with SIGINT ignored, sent one as its first pass runs (a terminal's
    Ctrl-C reaches a script's background job so), runs to its end, exit 0, as Python, its
    own worker and an ignored SIGTERM or SIGHUP leave it; it was `warm: interrupted`, 130."""
    mark = tmp_path / "started"
    script = tmp_path / "w.py"
    script.write_text(
        "import pathlib, time\n\ndef workload(rt):\n"
        f"    pathlib.Path({str(mark)!r}).touch()\n    time.sleep(0.3)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "warmcli", "run", str(script), "-q", "-b", tmp_path / "b.warm"],
        env=warm.env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_ignoring_ctrl_c,  # (the child's only, set before exec)
    )
    deadline = time.monotonic() + 60
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)  # the process group, as a terminal sends it
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "interrupted" not in err and "the bundle is complete" in out, (out, err)


def test_the_help_gives_exit_1_for_what_the_readme_gives_it() -> None:
    """Each cause of exit 1 in the README's table is in `warm --help`'s exit codes."""
    (row,) = [r for r in README.splitlines() if r.startswith("| 1 |")]
    said = ENV_HELP.split("Exit codes:", 1)[1].split("; 2 ", 1)[0]
    causes = {"`verify`": "verify", "`merge`": "merge", "`check`": "check", "`diff`": "diff"}
    causes["stdout's reader gone"] = "stdout's reader"
    assert all(cause in row for cause in causes), row
    assert all(word in said for word in causes.values()), said


def test_the_readme_names_every_row_make_bench_writes() -> None:
    """Each row `python -m bench` writes (`bench.suite.FAMILIES`) is named in the README's
    Development section, as itself or by a pattern it lists (`dispatch_*`)."""
    from bench.suite import FAMILIES

    section = README.split("## Development", 1)[1]
    named = set(re.findall(r"`([a-z_]+\*?)`", section))
    patterns = [n[:-1] for n in named if n.endswith("*")]
    rows = {n for _, names in FAMILIES.values() for n in names}
    unnamed = {r for r in rows if r not in named and not any(map(r.startswith, patterns))}
    assert not unnamed, sorted(unnamed)
