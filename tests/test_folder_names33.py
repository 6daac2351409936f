"""A bundle to write named with a trailing `/` names a folder.

`warm run -b newdir/`, `warm merge ... -o out/` and `warm pull URL dl/` (also through
`WARM_BUNDLE=dir/`) made a FILE named `newdir` (a path drops the `/`), where the user meant
a folder: each is one line and exit 2 now, and nothing is made. An empty PATH to pull is
refused as an empty bundle name is, not taken as the working folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def _refused(proc: object, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr  # type: ignore[attr-defined]
    lines = proc.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ("run", str(EXAMPLES / "matmul_host.py"), "-b", "newdir/", "-q"),
        ("merge", "in.warm", "-o", "newdir/"),
        ("pull", "http://127.0.0.1:9/x.warm", "newdir/"),
    ],
)
def test_a_file_to_write_ending_in_a_slash_is_refused(
    warm: Warm, tmp_path: Path, command: tuple[str, ...]
) -> None:
    from test_format3 import _tune

    from warmcli.bundle.store import Bundle

    with Bundle.create(tmp_path / "in.warm") as bundle:
        bundle.put(tunes=[_tune(0)])
    _refused(warm(*command, cwd=tmp_path), "newdir/", "names a folder")
    assert not (tmp_path / "newdir").exists()


def test_warm_bundle_ending_in_a_slash_is_refused(warm: Warm, tmp_path: Path) -> None:
    env = dict(warm.env, WARM_BUNDLE="envdir" + os.sep)
    done = Warm(env)("run", EXAMPLES / "matmul_host.py", "-q", cwd=tmp_path)
    _refused(done, "WARM_BUNDLE=envdir/", "names a folder")
    assert not (tmp_path / "envdir").exists()


def test_an_empty_pull_path_is_refused(warm: Warm, tmp_path: Path) -> None:
    _refused(warm("pull", "http://127.0.0.1:9/x.warm", "", cwd=tmp_path), "empty")
