"""A hostile review of time (stop 52): what warm decides by a clock it does not own.

Found and fixed:
- a use dated back: a writer whose clock is behind (a fleet machine at 1970, a clock stepped
  back) set the `last_used` of every kernel its run or production write-back was served to
  its own time, so `warm clean --older-than 30d` then removed the kernels it had just used,
  and every tune whose pick they were (`Bundle.touch` now moves a use on, never back, as a
  merge's union of uses already did).
- a clean on a clock behind: `warm clean --max-size` (or `--older-than`) on a machine whose
  clock read 1970 took every entry as used in the future and stamped it used in 1970, so the
  next clean by a clock set right (`--older-than 30d`) removed every kernel and tune. A
  clean evicting by a clock before 2024 (before warm was written) is now refused in one
  line, exit 2, nothing stamped (`clean_age.CLOCK_FLOOR`).
- a signature's date said as signed: `warm verify` said `signature: key K, signed
  2100-01-01T00:00:00: valid` of a signature whose `signed_at` was edited to 2100 (the key
  signs the rows' hashes, never the date: any copy may date it). It says `dated D (unsigned)`.
- a cached library dated ahead: a host library written while the clock was ahead (a year,
  the year 3000) was never touched when loaded (its age, negative, was under an hour) and
  sorted newest at every prune of the host library cache, so the files in use were pruned
  before it, and it was kept until the clock reached its date; a load now touches one
  dated ahead, and a prune stamps it now: it ages from then, as `warm clean` takes a time
  of use in the future.
- a compiler dated ahead: a C compiler (or nvcc, or a header) whose mtime is ahead of the
  clock (`touch -d 2100`, a tar made where the clock was ahead) was racy for ever (its
  mtime, not its ctime, under `RACY_SECONDS` before now), so its identity was never
  remembered and found anew in every process: 72 ms of each process's start, 0.3 ms once
  remembered. Racy checks now take such an mtime as its ctime (`stamped.last_change`): a
  write dates both, a `touch -d` its ctime.

The clock is shifted by monkeypatching `time.time` in this process (no libfaketime here;
warm reads only `time.time` and `time.time_ns` for its dates), around the library call the
CLI makes: `Bundle.touch` as `persist` calls it for a run's or a production write-back's
loads (a `warm run` under a `sitecustomize` shifting the clock to 1970 did the same by
hand), `clean_bundle`; the verdicts are the forked CLI's.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.host import libraries
from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.toolchain import RACY_SECONDS
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
from warmcli.ops.clean import clean_bundle


def _used(bundle: Path) -> dict[str, float]:
    with sqlite3.connect(bundle) as conn:
        return dict(conn.execute("SELECT key, last_used FROM kernels"))


def test_a_writer_whose_clock_is_behind_never_dates_a_use_back(
    warm: Warm, host_bundle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    before = _used(bundle)
    with monkeypatch.context() as patched, Bundle.open(bundle, write=True) as writer:
        patched.setattr(time, "time", lambda: 86400.0 * 100)  # 1970's April
        writer.touch(dict.fromkeys(before, time.time()))  # as `persist` dates what it served
    after = _used(bundle)
    assert all(after[key] >= used for key, used in before.items()), (before, after)
    clean = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    assert clean["removed_count"] == {"kernels": 0, "tunes": 0}, clean


def test_a_cached_library_dated_ahead_ages_from_now(tmp_path: Path) -> None:
    folder = tmp_path / "host-libraries"
    folder.mkdir(mode=0o700)
    now = time.time()
    for i in range(libraries.MAX_LIBRARIES):  # used an hour ago and before, one a second
        (folder / f"{i:064x}.so").touch()
        os.utime(folder / f"{i:064x}.so", (now - 3600 - i, now - 3600 - i))
    ahead = folder / f"{'f' * 64}.so"
    ahead.touch()
    os.utime(ahead, (32503680000.0, 32503680000.0))  # the year 3000
    libraries._prune(str(folder))
    kept = sorted(p.name for p in folder.iterdir())
    assert len(kept) == libraries.PRUNE_TO and ahead.exists()
    assert ahead.stat().st_mtime <= time.time(), "still dated ahead: never pruned"
    assert kept[0] == f"{0:064x}.so"  # the most recently used kept, oldest gone


def test_a_cached_library_dated_ahead_is_touched_when_loaded(
    made_once: Path, tmp_path: Path
) -> None:
    made = next((made_once / "home" / libraries.DIRECTORY).glob("*.so"))  # a host kernel's
    lib = Path(shutil.copy(made, tmp_path / made.name))
    os.utime(lib, (32503680000.0, 32503680000.0))  # written while the clock read 3000
    assert libraries._load_verified(str(lib), made.read_bytes()) is not None
    assert lib.stat().st_mtime <= time.time(), "still dated ahead: pruned after those in use"


def test_a_compiler_dated_ahead_is_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cc = Path(shutil.copy2(os.path.realpath(shutil.which("cc") or "cc"), tmp_path / "gcc"))
    os.utime(cc, (4102444800.0, 4102444800.0))  # 2100
    time.sleep(RACY_SECONDS + 0.1)  # its ctime (the copy's) settled: only its mtime is ahead
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))  # (this process: as warm's own)
    assert HostCompiler(str(cc)).toolchain.path == str(cc)
    remembered = (tmp_path / "home" / "toolchains.json").read_text()
    assert f"|{cc}|" in remembered, remembered


def test_a_clean_by_a_clock_at_1970_is_refused_and_stamps_nothing(
    warm: Warm, host_bundle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    before = _used(bundle)
    with monkeypatch.context() as patched:  # (in this process: its clean reads time.time)
        patched.setattr(time, "time", lambda: 86400.0 * 100)
        with pytest.raises(BundleError, match=r"clock reads 1970-04-11 \(UTC\)") as refused:
            clean_bundle(bundle, max_size=1 << 30)
    assert "\n" not in str(refused.value) and _used(bundle) == before
    after = warm.json("clean", bundle, "--older-than", "30d", "--dry-run")
    assert after["removed_count"] == {"kernels": 0, "tunes": 0}, after


def test_a_signatures_date_is_not_said_as_signed(warm: Warm, host_bundle, tmp_path: Path) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    from cryptography.hazmat.primitives import serialization as pem
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate().private_bytes(
        pem.Encoding.PEM, pem.PrivateFormat.PKCS8, pem.NoEncryption()
    )
    (tmp_path / "k").write_bytes(key)  # as `warm keygen` or `openssl genpkey` writes one
    assert warm("sign", bundle, "--key", tmp_path / "k").returncode == 0
    with sqlite3.connect(bundle) as conn:
        conn.execute("UPDATE signatures SET signed_at = 4102444800")  # 2100, valid still
    said = [ln for ln in warm("verify", bundle).stdout.splitlines() if "signature: key" in ln]
    assert len(said) == 1 and ", dated 2100-01-01" in said[0] and "(unsigned): valid" in said[0]
