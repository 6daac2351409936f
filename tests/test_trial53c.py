"""A user's environment (stop 53): every command under locales (C, POSIX, tr_TR.UTF-8,
ISO-8859-1 and -9, made with localedef), terminals (TERM=dumb, NO_COLOR, FORCE_COLOR into a
pipe, COLUMNS 5 to 5000 and no number, a pty of 5 and 0 columns, `| head -1`, /dev/full,
each standard stream closed), homes and folders (HOME unset, a file or unwritable;
WARM_HOME and XDG_CACHE_HOME relative; TMPDIR missing, unwritable, relative, 3,600
characters; a working folder removed under the shell; a read-only tmpfs) and limits (`ulimit
-n` 5 to 64, `-v` 200 MB to 2 GB, `-f` 1 to 100 kB), with bundle, workload and kernel names
of non-UTF-8 bytes, escapes, C1 controls, spaces and a leading dash; `pull` from `python -m
http.server` on 127.0.0.1. The real CLI (forked where the condition survives a fork, else a
started `python -m warmcli`), real SQLite bundles. What it found:
- in a working folder removed under the shell (`mkdir d; cd d; rmdir ../d`), a relative
  path to make (`warm merge -o out.warm`, `warm run w.py -b rel.warm`, `warm pull URL
  rel.warm`) was `warm: error: [Errno 2] No such file or directory`, nothing naming the
  cause, and `merge` and `pull` said it twice (their clean-up of the bundle they had not
  made met the same error and was answered again). The line names the removed working
  folder now, once.
- a bundle named `~/app.warm` where no shell expands it (`--bundle=~/app.warm`, `-o
  '~/m.warm'`, `WARM_BUNDLE=~/app.warm` in a Dockerfile's ENV or a systemd unit) made a
  folder named `~` in the working folder and said `bundle ~/app.warm: stored ...`, which
  reads as the user's home; a production process elsewhere found no bundle, and a later `rm
  -r ~...` typed to clean it up is the user's home. `WARM_HOME=~/h` alike made `./~/h`.
  Each is refused in one line naming `$HOME/...` (and `./~/...` for a folder named so); a
  bundle to read that is there as `./~/...` is still read.
- `warm merge` of more shards than the soft limit on open files (`ulimit -Sn 64`, 80
  shards; a shell's 1,024 for a fleet's 2,000) failed midway, `many/s63.warm: cannot read
  bundle: Too many open files`: a merge holds every input open. The soft limit is raised as
  far as the hard one allows; past that, one line naming `ulimit -Hn` before anything is read.
- a toolchain asked for its version in a translated locale answered in its words: `as
  --version` under `LANG=tr_TR.UTF-8` is `GNU çevirici ...` (binutils' Turkish, as Debian
  installs it), so a `warm run` there into a bundle warmed under `C` built every kernel again
  under a toolchain of its own (`stored 4 new kernel(s)` into a complete bundle), and `warm
  check` named that toolchain. A version probe, and every probe warm parses (`cc -E -v`),
  runs in the C locale now (a line remembered translated before is believed until its
  compiler changes, as warms of other stops sharing the home read it: README says to delete
  `toolchains.json`).
What held is in the stop's report: no escape or raw byte of a bundle's text on any terminal
in any locale, closed and refused streams, read-only folders and every limit tried.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Puts a bundle holding nothing at a path (a copy of one made once): what these
    commands read or merge, at no run's cost."""
    from warmcli.bundle.store import Bundle

    made = tmp_path_factory.mktemp("empty") / "empty.warm"
    Bundle.create(made).close()

    def put(path: Path) -> Path:
        shutil.copyfile(made, path)
        return path

    return put


def _in_removed_folder(warm: Any, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`warm ARGS` started in a working folder removed under its shell (a real process: a
    fork cannot start in a folder that is gone)."""
    script = 'mkdir gone && cd gone && rmdir ../gone && exec "$0" -m warmcli "$@"'
    env = dict(warm.env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        ["sh", "-c", script, sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_removed_working_folder_is_named_once(warm: Any, tmp_path: Path, empty: Any) -> None:
    """`warm merge -o out.warm` there (as `warm run w.py -b rel.warm`, `warm pull URL
    rel.warm`). Before: `warm: error: [Errno 2] No such file or directory`, twice."""
    good = empty(tmp_path / "good.warm")
    done = _in_removed_folder(warm, tmp_path, "merge", "-o", "out.warm", str(good))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "working folder" in lines[0] and "removed" in lines[0], lines
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `HOME` for this module's commands (one: each environment is a forking server)."""
    return tmp_path_factory.mktemp("user")


@pytest.mark.parametrize("output", [("-o", "~/m.warm"), ("--output=~/m.warm",)])
def test_an_argument_with_a_tilde_no_shell_expanded_is_refused(
    warm: Any, tmp_path: Path, empty: Any, user: Path, output: tuple[str, ...]
) -> None:
    """(`warm run w.py --bundle=~/b.warm` alike: the same check.) Before: a folder `~` made
    in the working folder, the bundle in it, `merged 1 bundle(s) into ~/m.warm`, exit 0."""
    good = empty(tmp_path / "good.warm")
    done = warm.with_env(HOME=str(user))("merge", *output, str(good), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and f"name {user}/" in line and "(./~/" in line, line
    assert not (tmp_path / "~").exists() and not list(user.iterdir())


@pytest.mark.parametrize("variable", ["WARM_BUNDLE", "WARM_HOME"])
def test_a_variable_s_tilde_is_the_home(
    warm: Any, tmp_path: Path, empty: Any, user: Path, variable: str
) -> None:
    """`WARM_BUNDLE=~/b.warm`, `WARM_HOME=~/h` (a Dockerfile's ENV): the user's home's, as a
    shell reads them. Before: `~/b.warm: no such bundle` (looked for in `./~`)."""
    folder = user / tmp_path.name  # (this test's own, in the module's home)
    folder.mkdir()
    empty(folder / "bundle.warm")
    named = f"~/{folder.name}" + ("/bundle.warm" if variable == "WARM_BUNDLE" else "")
    done = warm.with_env(HOME=str(user), **{variable: named})("stats", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{folder}/bundle.warm" in done.stdout, done.stdout
    assert not (tmp_path / "~").exists()


def test_a_bundle_that_is_there_in_a_folder_named_tilde_is_still_read(
    warm: Any, tmp_path: Path, empty: Any, user: Path
) -> None:
    (tmp_path / "~").mkdir()
    empty(tmp_path / "~" / "b.warm")
    done = warm.with_env(HOME=str(user))("stats", "~/b.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("hard", [16, 4096])
def test_a_merge_of_more_bundles_than_the_open_file_limit(
    warm: Any, tmp_path: Path, empty: Any, hard: int
) -> None:
    """12 shards under a soft limit of 16 open files (a shell's 1,024 for a fleet's 2,000
    shards, scaled down). Before: `s9.warm: cannot read bundle: Too many open files` midway,
    both. Now the soft limit is raised where the hard one allows, else one line before
    anything is read, naming `ulimit -Hn`."""
    import resource

    shards = [empty(tmp_path / f"s{i}.warm") for i in range(12)]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (16, hard))

    done = subprocess.run(
        [sys.executable, "-m", "warmcli", "merge", "-o", "m.warm", *map(str, shards)],
        cwd=tmp_path,
        env=dict(warm.env, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )
    if hard == 16:
        assert done.returncode == 2 and "at most (ulimit -Hn)" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "m.warm").exists()
    else:
        assert done.returncode == 0, done.stderr
        assert "merged 12 bundle(s) into m.warm" in done.stdout, done.stdout


# A compiler's `--version` that answers in its user's language, as a gettext-translated tool
# does (LANGUAGE first, unless the locale is C; then LC_ALL, LC_MESSAGES, LANG).
TRANSLATED = """#!/bin/sh
case "${LC_ALL:-${LC_MESSAGES:-$LANG}}" in C|POSIX) echo "GNU assembler 2.40"; exit;; esac
case "${LANGUAGE:-${LC_ALL:-${LC_MESSAGES:-$LANG}}}" in
  tr*) echo "GNU \u00e7evirici 2.40";;
  *) echo "GNU assembler 2.40";;
esac
"""


@pytest.mark.parametrize(
    "locale",
    [{"LANG": "tr_TR.UTF-8"}, {"LC_ALL": "tr_TR.UTF-8"}, {"LANG": "en_US.UTF-8", "LANGUAGE": "tr"}],
    ids=["LANG", "LC_ALL", "LANGUAGE"],
)
def test_a_version_line_is_asked_in_the_c_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, locale: dict[str, str]
) -> None:
    """Before: `GNU \u00e7evirici 2.40` under a Turkish locale, a toolchain of its own."""
    from warmcli.backends.version_line import version_line

    tool = tmp_path / "as"
    tool.write_text(TRANSLATED, encoding="utf-8")
    tool.chmod(0o755)
    for name in ("LANG", "LC_ALL", "LC_MESSAGES", "LANGUAGE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in locale.items():
        monkeypatch.setenv(name, value)
    assert version_line("as", str(tool), 30) == "GNU assembler 2.40"


def test_the_real_assembler_s_version_line_is_its_c_locale_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where binutils answers in Turkish here (its translations installed, a tr_TR.UTF-8
    locale generated), warm's line is still its C locale's."""
    from warmcli.backends.version_line import version_line

    where = shutil.which("as")
    turkish = dict(os.environ, LC_ALL="tr_TR.UTF-8")
    if where is None:
        pytest.skip("no assembler")
    said = subprocess.run([where, "--version"], env=turkish, capture_output=True, text=True)
    if said.stdout.startswith("GNU assembler"):
        pytest.skip("as answers in English under tr_TR.UTF-8 here (no translation or locale)")
    monkeypatch.setenv("LC_ALL", "tr_TR.UTF-8")
    assert version_line("as", where, 30).startswith("GNU assembler")
