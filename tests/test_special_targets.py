"""A merge's OUT and a pull's PATH that exist and are no regular file (a FIFO, a device such
as /dev/null, or a link to one) are refused, `--force` or not: `--force` replaces a file,
it never turns a device or a pipe into a bundle (as root, `-o /dev/null --force` replaced
the system's /dev/null). The real CLI in subprocesses, a real FIFO, a real HTTP server.
"""

from __future__ import annotations

import os
import stat
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from test_remote import Store, http_store  # noqa: F401  (a fixture)


def _special(tmp_path: Path, linked: bool) -> tuple[Path, Path]:
    """(the name to write, the FIFO it is or leads to)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    if not linked:
        return fifo, fifo
    link = tmp_path / "out.warm"
    link.symlink_to(fifo)
    return link, fifo


def _refused(proc: object, name: Path, before: list[str], folder: Path, fifo: Path) -> None:
    err = proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 2, err  # type: ignore[attr-defined]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(name) in err and "not a regular file" in err and "FIFO" in err, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the pipe it was
    assert sorted(p.name for p in folder.iterdir()) == before  # no lock, no temporary file


@pytest.mark.parametrize("linked", [False, True])
@pytest.mark.parametrize("force", [False, True])
def test_merge_never_writes_over_a_fifo(
    made: tuple[Warm, Path], tmp_path: Path, linked: bool, force: bool
) -> None:
    warm, good = made
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    name, fifo = _special(out_dir, linked)
    before = sorted(p.name for p in out_dir.iterdir())
    proc = warm("merge", good, "-o", name, *(["--force"] if force else []), timeout=60)
    _refused(proc, name, before, out_dir, fifo)


@pytest.mark.parametrize("linked", [False, True])
def test_pull_never_writes_over_a_fifo_even_forced(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
    linked: bool,
) -> None:
    warm, good = made
    store, base, _ = http_store
    store.files["/app.warm"] = good.read_bytes()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    name, fifo = _special(out_dir, linked)
    before = sorted(p.name for p in out_dir.iterdir())
    for force in ([], ["--force"]):
        proc = warm("pull", f"{base}/app.warm", name, *force, timeout=60)
        _refused(proc, name, before, out_dir, fifo)
