"""What `warm pull URL [PATH]` may replace, against a real HTTP server on 127.0.0.1 and
the real CLI: never a file that is no warm bundle unless `--force`; never a name taken
from the URL that is a dot file, empty or `..`; through a link, the file it leads to.
"""

from __future__ import annotations

from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from test_remote import Store, http_store  # noqa: F401  (a fixture)


def _one_line(proc: object, *needles: str) -> None:
    err = proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 2, err  # type: ignore[attr-defined]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def _serving(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    at: str,
) -> tuple[Warm, Path, str]:
    """warm, its good bundle, and the local store's base URL, which serves it `at`."""
    warm, good = made
    store, base, _ = http_store
    store.files[at] = good.read_bytes()
    return warm, good, base


def test_pull_never_replaces_a_file_that_is_no_bundle_unless_forced(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    warm, good, base = _serving(made, http_store, "/app.warm")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    proc = warm("pull", f"{base}/app.warm", notes)
    _one_line(proc, "notes.txt", "not a warm bundle", "--force")
    assert notes.read_text() == "my notes\n"
    empty = tmp_path / "empty.warm"
    empty.write_bytes(b"")
    _one_line(warm("pull", f"{base}/app.warm", empty), "--force")
    assert empty.read_bytes() == b""
    forced = warm("pull", f"{base}/app.warm", notes, "--force")
    assert forced.returncode == 0, forced.stderr
    assert notes.read_bytes() == good.read_bytes()
    again = warm("pull", f"{base}/app.warm", notes)  # a bundle now: a pull updates it
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("tail", ["x/.bashrc", "x/..", "x/", ".profile"])
def test_pull_refuses_a_name_from_the_url_that_is_a_dot_file_or_empty(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
    tail: str,
) -> None:
    warm, _, base = _serving(made, http_store, f"/{tail}")
    (tmp_path / ".bashrc").write_text("alias ll='ls -l'\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = warm("pull", f"{base}/{tail}", cwd=tmp_path)
    _one_line(proc, "name the file to write")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / ".bashrc").read_text() == "alias ll='ls -l'\n"
    named = warm("pull", f"{base}/{tail}", tmp_path / "ok.warm")  # named: fine
    assert named.returncode == 0, named.stderr


def test_pull_through_a_link_writes_the_file_it_leads_to(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    warm, good, base = _serving(made, http_store, "/app.warm")
    (tmp_path / "data").mkdir()
    target, link = tmp_path / "data" / "app.warm", tmp_path / "app.warm"
    link.symlink_to(target)  # dangling first: the pull makes the file
    for _ in range(2):
        proc = warm("pull", f"{base}/app.warm", link)
        assert proc.returncode == 0, proc.stderr
        assert link.is_symlink() and target.read_bytes() == good.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.warm", "data"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["app.warm", "app.warm.lock"]
