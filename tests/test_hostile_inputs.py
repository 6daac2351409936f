"""A hostile bundle given to `warm merge`, `warm diff` and `warm pull`: a blob whose size
column lies or that is missing, a kernel whose arch or backend is huge, a tune whose
candidates name a kernel id the bundle does not hold. Each gives one clear line and a
non-zero exit, and the destination keeps every byte it had. Text holding terminal
escapes in a well-formed row is data: merged as it is, shown escaped. Real files, the
real CLI in subprocesses, a real HTTP store on 127.0.0.1 (test_remote's)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from test_remote import Store, http_store  # noqa: F401  (a fixture)

from warmcli.bundle.store import Bundle
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

FIRST_BLOB = "(SELECT min(rowid) FROM blobs)"
ATTACKS = {  # name: (SQL on a copy of a real bundle, what the one line names)
    "blob size lies": (f"UPDATE blobs SET size = 5 WHERE rowid = {FIRST_BLOB}", "says 5"),
    "blob missing": (f"DELETE FROM blobs WHERE rowid = {FIRST_BLOB}", "no blob"),
    "huge arch": ("UPDATE kernels SET arch = printf('%.*c', 3000000, 'a')", "arch:"),
    "huge backend": (
        "UPDATE kernels SET backend = printf('%.*c', 3000000, 'b') WHERE rowid = 1",
        "backend:",
    ),
    "tune names no kernel": (
        "DELETE FROM tune_kernels WHERE id = 1",
        "kernel id 1 is not one the bundle holds",
    ),
}


def _hostile(good: Path, folder: Path, attack: str) -> Path:
    path = folder / "hostile.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    conn.execute(ATTACKS[attack][0])
    conn.commit()
    conn.close()
    return path


def _one_line(text: str, named: str) -> None:
    lines = [ln for ln in text.splitlines() if named in ln]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert "\x1b" not in text


def _destination(folder: Path) -> Path:
    """A bundle of its own (one tune, no kernel in common): what a merge must not lose."""
    dest = folder / "dest.warm"
    checksum = "ab" * 32
    key = tune_key("own", "s", "host|d", checksum)
    cand = CandidateMeasurement("c0", "cd" * 32, "ok", 1e-4, (1e-4,))
    with Bundle.create(dest) as bundle:
        bundle.put(tunes=[TuneRecord(key, "own", "s", "host|d", checksum, "measured", "c0",
                                     (cand,), 0.5, 7.0)])  # fmt: skip
    return dest


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_merge_refuses_a_hostile_input_and_keeps_the_destination(
    made: tuple[Warm, Path], tmp_path: Path, attack: str
) -> None:
    warm, good = made
    hostile, dest = _hostile(good, tmp_path, attack), _destination(tmp_path)
    before = dest.read_bytes()
    for out in (dest, tmp_path / "new.warm"):  # into the destination named as an input; anew
        proc = warm("merge", dest, hostile, "-o", out)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        _one_line(proc.stderr, str(hostile))
    assert dest.read_bytes() == before and not (tmp_path / "new.warm").exists()
    left = sorted(n for n in os.listdir(tmp_path) if not n.endswith(".lock"))  # locks stay
    assert left == ["dest.warm", "hostile.warm"]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_diff_names_each_hostile_entry_and_exits_non_zero(
    made: tuple[Warm, Path], tmp_path: Path, attack: str
) -> None:
    warm, good = made
    hostile = _hostile(good, tmp_path, attack)
    for a, b in ((good, hostile), (hostile, good)):
        proc = warm("diff", a, b)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        text = proc.stdout + proc.stderr  # each entry it cannot serve named on a line
        assert ATTACKS[attack][1] in text and "Traceback" not in text and "\x1b" not in text
        assert "the same kernels and tunes" not in proc.stdout
    proc = warm("diff", good, hostile, "--json")
    assert proc.returncode == 1 and '"same": false' in proc.stdout


def _pulled_once(warm: Warm, good: Path, store: Store, base: str, tmp_path: Path) -> Warm:
    """`warm` with a home of its own, where a pull of `good` left a last good copy."""
    warm = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    store.files["/b.warm"] = good.read_bytes()
    assert warm("pull", f"{base}/b.warm", tmp_path / "first.warm").returncode == 0
    return warm


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_pull_refuses_a_hostile_download_and_keeps_the_destination(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
    attack: str,
) -> None:
    warm, good = made
    store, base, _ = http_store
    warm = _pulled_once(warm, good, store, base, tmp_path)
    dest = tmp_path / "dest.warm"
    store.files["/b.warm"] = _hostile(good, tmp_path, attack).read_bytes()
    dest.write_bytes(b"what the user had")
    for home in ("home", "fresh-home"):  # with a last good copy, and with none
        proc = warm.with_env(WARM_HOME=str(tmp_path / home))("pull", f"{base}/b.warm", dest)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        _one_line(proc.stderr, "download refused")
        assert dest.read_bytes() == b"what the user had"


def test_pull_with_the_store_down_copies_no_last_good_copy(
    made: tuple[Warm, Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    warm, good = made
    store, base, server = http_store
    warm = _pulled_once(warm, good, store, base, tmp_path)
    server.shutdown()
    server.server_close()
    dest = tmp_path / "dest.warm"
    dest.write_bytes(b"what the user had")
    proc = warm("pull", f"{base}/b.warm", dest)
    assert proc.returncode == 2 and "store unreachable" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert dest.read_bytes() == b"what the user had"


ESC = "x\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED\r"


def _escaping(path: Path, pick: str, when: float) -> None:
    """A tune whose operation, shape, device and candidate name hold terminal escapes, under
    the key they hash to (a well-formed row: text is data, shown escaped)."""
    cands = (
        CandidateMeasurement("c0" + ESC, "ab" * 32, "ok", 1e-4, (1e-4,)),
        CandidateMeasurement("c1", "cd" * 32, "ok", 2e-4, (2e-4,)),
    )
    op, shape, device, checksum = "op" + ESC, "s" + ESC, "host|" + ESC, "ef" * 32
    key = tune_key(op, shape, device, checksum)
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[TuneRecord(key, op, shape, device, checksum, "measured", pick,
                                     cands, 0.5, when)])  # fmt: skip


def test_escapes_in_merge_choices_and_diff_picks_reach_no_terminal(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, _ = made
    a, b = tmp_path / "a.warm", tmp_path / "b.warm"
    _escaping(a, "c0" + ESC, 1.0)
    _escaping(b, "c1", 2.0)
    for args in (("merge", a, b, "-o", tmp_path / "m.warm", "--force"), ("diff", a, b)):
        for extra in ((), ("--json",)):
            proc = warm(*args, *extra)
            text = proc.stdout + proc.stderr
            assert proc.returncode == 0 and "Traceback" not in text, text
            assert not any(c in text for c in ("\x1b", "\x07", "\r")), text
    with Bundle.open(tmp_path / "m.warm") as merged:  # the newer pick kept, text as it was
        (tune,) = merged.tunes()
        assert tune.pick == "c1" and tune.operation == "op" + ESC


def test_a_tune_whose_candidate_kernel_is_not_held_is_merged_whole(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A candidate's kernel may be absent (evicted by `clean --max-size`, failed to build):
    a well-formed tune naming one is merged as it is, nothing dropped, verify sound."""
    warm, good = made
    path = tmp_path / "evicted.warm"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tune_kernels SET key = randomblob(32) WHERE id = 1")
    conn.commit()
    conn.close()
    out = tmp_path / "merged.warm"
    assert warm("merge", path, "-o", out).returncode == 0
    with Bundle.open(path) as source, Bundle.open(out) as merged:
        assert merged.tunes() == source.tunes() and len(merged.kernels()) == 6
    assert warm("verify", out).returncode == 0
    assert warm("diff", path, out).returncode == 0
