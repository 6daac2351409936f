"""A new user's first minutes with `warm`, reading only `--help`: what they type first.

`-h` is `--help` (on `warm` and on every command); an option of a command given before it
(`warm --json stats`) or with no command (`warm --json`), and warm's own after a command
(`warm stats --version`), are one line saying where they go, not Click's guesses; `warm
help`, `warm version` and `warm STATS` point at what was meant (and Tab-completion after
them still lists the commands); each `--help` names an option's value and an argument as
README's synopsis does (`--arch SM_XX`, `-o, --output OUT`, `A`, `B`), never the parser's
types, and lists exactly the options of the synopsis; a missing argument is named as the
usage line names it, and an option missing its value names the command's help; an empty
path is said empty (not `.`); an option's value that is one of the command's options (`-b
-q`) is refused as missing; a typo of an option after the workload (`--bundel`) is named
as one; `-m w.py` says to drop `-m`, and `w` for `w.py` names the file; an option typed
with a typographic dash (`—json`) is named so; a malformed `--ptx` is refused on a host run
too, and a malformed `WARM_SHARD` named as the variable; `warm keygen ci.pub` is refused.
Every test runs the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import ForkedWarm, forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.cli.app import COMMANDS

MATMUL = EXAMPLES / "matmul_host.py"


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> dict[str, str]:
    """`warm -h` and each command's `-h` (their stdout; each exits 0), run once for the
    module (each forked, as `forked_warm`'s commands are): "" is warm's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path_factory.mktemp("home")), COLUMNS="200")
    shown = {}
    for command in ["", *sorted(COMMANDS)]:
        proc = ForkedWarm(Warm(env), forking_servers)(*([command] if command else []), "-h")
        assert proc.returncode == 0 and "-h, --help" in proc.stdout, (command, proc.stderr)
        shown[command] = proc.stdout
    return shown


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), proc.stderr
    return str(lines[0])


def test_dash_h_is_help_on_warm_and_every_command(warm: Warm) -> None:
    for args in ([], ["stats"], ["run", "w.py"]):  # (every command's -h: the test below)
        short, long = warm(*args, "-h"), warm(*args, "--help")
        assert long.returncode == 0, long.stderr
        assert (short.returncode, short.stdout, short.stderr) == (0, long.stdout, ""), args
        assert "-h, --help" in short.stdout, args


def test_a_commands_option_before_the_command_says_where_it_goes(warm: Warm) -> None:
    proc = warm("--json", "stats")
    line = _one_line(proc)
    assert "--version" not in line, line  # (Click's guess: warm's one option)
    assert "--json is an option of warm stats: give it after the command" in line, line
    assert line.endswith("(see warm stats --help)"), line
    assert json.loads(proc.stdout)["exit"] == 2
    line = _one_line(warm("-q", "run", "w.py"))
    assert "-q is an option of warm run: give it after the command" in line, line
    line = _one_line(warm("--bogus", "stats"))  # no command's option: as before
    assert "No such option: --bogus" in line and "warm --help" in line, line
    line = _one_line(warm("--explain", "matmul", "stats"))  # one taking a value
    assert "--explain is an option of warm stats" in line, line
    line = _one_line(warm("--force", "stats"))  # another command's option, not stats'
    assert "No such option: --force" in line, line
    line = _one_line(warm("--json"))  # no command at all
    assert "--json is an option of every command: give a command, then --json" in line, line
    line = _one_line(warm("--force"))
    assert "--force is an option of warm merge, pull, push: give a command, then --force" in line


def test_help_names_values_and_arguments_as_the_readme_synopsis(helps: dict[str, str]) -> None:
    said = {
        "run": [
            "[WORKLOAD]",
            "-m, --module MODULE",
            "-b, --bundle PATH",
            "--arch SM_XX",
            "-j, --jobs N",
            "--compile-timeout S",
            "--shard I/N",
            "--dask SCHEDULER",
            "--dask-env NAME",
            "-k, --key KEY",
            "--entry NAME",
            "--nvcc PATH",
            "--ptx COMPUTE_XX",
            "--compiler NAME",
            "-d, --device DEVICE",
        ],
        "stats": ["[BUNDLE]", "--explain OPERATION"],
        "verify": ["-w, --workload WORKLOAD", "-m, --module MODULE"],
        "check": ["--driver X.Y", "--arch SM_XX"],
        "merge": ["BUNDLES...", "-o, --output OUT", "-k, --key KEY"],
        "push": ["BUNDLE URL"],
        "pull": ["URL [PATH]"],
        "sign": ["-k, --key KEY"],
        "keygen": ["KEY"],
        "diff": ["A B"],
        "clean": ["--older-than AGE", "--max-size SIZE"],
    }
    for command in sorted(COMMANDS):
        text = helps[command]
        for parsers in ("<str>", "<path>", "<list[str]>", "<int range>", "<float range>"):
            assert parsers not in text, (command, parsers, text)
        for shown in said.get(command, []):
            assert shown in text, (command, shown, text)


def test_a_missing_argument_is_named_as_the_usage_line_names_it(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "a.warm"
    assert "Missing argument 'B'" in _one_line(warm("diff", bundle))
    assert "Missing argument 'URL'" in _one_line(warm("push", bundle))
    assert "Missing argument 'KEY'" in _one_line(warm("keygen"))
    assert "Missing argument 'BUNDLES...'" in _one_line(warm("merge", "-o", bundle))


def test_an_empty_path_is_said_empty_not_taken_as_the_working_folder(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run ""` said `.: is a directory, not a workload file` (an empty path read as
    `.`); `warm keygen ""` that `.` exists; `warm sign B -k ""` that `.` is no key."""
    for args, named in [
        (["run", ""], "'WORKLOAD'"),
        (["verify", tmp_path / "a.warm", "-w", ""], "'--workload' / '-w'"),
        (["keygen", ""], "'KEY'"),
        (["sign", tmp_path / "a.warm", "-k", ""], "'--key' / '-k'"),
        (["push", "", "s3://bucket/key"], "'BUNDLE'"),
    ]:
        line = _one_line(warm(*args))
        assert f"Invalid value for {named}: the path is empty" in line, (args, line)
        assert "'.'" not in line and ".:" not in line, line


def test_a_malformed_ptx_is_refused_on_a_host_run_too(warm: Warm, tmp_path: Path) -> None:
    """`warm run w.py --ptx bogus` (or `--ptx ""`) ran a host workload as if it were not
    given, where a CUDA run refuses it: refused at once, nothing written."""
    bundle = tmp_path / "b.warm"
    for ptx in ("bogus", "", "sm_90"):
        line = _one_line(warm("run", MATMUL, "-b", bundle, "--ptx", ptx, "-q"))
        assert f"--ptx {ptx!r} is not a virtual architecture: expected compute_XX" in line
        assert not bundle.exists()


def test_warms_own_option_after_a_command_says_where_it_goes(warm: Warm) -> None:
    """`warm stats --version` said `No such option: --version (Possible options: --json)`."""
    for args in (["stats", "--version"], ["run", "--version"], ["diff", "--install-completion"]):
        line = _one_line(warm(*args))
        option = args[1]
        assert f"{option} is an option of warm itself: warm {option}" in line, line
        assert "Possible options" not in line, line


def test_a_typo_of_an_option_after_the_workload_names_the_option(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run w.py --bundel x.warm` (the usual place: after the workload) said only that a
    workload takes no arguments, where before the workload Click suggests `--bundle`: a close
    match of the command's own option is named; `--n 8` (no close match) is as before."""
    bundle = tmp_path / "x.warm"
    for args, typo, meant in [
        (["run", MATMUL, "--bundel", bundle], "--bundel", "--bundle"),
        (["run", MATMUL, "--jsn"], "--jsn", "--json"),
        (["verify", bundle, "-w", MATMUL, "--quite"], "--quite", "--quiet"),
        (["run", MATMUL, "--arhc=sm_90"], "--arhc", "--arch"),
    ]:
        line = _one_line(warm(*args))
        assert f"warm {args[0]} takes no {typo}: did you mean {meant}?" in line, line
        assert not bundle.exists()
    line = _one_line(warm("run", MATMUL, "--n", "8"))
    assert "warm run takes no --n, and a workload takes no arguments" in line, line
    assert "did you mean" not in line, line


def test_help_and_version_as_commands_point_at_the_options(warm: Warm) -> None:
    """`warm version` said `Did you mean 'verify'?`, `warm help` and `warm help run` only
    `No such command 'help'`, `warm STATS` suggested nothing: each names what was meant."""
    for args, said in [
        (["version"], "warm has no 'version' command: warm --version"),
        (["help"], "warm has no 'help' command: warm --help"),
        (["help", "run"], "warm has no 'help' command: warm run --help"),
        (["STATS", "a.warm"], "No such command 'STATS'. Did you mean 'stats'?"),
    ]:
        line = _one_line(warm(*args))
        assert said in line, (args, line)
        assert "verify" not in line, line


def test_a_file_given_as_a_module_says_to_drop_the_m(warm: Warm, tmp_path: Path) -> None:
    """`warm run -m w.py` said `w.py: no such workload module (__path__ attribute not found
    on 'w' while trying to find 'w.py'; ...)` (Python's own `-m w.py` says to try `w`)."""
    (tmp_path / "w.py").write_text(MATMUL.read_text())
    bundle = tmp_path / "b.warm"
    for args in (["run", "-m", "w.py", "-b", bundle], ["verify", bundle, "-m", "w.py"]):
        line = _one_line(warm(*args, cwd=tmp_path))
        assert "w.py: no such workload module" in line, line
        assert "a .py file is no module name: give the file itself, not -m, or -m w" in line
        assert "__path__" not in line, line
        if args[0] == "run":  # nothing made; then a bundle for verify to replay over
            assert not bundle.exists()
            assert warm("run", "w.py", "-b", bundle, "-q", cwd=tmp_path).returncode == 0


def _synopsis() -> dict[str, str]:
    """README's `## Commands` block: each command's synopsis lines (`--version` and the other
    lines of `warm` itself under "")."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("## Commands\n\n```\n", 1)[1].split("```", 1)[0]
    lines: dict[str, str] = {}
    command = ""
    for line in block.splitlines():
        if line.startswith("warm "):
            command = line.split()[1]
            command = "" if command.startswith("-") else command
        lines[command] = lines.get(command, "") + line.split("#")[0] + "\n"
    return lines


def test_every_option_of_the_help_is_in_the_readme_synopsis_and_back(
    helps: dict[str, str],
) -> None:
    """`warm --help` lists --show-completion, which README's synopsis left out: every long
    option of each `--help` is in the command's synopsis lines, and each option there in
    its `--help`."""
    synopsis = _synopsis()
    assert set(synopsis) == {"", *COMMANDS}, sorted(synopsis)
    for command, text in synopsis.items():
        shown = helps[command]
        listed = set(re.findall(r"(?m)^ +(?:-\w, )?(--[a-z][a-z-]*)", shown.split("Options:")[1]))
        for option in sorted(listed - {"--help"}):
            short = re.search(rf"(-\w), {option}\b", shown)
            said = (option, *([short.group(1)] if short else []))
            assert any(re.search(rf"(?<![\w-]){o}(?![\w-])", text) for o in said), (command, option)
        for option in set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", text)):
            assert re.search(rf"(?<![\w-]){option}(?![\w-])", shown), (command, option)


def test_keygen_refuses_a_private_key_named_as_a_public_one(warm: Warm, tmp_path: Path) -> None:
    """`warm keygen ci.pub` wrote the private key to ci.pub (and the public to ci.pub.pub): a
    file anyone would take for the public key, to share or drop in WARM_TRUSTED_KEYS."""
    line = _one_line(warm("keygen", tmp_path / "ci.pub"))
    assert "ci.pub: a private key named .pub passes for a public one: name it without" in line
    assert list(tmp_path.iterdir()) == []
    assert warm("keygen", tmp_path / "ci").returncode == 0  # as before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ci", "ci.pub"]


def test_completion_after_help_lists_the_commands_as_after_any_word(warm: Warm) -> None:
    """Tab after `warm help ` printed `warm: error: warm has no 'help' command` into the
    command line being typed: completion resolves nothing, as Click's does."""
    env = dict(warm.env, _WARM_COMPLETE="complete_bash", COMP_CWORD="2")
    for words in ("warm help ", "warm version ", "warm STATS "):
        proc = subprocess.run(
            [sys.executable, "-m", "warmcli"],
            env=dict(env, COMP_WORDS=words),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "error" not in proc.stdout + proc.stderr, (words, proc.stdout, proc.stderr)
        assert "stats" in proc.stdout.split(), (words, proc.stdout)


def test_an_option_missing_its_value_names_the_commands_help(warm: Warm) -> None:
    """`warm stats B --explain` said `Option '--explain' requires an argument. (see warm
    --help)`, where every other usage error of a command names that command's help."""
    for args in (["stats", "a.warm", "--explain"], ["run", "w.py", "-b"], ["merge", "a", "-o"]):
        line = _one_line(warm(*args))
        assert f"Option '{args[-1]}' requires an argument." in line, line
        assert line.endswith(f"(see warm {args[0]} --help)"), line


def test_an_option_given_as_an_options_value_is_refused(warm: Warm, tmp_path: Path) -> None:
    """`warm run w.py -b -q` warmed into a bundle named `-q` (and `-q.lock`), `warm merge A
    -o --force` wrote `--force`: a value that is one of the command's own options is a value
    forgotten, refused before anything is written."""
    for args in (
        ["run", MATMUL, "-b", "-q"],
        ["merge", MATMUL, "-o", "--force"],
        ["stats", "a.warm", "--explain", "--json"],
        ["sign", "a.warm", "-k", "--json"],
    ):
        proc = warm(*args, cwd=tmp_path)
        line = _one_line(proc)
        assert f"{args[-1]} is an option of warm {args[0]}: the value is missing" in line, line
        assert line.startswith(f"warm: error: Invalid value for '{args[-2]}'") or (
            f"/ '{args[-2]}'" in line
        ), line
        assert f"(see warm {args[0]} --help)" in line, line
        assert list(tmp_path.iterdir()) == [], args
    line = _one_line(warm("run", "-b", "-x.warm", "-q", "nothere.py", cwd=tmp_path))
    assert "no such workload file" in line, line  # (a name beginning with - is still one)


def test_a_bad_warm_shard_is_named_as_the_variable(warm: Warm, tmp_path: Path) -> None:
    """`WARM_SHARD=bad warm run w.py` said `shard 'bad' is not I/N`, naming no variable, for
    a user who gave no --shard (RANK=5 is named: `RANK=5 is outside 0..1`)."""
    bundle = tmp_path / "b.warm"
    for value, said in (("bad", "is not I/N"), ("0/0", "N must be at least 1")):
        proc = warm.with_env(WARM_SHARD=value)("run", MATMUL, "-b", bundle, "-q", timeout=120)
        line = _one_line(proc)
        assert f"WARM_SHARD {value!r}" in line and said in line, line
        assert not bundle.exists()
    line = _one_line(warm("run", MATMUL, "-b", bundle, "--shard", "bad"))
    assert "shard 'bad' is not I/N" in line, line  # --shard's: as before


def test_an_option_typed_with_a_typographic_dash_is_named(warm: Warm, tmp_path: Path) -> None:
    """`warm stats B —json` (an em dash, pasted from a page that set `--` as one) said `Got
    unexpected extra argument(s) (—json)`, `warm stats —json` that `—json` is no bundle, and
    `warm run w.py –b x.warm` that a workload takes no arguments."""
    em = "\u2014json: its dash is em dash, not '-': type --json"
    for args, said in [
        (["stats", "a.warm", "\u2014json"], em),
        (["stats", "\u2014json"], em),
        (["run", MATMUL, "\u2013b", "x.warm"], "\u2013b: its dash is en dash, not '-': type -b"),
        (["merge", "a", "\u2212\u2212output=o"], "its dash is minus sign, not '-': type --output"),
    ]:
        line = _one_line(warm(*args, cwd=tmp_path))
        assert said in line, (args, line)
    assert list(tmp_path.iterdir()) == []


def test_a_workload_named_without_its_py_names_the_file(warm: Warm, tmp_path: Path) -> None:
    """`warm run w` beside w.py said only `w: no such workload file`."""
    (tmp_path / "w.py").write_text(MATMUL.read_text())
    line = _one_line(warm("run", "w", "-b", tmp_path / "b.warm", cwd=tmp_path))
    assert "w: no such workload file (w.py is one: name it whole)" in line, line
    assert not (tmp_path / "b.warm").exists()
    line = _one_line(warm("run", "nothere", cwd=tmp_path))
    assert line.endswith("nothere: no such workload file"), line  # as before
