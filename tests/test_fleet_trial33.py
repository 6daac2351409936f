"""Fleet trial 33: a fleet sharing one bundle, tried from the README alone, through the
real CLI, real cc, real SQLite files and a real HTTP server on 127.0.0.1.

- A shard count in more digits than Python's `int` reads from text (4,300) is one line
  and exit 2, never a traceback, from `--shard` and every launcher's variables alike.
- A URL's local copy in WARM_HOME/remote/ that changed since warm published it (replaced,
  truncated, written to) is not the store's bundle: the next start downloads it again,
  rather than serve it, or its damage, under the store's ETag for ever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet_shards import shard_refused
from test_remote import Store, built, http_store  # noqa: F401  (fixtures)

from warmcli.bundle.remote import cache_dir


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


HUGE = "9" * 5000  # over the 4,300 digits `int(str)` reads


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--shard", f"0/{HUGE}"], {}),
        (["--shard", f"{HUGE}/4"], {}),
        ([], {"WARM_SHARD": f"1/{HUGE}"}),
        ([], {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": HUGE}),
        (
            [],
            {
                "SLURM_ARRAY_TASK_ID": "0",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_STEP": HUGE,
            },
        ),
        ([], {"RANK": HUGE, "WORLD_SIZE": "2"}),
        ([], {"JOB_COMPLETION_INDEX": "1", "WARM_SHARD_COUNT": HUGE}),
    ],
)
def test_a_shard_number_too_long_for_int_is_one_line(
    warm: Warm, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    # (a launcher's variables are no WARM_ variable: a forking server of their own, kept
    # among the few `tests/forked_cli.py` holds, would cost more than this one command)
    forkable = all(k.startswith("WARM_") for k in env)
    shard_refused(warm if forkable else Warm(dict(warm.env)), tmp_path, args, env)


def _kernels(warm: Warm, location: str | Path) -> int:
    return len(warm.json("stats", location)["kernels"])


@pytest.mark.parametrize("damage", ["replaced", "truncated"])
def test_a_local_copy_changed_since_it_was_published_is_downloaded_again(
    warm: Warm,
    tmp_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    built: tuple[bytes, bytes],  # noqa: F811
    damage: str,
) -> None:
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = built[0]
    full = tmp_path / "full.warm"
    full.write_bytes(built[0])
    held = _kernels(warm, full)
    assert _kernels(warm, url) == held and store.downloads == 1
    os.environ["WARM_HOME"], saved = warm.env["WARM_HOME"], os.environ["WARM_HOME"]
    try:
        copy = cache_dir(url) / "bundle.warm"
    finally:
        os.environ["WARM_HOME"] = saved
    if damage == "replaced":  # another bundle copied over it (a restore, a mistaken cp)
        copy.write_bytes(built[1])
    else:  # cut short (a disk that filled, a backup tool)
        with open(copy, "r+b") as fh:
            fh.truncate(8192)
    proc = warm("diff", url, full, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["same"], proc.stdout + proc.stderr
    assert store.downloads == 2 and copy.read_bytes() == built[0]
    assert _kernels(warm, url) == held and store.downloads == 2  # believed again: no download


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_push_of_a_fifo_or_folder_says_what_it_is_not_that_none_exists(
    warm: Warm, tmp_path: Path, kind: str
) -> None:
    given = tmp_path / "fleet.warm"
    if kind == "fifo":
        os.mkfifo(given)
    else:
        given.mkdir()
    proc = warm("push", given, "http://127.0.0.1:9/fleet.warm")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    said = "a FIFO" if kind == "fifo" else "a folder"
    assert said in proc.stderr and "no such" not in proc.stderr, proc.stderr


def test_a_size_in_more_digits_than_a_float_holds_is_one_line(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")  # the host example's, as `warm run` makes it
    before = bundle.read_bytes()
    proc = warm("clean", bundle, "--max-size", "9" * 400)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and bundle.read_bytes() == before
    huge = warm.with_env(WARM_REMOTE_MAX_SIZE="9" * 5000)
    proc = huge("stats", "http://127.0.0.1:9/fleet.warm")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "WARM_REMOTE_MAX_SIZE" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "env", [{"COLUMNS": "\u00b2"}, {"LINES": "\u00b2"}, {"COLUMNS": HUGE}, {"LINES": HUGE}]
)
def test_a_terminal_size_int_cannot_read_is_as_unset(
    warm: Warm, tmp_path: Path, env: dict[str, str], host_bundle: Callable[[Path], Path]
) -> None:
    """`COLUMNS` (and `LINES`) that is no number `int` reads, though `str.isdigit` takes it,
    is as unset: the tables print, an error is its one line."""
    bundle = host_bundle(tmp_path / "b.warm")  # the host example's, as `warm run` makes it
    odd = Warm({k: v for k, v in warm.env.items() if k not in ("COLUMNS", "LINES")} | env)
    proc = odd("stats", bundle)
    assert proc.returncode == 0 and "matmul" in proc.stdout and not proc.stderr, proc.stderr
    proc = odd("stats", tmp_path / "missing.warm")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_a_tune_held_by_three_shards_names_the_one_kept_on_every_line(
    warm: Warm, tmp_path: Path
) -> None:
    """Three inputs (one of format 2) measured one tune key at 7, 9 and 8 s: the newest is
    kept, and each line the merge prints of that tune says so; none names as kept a
    measurement a later input displaced."""
    import dataclasses

    from test_format3 import _format2, _tune

    from warmcli.bundle.store import Bundle

    tune = _tune(0)
    older, newest, middle = (tmp_path / f"{n}.warm" for n in ("older", "newest", "middle"))
    _format2(older, [tune])  # measured at 7.0
    for path, when, pick in ((newest, 9.0, "c2"), (middle, 8.0, "c0")):
        with Bundle.create(path) as bundle:
            bundle.put(tunes=[dataclasses.replace(tune, measured_at=when, pick=pick)])
    out = tmp_path / "fleet.warm"
    doc = warm.json("merge", older, middle, newest, "-o", out)
    assert {(c["kept"], c["kept_pick"], c["kept_measured_at"]) for c in doc["choices"]} == {
        (str(newest), "c2", 9.0)
    }, doc["choices"]
    assert sorted(c["dropped"] for c in doc["choices"]) == sorted([str(older), str(middle)])
    proc = warm("merge", older, middle, newest, "-o", out, "--force")
    assert proc.returncode == 0 and str(middle) + " (newer)" not in proc.stdout, proc.stdout
    assert [t["pick"] for t in warm.json("stats", out)["tunes"]] == ["c2"]


MERGED_MEANWHILE = """
import os, subprocess, sys
from matmul_host import DEVICE, workload as base

CALLS = []

def workload(rt):
    CALLS.append(1)
    base(rt)
    if len(CALLS) == 1:  # another shard stores the same kernels while this pass compiles
        full, bundle = os.environ["FULL"], os.environ["INTO"]
        merge = [sys.executable, "-m", "warmcli", "merge", full, bundle, "-o", bundle]
        subprocess.run(merge, check=True, capture_output=True)
"""


def test_kernels_another_writer_stored_meanwhile_are_not_counted_as_new(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """Shards writing into one bundle at once each build the candidates their tunes share:
    the one storing a kernel the bundle already holds (same binary) did not add it."""
    full = host_bundle(tmp_path / "full.warm")  # `warm run matmul_host.py -b full.warm -q`'s
    workload = tmp_path / "meanwhile.py"
    workload.write_text(MERGED_MEANWHILE)
    bundle = tmp_path / "fleet.warm"
    doc = warm.with_env(FULL=str(full), INTO=str(bundle), PYTHONPATH=str(EXAMPLES)).json(
        "run", workload, "-b", bundle
    )
    assert doc["stored"]["kernels"] == 0, doc["stored"]
    assert len(warm.json("stats", bundle)["kernels"]) == len(warm.json("stats", full)["kernels"])


def test_a_folder_in_place_of_the_local_copy_is_one_remote_error(
    warm: Warm,
    tmp_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    """A folder where a URL's copy goes (made by hand, a restore gone wrong) cannot be
    replaced: the CLI says the copy cannot be kept, production raises `RemoteError` (the
    OSError the README promises), never a bare IsADirectoryError naming a temporary file."""
    import subprocess
    import sys

    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = built[0]
    os.environ["WARM_HOME"], saved = warm.env["WARM_HOME"], os.environ["WARM_HOME"]
    try:
        copy = cache_dir(url) / "bundle.warm"
    finally:
        os.environ["WARM_HOME"] = saved
    copy.mkdir(parents=True)
    copy.parent.chmod(0o700)
    proc = warm("stats", url)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot be kept" in proc.stderr and ".tmp" not in proc.stderr, proc.stderr
    code = (
        "import sys, warmcli\nfrom warmcli.errors import RemoteError\n"
        "try:\n    warmcli.use_bundle(sys.argv[1])\n"
        "except RemoteError as exc:\n    print('RemoteError', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, env=warm.env
    )
    assert done.stdout.startswith("RemoteError") and "cannot be kept" in done.stdout, done


def test_a_pull_refused_over_a_file_not_warms_leaves_nothing_beside_it(
    warm: Warm,
    tmp_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    store, base, _ = http_store
    store.files["/notes.txt"] = built[0]
    folder = tmp_path / "work"
    folder.mkdir()
    notes = folder / "notes.txt"
    notes.write_text("my notes\n")
    proc = warm("pull", f"{base}/notes.txt", notes)
    assert proc.returncode == 2 and "--force" in proc.stderr, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # no notes.txt.lock
    assert notes.read_text() == "my notes\n"
