"""Holes hostile41 found in what the last stop added, each reproduced for real: real cc,
real libraries, the real CLI in a subprocess (no fake of anything)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy
from conftest import ROOT, Warm
from elf_blobs import LINKED_WORKLOAD, SERVE, shared_object
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def _numpys_library() -> Path:
    """A library numpy's own extension needs from a folder no loader search names (a
    wheel's `numpy.libs`): loaded in every warm process, since warm imports numpy."""
    folder = Path(numpy.__file__).resolve().parent.parent / "numpy.libs"
    found = sorted(folder.glob("lib*.so*")) if folder.is_dir() else []
    if not found:
        import pytest

        pytest.skip("this numpy keeps no libraries of its own in numpy.libs")
    return found[0]


def test_a_library_every_warm_process_has_loaded_is_servable(warm: Warm, tmp_path: Path) -> None:
    """glibc's loader matches a needed name against the objects already loaded before it
    searches a folder: a host blob needing numpy's own bundled library (in `numpy.libs`,
    which no RPATH, cache or default folder names) loads in every warm process, since warm
    imports numpy. `warm check` searched the folders alone and called it not servable
    ("loading it would fail", exit 1) while production served it strictly."""
    library = _numpys_library()
    workload = tmp_path / "wl.py"
    workload.write_text(
        LINKED_WORKLOAD.replace("LIBDIR", str(library.parent)).replace("LIBNAME", library.name)
    )
    bundle = tmp_path / "b.warm"
    made = warm("run", workload, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr + made.stdout
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    served = subprocess.run(
        [sys.executable, "-c", SERVE, workload], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert served.returncode == 0, served.stderr[-1500:]
    assert json.loads(served.stdout) == [2.0 * i for i in range(8)]
    checked = warm("check", bundle, "--json")
    assert checked.returncode == 0, checked.stdout[-1500:] + checked.stderr[-1500:]
    assert json.loads(checked.stdout)["unservable"] == []
    assert os.path.basename(library) not in checked.stdout


def test_diff_never_calls_bundles_the_same_whose_binaries_differ(
    warm: Warm, tmp_path: Path, host_bundle: Any
) -> None:
    """A bundle from elsewhere that keeps a kernel's key and row but serves another binary
    under it (its blob a shared object of the attacker's, its sha256 matching: `warm
    verify` calls it sound) was "the same kernels and tunes, with the same picks" to `warm
    diff` against the user's own bundle (exit 0): the key names the source, not the bytes
    that run. A kernel both hold under one key whose blobs differ is listed now, and the
    bundles are not the same."""
    mine = host_bundle(tmp_path / "mine.warm")
    theirs = host_bundle(tmp_path / "theirs.warm")
    blob = shared_object([b"libc.so.6"])
    sha = hashlib.sha256(blob).hexdigest()
    with sqlite3.connect(theirs) as conn:
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (sha, len(blob), blob))
        (key,) = conn.execute("SELECT min(key) FROM kernels").fetchone()
        conn.execute("UPDATE kernels SET sha256 = ? WHERE key = ?", (sha, key))
    conn.close()
    assert warm("verify", theirs).returncode in (0, 1)
    text = warm("diff", mine, theirs)
    assert "the same kernels" not in text.stdout, text.stdout
    assert key[:16] in text.stdout, text.stdout
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    doc = json.loads(warm("diff", mine, theirs, "--json").stdout)
    assert doc["same"] is False
    assert doc["kernels"]["binary_differs"] == [key]
    assert doc["kernels"]["binary_differs_count"] == 1
    same = json.loads(warm("diff", mine, host_bundle(tmp_path / "copy.warm"), "--json").stdout)
    assert same["same"] is True and same["kernels"]["binary_differs"] == []


def test_merge_says_a_kernel_key_whose_binary_another_input_replaces(
    warm: Warm, tmp_path: Path, host_bundle: Any
) -> None:
    """A merge keeps a kernel key's first input's row: `warm merge theirs.warm mine.warm -o
    mine.warm` put theirs' binary in place of the user's own under the same key and said
    only 'from mine.warm: 0 kernel(s)'. Which binary was kept, and which dropped, is said."""
    mine = host_bundle(tmp_path / "mine.warm")
    theirs = host_bundle(tmp_path / "theirs.warm")
    blob = shared_object([b"libc.so.6"])
    sha = hashlib.sha256(blob).hexdigest()
    with sqlite3.connect(theirs) as conn:
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (sha, len(blob), blob))
        (key, own) = conn.execute("SELECT key, sha256 FROM kernels ORDER BY key").fetchone()
        conn.execute("UPDATE kernels SET sha256 = ? WHERE key = ?", (sha, key))
    conn.close()
    merged = warm("merge", theirs, mine, "-o", tmp_path / "out.warm", "--force")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    said = " ".join(merged.stdout.split())
    assert f"kernel {key[:16]}: kept the binary {sha[:16]} of {theirs}" in said, said
    assert f"dropped {own[:16]} of {mine}" in said, said
    doc = json.loads(warm("merge", mine, theirs, "-o", tmp_path / "o2.warm", "--json").stdout)
    assert any(f"kept the binary {own[:16]} of {mine}" in m for m in doc["mended"]), doc
    plain = warm("merge", mine, host_bundle(tmp_path / "copy.warm"), "-o", tmp_path / "o3.warm")
    assert "kept the binary" not in plain.stdout, plain.stdout


_PEAK = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-m", "warmcli", *sys.argv[1:]], stdout=subprocess.DEVNULL)
print(f"warm-peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr)
"""


@functools.lru_cache(maxsize=1)
def _keyed(pairs: int, entry: str, tool: str) -> tuple[tuple[int, int, str, str, str], ...]:
    """(i, j, arch, key, components) of each row `_kernels_of_two_archs` writes, keyed as a
    reader keys them: the same rows in each bundle of a test, keyed once (most of the
    writing's time)."""
    from warmcli.kernel_parts import key_of

    rows = []
    for i in range(pairs):
        content = hashlib.sha256(str(i).encode()).hexdigest()
        for j, arch in enumerate(("x86_64", "aarch64")):
            parts = {"arch": arch, "entry": entry, "kernel": content, "toolchain": tool}
            comps = json.dumps(parts, sort_keys=True)
            rows.append((i, j, arch, key_of(content, arch, "", tool), comps))
    return tuple(rows)


def _kernels_of_two_archs(bundle: Path, pairs: int, twins: bool, blobs: bool = False) -> None:
    """`pairs` kernels built for two archs each, their rows keyed as a reader keys them;
    `twins`: each pair carries one compile's share (as a cubin and its PTX twin do);
    `blobs`: two kernels of one arch share a binary (as a batch's kernels do)."""
    with sqlite3.connect(bundle) as conn:
        device, backend, entry, sha, tool, created = conn.execute(
            "SELECT device, backend, entry, sha256, toolchain, created FROM kernels"
        ).fetchone()
        conn.execute("DELETE FROM tunes")
        conn.execute("DELETE FROM kernels")
        rows, held = [], []
        for i, j, arch, key, comps in _keyed(pairs, entry, tool):
            if blobs:  # kernels 2m and 2m + 1 of one arch share one
                data = f"{i // 2} {arch}".encode()
                sha = hashlib.sha256(data).hexdigest()
                held.append((sha, len(data), data))
            named = (key, device, backend, arch, entry, f"k{i}", f"warm_{key[:16]}_{entry}")
            secs = 0.5 + j * (not twins)
            rows.append((*named, sha, tool, comps, "", secs, created, created))
        conn.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?)", held)
        conn.executemany(f"INSERT INTO kernels VALUES ({','.join('?' * 14)})", rows)
    conn.close()


def _peak_kb(warm: Warm, *args: object) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *map(str, args)],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=ROOT,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-1500:]
    return int(proc.stderr.rsplit("warm-peak ", 1)[1].split()[0])


def test_stats_json_memory_stays_flat_with_a_compiles_twin_rows(
    warm: Warm, tmp_path: Path, host_bundle: Any
) -> None:
    """`warm stats --json` gives each row of one compile its part of the time
    (`bundle.compiles.shared_compiles`, added last stop), from a dict of every compile that
    made more than one row: a CUDA bundle keeping PTX has two rows of each kernel, so that
    dict grew with the bundle (150,000 such kernels: 31 → 117 MB; README: every reading
    command's memory stays flat). So did the count of kernels per shared binary (a batch's:
    150,000 binaries of two kernels, 32 → 79 MB). Both in a temporary file now
    (`bundle.counts.HeldCounts`). One bundle of 30,000 such pairs holds both (each pair one
    compile's twins, each binary two kernels'): measured against the plain one, +4,864 KiB
    (stop 50); with either count held in a dict again, +20,564 KiB (compiles) or +8,808 KiB
    (binaries: +6,324 KiB in a bundle of those alone, which the 8 MiB bound that bundle had
    let pass)."""
    plain = host_bundle(tmp_path / "plain.warm")
    both = host_bundle(tmp_path / "both.warm")
    _kernels_of_two_archs(plain, 30_000, twins=False)
    _kernels_of_two_archs(both, 30_000, twins=True, blobs=True)
    flat = _peak_kb(warm, "stats", "--json", plain)
    grown = _peak_kb(warm, "stats", "--json", both) - flat
    assert grown < 7 << 10, f"{grown} KiB more for twin rows and binaries two kernels share"
