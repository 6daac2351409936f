"""Review of stop 34's merged change: what its late parts left open, each with real parts.

- A Ctrl-C landing in importlib's weakref callback was to be sent again and handled once
  the callback returned; but `signal.raise_signal` handles the signal it sends at once,
  in the handler's own frame, so the second `KeyboardInterrupt` was raised inside the
  callback all the same: `Exception ignored in: <function cb ...>`, a traceback, and the
  command went on (the test of it blocked the signal, which no Ctrl-C does).
- `warm run`'s own handler (`interrupt_on_signals`) had no such care at all: a Ctrl-C in
  that callback stopped the compilers, was printed as ignored, and the run went on, every
  later Ctrl-C only stopping compilers again (the first had been "raised").
- A Ctrl-C raised inside code Python ran from a string (a namedtuple's or a dataclass's
  methods, made as `warm` imports) left Python's note of an unhandled interrupt set:
  `python -m warmcli` said "warm: interrupted" and then died by SIGINT (status -2), not
  exit 130 (about one Ctrl-C in twenty in warm's first 100 ms).
- `warm merge` wrote the union of its inputs' fingerprints whatever their number: two
  inputs of 600 each (a fleet's machines, or one hostile input) made an output of 1,200,
  more than any reader takes (`FINGERPRINT_ROWS`): exit 0, and the output, the user's own
  bundle when merged into, was "corrupt fingerprints" to `verify` and to the next merge.
- `warm run` (any writer) added a new device's or toolchain's fingerprint to a bundle
  holding `FINGERPRINT_ROWS` (a merge may write that many): the bundle was then "corrupt
  fingerprints" to `verify`, `check`, `stats` and `merge`.
- A disk filling up while `warm merge` copied a blob, or wrote the tunes, was "corrupt
  bundle (no such savepoint: copy)" or "(no such table: temp.merge_held)" of the merge's
  temporary file: SQLite had rolled the whole transaction back, and undoing the copy's
  savepoint, or dropping the tunes' table, failed over the disk's error.
- A `check=` object reading a setting of its class (`class Close: rtol = 1e-3`, `self.rtol`
  in `__call__`) was keyed by its own attributes only: changing the class's setting kept
  the old picks, a hit serving one the new check may refuse, where a cold start tunes anew.
- `warm merge` said of every tune it chose between that the one kept was "(newer)", also
  where it was older: a measured pick kept over a later pending one, one dated sanely over
  one dated a year ahead, the first input's of two dated alike. It now says why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_format3 import _tune

from warmcli.bundle.store import Bundle

# A weakref callback compiled as importlib's `cb`, a SIGINT arriving while it runs (under
# the handler `python -c _IN_CALLBACK run` installs: warm's, or `warm run`'s).
_IN_CALLBACK = """
import os, signal, sys, time, weakref
if sys.argv[1] == "run":
    from warmcli.warming.isolation import interrupt_on_signals
    interrupt_on_signals()
else:
    from warmcli.__main__ import _on_ctrl_c
    signal.signal(signal.SIGINT, _on_ctrl_c)
source = "def cb(ref):\\n    os.kill(os.getpid(), signal.SIGINT)\\n    len('x')\\n"
scope = {"os": os, "signal": signal}
exec(compile(source, "<frozen importlib._bootstrap>", "exec"), scope)
class Lock: pass
lock = Lock()
ref = weakref.ref(lock, scope["cb"])
try:
    del lock
    for _ in range(3000):  # the signal sent again lands here, once the callback returned
        time.sleep(0.01)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted after the callback")
"""


@pytest.mark.parametrize("handler", ["warm", "run"])
def test_a_ctrl_c_in_importlibs_callback_is_raised_once_it_has_returned(handler: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IN_CALLBACK, handler],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.stdout.strip() == "interrupted after the callback", done.stdout + done.stderr


def _with_devices(path: Path, names: range, tag: str) -> Path:
    """The bundle at `path` with a device fingerprint for each of `names` added."""
    conn = sqlite3.connect(path)
    rows = []
    for i in names:
        data = {"arch": "x86_64", "backend": "host", "driver": "linux", "name": f"{tag} {i}"}
        rows.append((f"device:host|{tag} {i}|x86_64|linux", "device", json.dumps(data)))
    conn.executemany("INSERT INTO fingerprints VALUES (?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_merge_never_writes_more_fingerprints_than_a_bundle_may_hold(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    mine = _with_devices(host_bundle(tmp_path / "mine.warm"), range(600), "CPU A")
    theirs = _with_devices(host_bundle(tmp_path / "theirs.warm"), range(600), "CPU B")
    before = _digest(mine)
    done = warm("merge", mine, theirs, "-o", mine)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "fingerprint" in done.stderr and "1024" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _digest(mine) == before  # the user's bundle as it was
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert warm("verify", mine).returncode == 0
    done = warm("merge", mine, theirs, "-o", tmp_path / "new.warm")
    assert done.returncode == 2 and not (tmp_path / "new.warm").exists(), done.stderr


def _one_tune(path: Path, when: float, pick: str | None) -> Path:
    status = "measured" if pick is not None else "pending"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[dataclasses.replace(_tune(0, status), measured_at=when, pick=pick)])
    return path


def test_merge_says_why_it_kept_a_measurement_never_newer_when_it_is_older(
    warm: Warm, tmp_path: Path
) -> None:
    now = time.time()
    mine = _one_tune(tmp_path / "mine.warm", now - 3600, "c0")
    cases = {  # the other input -> why mine is kept
        _one_tune(tmp_path / "ahead.warm", now + 365 * 86400, "c2"): "dated over a day ahead",
        _one_tune(tmp_path / "pending.warm", now, None): "pending",
        _one_tune(tmp_path / "older.warm", now - 7200, "c2"): "newer",
        _one_tune(tmp_path / "alike.warm", now - 3600, "c2"): "first",
    }
    for other, why in cases.items():
        done = warm("merge", mine, other, "-o", tmp_path / "out.warm", "--force")
        assert done.returncode == 0, done.stderr
        said = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("tune ")]
        assert len(said) == 1 and "kept c0" in said[0] and why in said[0], (other, said)
        assert ("(newer)" in said[0]) == (why == "newer"), (other, said)
        doc = warm.json("merge", mine, other, "-o", tmp_path / "out.warm", "--force")
        assert why in doc["choices"][0]["why"], doc["choices"]
    ahead = [_one_tune(tmp_path / f"ahead{i}.warm", now + i * 86400, "c2") for i in (5, 9)]
    for first, second in (ahead, ahead[::-1]):
        doc = warm.json("merge", first, second, "-o", tmp_path / "out.warm", "--force")
        assert "both dated over a day ahead" in doc["choices"][0]["why"], doc["choices"]
        assert doc["choices"][0]["kept"] == str(first), doc["choices"]
    # a later input displacing the one kept: its line says why that one is kept
    later = _one_tune(tmp_path / "later.warm", now - 60, "c2")
    pending = tmp_path / "pending.warm"
    doc = warm.json("merge", mine, pending, later, "-o", tmp_path / "out.warm", "--force")
    assert [(c["kept_pick"], c["dropped_pick"]) for c in doc["choices"]] == [
        ("c2", None),
        ("c2", "c0"),
    ], doc["choices"]
    assert "pending" in doc["choices"][0]["why"] and doc["choices"][1]["why"] == "newer"


def test_a_writer_never_makes_a_bundle_hold_more_fingerprints_than_a_reader_takes(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    from warmcli.bundle.manifest import FINGERPRINT_ROWS

    full = _with_devices(host_bundle(tmp_path / "full.warm"), range(FINGERPRINT_ROWS - 2), "CPU")
    wrapper = tmp_path / "mycc"  # a wrapper script: a toolchain the bundle does not name
    wrapper.write_text('#!/bin/sh\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    warm.env["WARM_CC"] = str(wrapper)
    workload = ROOT / "examples" / "matmul_host.py"
    done = warm("run", workload, "-b", full, "-q")
    assert done.returncode == 0, done.stderr
    for command in ("verify", "stats"):
        done = warm(command, full)
        assert done.returncode == 0, (command, done.stdout[-500:], done.stderr)
    kernels = warm.json("stats", full)["kernels"]
    wrapped = {k["label"] for k in kernels if "wrapper script" in k["toolchain"]}
    # the wrapper's builds stored too, beside the 6 the bundle held: bias_relu, row_sum and
    # each tile size the bundle's tune picks name (one or two, as the picks were measured)
    assert {"bias_relu", "row_sum"} < wrapped, wrapped
    assert len(kernels) == 6 + len(wrapped), [k["label"] for k in kernels]


# `python -m` this package: `warm stats` with a SIGINT sent as Python enters the Nth code it
# runs from a string (`KILL_AT`), as a Ctrl-C lands while a namedtuple or dataclass is made.
_AT_A_STRING = """
import os, signal, sys
at, count = int(os.environ["KILL_AT"]), [0]
def hook(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == "<string>":
        count[0] += 1
        if count[0] == at:
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGINT)
sys.argv = ["warm", "stats", os.environ["BUNDLE"]]
from warmcli.__main__ import main
sys.setprofile(hook)
main()
"""


def test_a_ctrl_c_inside_code_run_from_a_string_exits_130_not_by_the_signal(
    tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    (tmp_path / "at_a_string").mkdir()
    (tmp_path / "at_a_string" / "__main__.py").write_text(_AT_A_STRING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(BUNDLE=str(host_bundle(tmp_path / "b.warm")), WARM_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path)])
    codes = []
    for at in range(10, 30):
        done = subprocess.run(
            [sys.executable, "-m", "at_a_string"],
            capture_output=True, text=True, cwd=tmp_path, timeout=120,
            env=dict(env, KILL_AT=str(at)),
        )  # fmt: skip
        assert done.returncode in (0, 130), (at, done.returncode, done.stderr[-1000:])
        assert "Traceback" not in done.stderr, (at, done.stderr[-1000:])
        codes.append(done.returncode)
    assert 130 in codes, codes


def _with_big_blobs(path: Path) -> Path:
    """The bundle at `path` with each blob made 3 MiB of random bytes (its sha256 anew)."""
    conn = sqlite3.connect(path)
    for (sha,) in conn.execute("SELECT sha256 FROM blobs").fetchall():
        data = os.urandom(3 << 20)
        new = hashlib.sha256(data).hexdigest()
        conn.execute(
            "UPDATE blobs SET sha256 = ?, size = ?, data = ? WHERE sha256 = ?",
            (new, len(data), data, sha),
        )
        conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
    conn.commit()
    conn.close()
    return path


@pytest.mark.skipif(os.getuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.parametrize("filled", ["blobs", "tunes"])
def test_a_disk_filling_up_as_a_merge_writes_says_so(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path], filled: str
) -> None:
    if filled == "blobs":  # 3 MiB blobs on a 4 MiB disk
        big, size = _with_big_blobs(host_bundle(tmp_path / "big.warm")), "4m"
    else:  # 20,000 tunes (some 7 MB) on a 2 MiB disk
        big, size = build_big(tmp_path / "big.warm", 100, 20000), "2m"
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        done = warm("merge", big, "-o", disk / "m.warm")
        assert done.returncode == 2, done.stdout + done.stderr
        assert "disk is full" in done.stderr and "corrupt" not in done.stderr, done.stderr
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _close_checksum(rtol: float, own: float | None = None) -> str:
    """The checksum of a tunable whose check reads its class's `rtol` (and, given `own`, an
    attribute of its own besides)."""
    import numpy as np

    from warmcli import Kernel, Tunable

    class Close:
        def __call__(self, outputs, inputs):  # type: ignore[no-untyped-def]
            return np.allclose(outputs[0], inputs[0], rtol=self.rtol, atol=getattr(self, "a", 0))

    Close.rtol = rtol  # type: ignore[attr-defined]
    check = Close()
    if own is not None:
        check.a = own  # type: ignore[attr-defined]
    source = "void f(float *y, int n) { }"
    kernels = {f"c{i}": Kernel(source, "f", "Pi", defines={"W": i}) for i in range(2)}

    def launch(rt, kernel, y, n, *, stream=None):  # type: ignore[no-untyped-def]
        rt.launch(kernel, y, n, stream=stream)

    return Tunable("op", kernels, launch, check=check).checksum


def test_a_check_objects_class_setting_it_reads_keys_its_tunes() -> None:
    assert _close_checksum(1e-3) != _close_checksum(0.5)
    assert _close_checksum(1e-3) == _close_checksum(1e-3)  # stable
    assert _close_checksum(1e-3, 0.1) != _close_checksum(1e-3, 0.2)  # its own, as before
