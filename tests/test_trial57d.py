"""Holes trial57d found handing a victim a bundle, each reproduced for real: the real CLI in
a subprocess, a real bundle from `warm run` under a name an attacker chose."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from conftest import Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, commands forked)

from warmcli.bundle.candidates import pack
from warmcli.bundle.store import Bundle
from warmcli.printable import lone_surrogate


def _texts(value: Any) -> Iterator[str]:
    """Every text of a parsed JSON document, keys too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def test_json_names_a_bundle_of_no_utf8_name_in_text_strict_readers_take(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A bundle handed over under a name holding a byte no UTF-8 has (`g\\xffood.warm`, as a
    tarball or a download may name it) was named by every `--json` report (`"bundle"`,
    `"a"`, `"out"`, `"inputs"`, `"path"`) with a lone surrogate's escape (`"g\\udcffood"`):
    strict JSON readers (serde_json: "lone leading surrogate") refuse the whole report, as
    `warm check --json` was fixed to avoid for a library's name (test_hostile40b). Now each
    such character is written as the text `\\udcff`, as the error lines already spell it."""
    warm, good = made
    bundle = tmp_path / "g\udcffood.warm"  # on disk: the byte 0xff
    other = tmp_path / "other.warm"
    shutil.copyfile(good, bundle)
    shutil.copyfile(good, other)
    reports = {
        "stats": ("stats", bundle),
        "verify": ("verify", bundle),
        "diff": ("diff", bundle, other),
        "check": ("check", bundle),
        "merge": ("merge", bundle, other, "-o", tmp_path / "o\udcffut.warm"),
        "clean": ("clean", bundle),
    }
    for name, args in reports.items():
        done = warm(*args, "--json")
        assert done.returncode == 0, (name, done.stderr)
        doc = json.loads(done.stdout)
        texts = list(_texts(doc))
        assert [t for t in texts if lone_surrogate(t)] == [], (name, done.stdout[:400])
        assert any("g\\udcffood.warm" in t for t in texts), (name, done.stdout[:400])


def test_a_merge_refusing_an_out_that_is_a_link_loop_leaves_no_lock_file(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """An OUT handed over as a symbolic link to itself (`app.warm -> app.warm`) was refused
    by `warm merge` (`cannot look at it (Too many levels of symbolic links)`) only once its
    write lock was taken, so the refused merge left `app.warm.lock` beside it, where the
    README says a merge that refuses an OUT already there leaves none. Now it is looked at
    before the lock, as the other refusals of OUT are."""
    warm, good = made
    folder = tmp_path / "handed"
    folder.mkdir()
    (folder / "app.warm").symlink_to("app.warm")
    for force in ((), ("--force",)):
        done = warm("merge", good, "-o", folder / "app.warm", *force)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert "cannot look at it" in done.stderr, done.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["app.warm"], force


def test_stats_json_writes_a_candidate_name_no_utf8_has_in_text_strict_readers_take(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A tune's packed candidates keep a name's text as its bytes (`surrogatepass`), so a
    bundle made elsewhere may name a candidate `tile8\\ud800x`: `warm stats --json` streamed
    it, in each tune's candidates and each kernel's, as a lone surrogate's escape, which
    strict JSON readers refuse. Now a streamed line (and a range of lines written as bytes)
    holding one is written with it as the text `\\ud800`, as the terminal's tables show it."""
    warm, good = made
    bundle = tmp_path / "named.warm"
    shutil.copyfile(good, bundle)
    with Bundle.open(bundle) as opened:
        tunes = opened.tunes()
    conn = sqlite3.connect(bundle, isolation_level=None)
    ids = {bytes(key): i for i, key in conn.execute("SELECT id, key FROM tune_kernels")}
    for t in tunes:
        named = tuple(
            c if c.name == t.pick else replace(c, name=f"{c.name}\ud800x") for c in t.candidates
        )
        packed = pack(named, lambda key: ids.setdefault(key, len(ids) + 1))
        conn.execute(
            "UPDATE tunes SET candidates = ? WHERE key = ?", (packed, bytes.fromhex(t.key))
        )
    conn.close()
    for args in (("stats", bundle), ("stats", bundle, "--explain", "matmul")):
        done = warm(*args, "--json")
        assert done.returncode == 0, done.stderr
        texts = list(_texts(json.loads(done.stdout)))
        assert [t for t in texts if lone_surrogate(t)] == [], args
        assert any(t.endswith("\\ud800x") for t in texts), args
