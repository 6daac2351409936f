"""Holes hostile41b found in what the last stop added, each reproduced for real: the real CLI
in a subprocess, a real dask cluster, real production processes, real SQLite files."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_trial41b import SERVE, SIZED


def test_dask_run_rewarms_an_unsigned_tune_dated_later_than_its_shards_measurement(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    """A write-back's tune no trusted key signed is the run's to measure again, whatever its
    date: a local `warm run --key` under WARM_TRUSTED_KEYS measures it (a miss, `unsigned`) and
    stores and signs its own. `warm run --dask` ranked OUT's unsigned row against the shard's
    measurement as a merge ranks two measurements: the row dated an hour ahead (a clock ahead
    on the production machine, or a bundle dated so) outranked the shard's, stayed unsigned,
    and the verify pass exited 1 (`miss: ... unsigned`)."""
    workload, key = tmp_path / "w.py", tmp_path / "ci.key"
    workload.write_text(SIZED)
    assert warm("keygen", key).returncode == 0
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "--key", key, "-q").returncode == 0
    env = dict(warm.env, SIZES="8,16")
    back = subprocess.run(
        [sys.executable, "-c", SERVE, str(workload), str(bundle), "write"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert back.returncode == 0 and "wrote 1 entries back" in back.stderr, back.stderr
    with sqlite3.connect(bundle) as conn:  # the write-back's row, dated an hour ahead
        ahead = time.time() + 3600
        conn.execute("UPDATE tunes SET measured_at = ? WHERE shape_key LIKE '%16%'", (ahead,))
    conn.close()
    trusted = warm.with_env(SIZES="8,16", WARM_TRUSTED_KEYS=f"{key}.pub")  # forked
    assert trusted("verify", bundle).returncode == 1  # 1 entry no trusted key signed
    local = tmp_path / "local.warm"
    shutil.copy(bundle, local)
    ran = trusted("run", workload, "-b", local, "--key", key, "-q")
    assert ran.returncode == 0, ran.stderr
    dask = ("--dask", dask_scheduler, "--dask-env", "SIZES")
    done = trusted("run", workload, "-b", bundle, "--key", key, *dask, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    doc = json.loads(done.stdout)
    assert doc["explanations"] == [] and doc["verified"] is True, done.stdout
    for made in (bundle, local):
        checked = trusted("verify", made, "--workload", workload)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "not signed" not in checked.stdout, checked.stdout


def test_pull_refuses_a_url_naming_a_file_longer_than_a_name_may_be_in_one_short_line(
    warm: Warm, tmp_path: Path
) -> None:
    """A URL whose last part decodes to a name longer than a file's name may be (255 bytes)
    was taken as the name to write, and the first look at it failed with the system's words,
    the whole name in them: `warm: error: [Errno 36] File name too long: 'aaaa...'`, 100,000
    characters on the terminal. It is refused as any name a pull cannot write, in a short
    line, nothing fetched and nothing written."""
    here = tmp_path / "here"
    here.mkdir()
    for url in (f"https://127.0.0.1:9/{'a' * 100_000}.warm", f"s3://b/{'%C3%A9' * 200}"):
        done = warm("pull", url, cwd=here)
        assert done.returncode == 2 and not done.stdout, done.stderr[:300]
        line = done.stderr.strip()
        assert "\n" not in line and len(line) < 600 and "Errno" not in line, line[:300]
        assert "longer than a file name" in line and "name the file to write" in line, line
    assert not list(here.iterdir())


def test_a_seed_holds_only_what_was_judged_signed_though_a_write_back_lands_meanwhile(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shard_seeds` judged the bundle wholly signed, then read it again to write the seeds:
    a production write-back committing in between (a fleet writes back at every exit) went
    into a seed unjudged. Its shard serves it as a hit and hands it back, and the merge
    (`as_run`) takes that row, alike to the bundle's own unsigned one, as rebuilt by the run
    and signs it with the run's key: a binary production wrote, signed though nothing of
    the run built it. The timing is forced for real: the write-back's rows (made by a real
    production process into a copy) are committed into the bundle the moment the judgment
    returns, by another connection, as a process of the fleet would; the seeds are now read
    in the judgment's own read transaction, so that commit waits (here: refused, busy) and
    lands after them."""
    from warmcli.bundle.signature_report import signature_report
    from warmcli.bundle.signing import load_public_key
    from warmcli.bundle.store import Bundle
    from warmcli.ops.merge import merge_bundles
    from warmcli.warming import seeds as seeds_module

    workload, key = tmp_path / "w.py", tmp_path / "ci.key"
    workload.write_text(SIZED)
    assert warm("keygen", key).returncode == 0
    bundle = tmp_path / "b.warm"
    env = dict(warm.env, SIZES="8,16")
    ran = warm.with_env(SIZES="8,16")("run", workload, "-b", bundle, "--key", key, "-q")
    assert ran.returncode == 0, ran.stderr
    written = tmp_path / "written.warm"  # what a production process writes back: EXTRA's kernel
    shutil.copy(bundle, written)
    back = subprocess.run(
        [sys.executable, "-c", SERVE, str(workload), str(written), "write"],
        capture_output=True, text=True, env=dict(env, EXTRA="1"), timeout=120,
    )  # fmt: skip
    assert back.returncode == 0 and "wrote 1 entries back" in back.stderr, back.stderr
    trusted = [load_public_key(f"{key}.pub")]
    landed: list[str] = []

    def judged_then_written_back(source: Any, keys: Any) -> Any:
        report = signature_report(source, keys)
        conn = sqlite3.connect(bundle, timeout=0)
        try:
            conn.execute("ATTACH ? AS w", (str(written),))
            conn.execute("INSERT INTO blobs SELECT * FROM w.blobs WHERE sha256 NOT IN "
                         "(SELECT sha256 FROM blobs)")  # fmt: skip
            conn.execute("INSERT INTO kernels SELECT * FROM w.kernels WHERE key NOT IN "
                         "(SELECT key FROM kernels)")  # fmt: skip
            conn.commit()
            landed.append("before the seeds")
        except sqlite3.OperationalError as exc:  # busy: the seeds' read holds the file
            landed.append(str(exc))
        finally:
            conn.close()
        return report

    monkeypatch.setattr(seeds_module, "signature_report", judged_then_written_back)
    folder = tmp_path / "seeds"
    folder.mkdir()
    sown = seeds_module.shard_seeds(bundle, 1, folder, trusted)
    (seed,) = sown.paths
    assert seed is not None, sown.notes
    assert landed == ["database is locked"], landed  # it waits for the seeds' read to end
    with sqlite3.connect(seed) as conn:
        in_seed = conn.execute("SELECT count(*) FROM kernels").fetchone()[0]
    conn.close()
    out = tmp_path / "out.warm"  # the bundle with the write-back's row, as at the merge
    shutil.copy(written, out)
    merge_bundles([out, seed], out, overwrite=True, signing_key=_key(key),
                  trusted_keys=trusted, as_run=True)  # fmt: skip
    with Bundle.open(out, trusted_keys=trusted) as merged:
        refused = signature_report(merged, trusted).problems
    assert refused, f"a row nothing of the run built was signed ({landed}, {in_seed} in seed)"


def _key(path: Path) -> Any:
    from warmcli.bundle.signing import load_private_key

    return load_private_key(path)
