"""What a new user, reading only the README, hit in round 5: a CI engineer, a fleet
operator and a library author.

Through the real CLI in a subprocess, on real files: a shard whose part of the workload
is empty is said to be so, not "the workload launched nothing" (and `--json`'s
`launched_nothing` stays false); a WARM_HOME below a regular file is one line naming
WARM_HOME and that file, never a bare "Not a directory"; `warm check`, `warm verify`,
`warm diff` and `warm merge` given a URL name that URL, in their lines and their
`--json`, never the local copy in WARM_HOME that a script cannot map back.
"""

from __future__ import annotations

import json
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_remote import Store, http_store  # noqa: F401  (a fixture)

INC_DBL = """\
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(INC, rt.upload(np.zeros(4, np.int32)), 4)
"""


def _empty_shard(warm: Warm, script: Path, tmp_path: Path) -> str:
    """The shard of two (0/2 or 1/2) that holds nothing of a one-kernel workload."""
    for i in (0, 1):
        proc = warm("run", script, "-b", tmp_path / f"s{i}.warm", "--shard", f"{i}/2", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if json.loads(proc.stdout)["stored"]["kernels"] == 0:
            return f"{i}/2"
    raise AssertionError("both shards stored the one kernel")


def test_an_empty_shard_is_said_to_be_empty_not_a_workload_that_launched_nothing(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    script = workload_file(INC_DBL)
    shard = _empty_shard(warm, script, tmp_path)
    warm.env["WARM_SHARD"] = shard
    proc = warm("run", script, "-b", tmp_path / "env.warm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launched nothing" not in proc.stdout, proc.stdout
    assert f"shard {shard}: nothing of this workload falls in this shard" in proc.stdout
    proc = warm("run", script, "-b", tmp_path / "env.warm", "--json")
    assert json.loads(proc.stdout)["launched_nothing"] is False


def _served(
    warm: Warm,
    workload_file,
    bundle_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> str:
    """The URL at which the local store serves the bundle `warm run` made at `bundle_path`."""
    store, base, _ = http_store
    assert warm("run", workload_file(INC_DBL), "-b", bundle_path, "-q").returncode == 0
    store.files["/b.warm"] = bundle_path.read_bytes()
    return f"{base}/b.warm"


def test_commands_given_a_url_name_the_url_not_its_local_copy(
    warm: Warm,
    workload_file,
    bundle_path: Path,
    tmp_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    url = _served(warm, workload_file, bundle_path, http_store)
    copies = str(Path(warm.env["WARM_HOME"]) / "remote")
    for args in (("check", url), ("verify", url), ("diff", url, bundle_path)):
        proc = warm(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert url in proc.stdout and copies not in proc.stdout, (args, proc.stdout)
        proc = warm(*args, "--json")
        assert url in proc.stdout and copies not in proc.stdout, (args, proc.stdout)
    proc = warm("merge", url, bundle_path, "-o", tmp_path / "m.warm", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["sources"] == [url, str(bundle_path)], doc
    assert set(doc["contributed"]) == {url, str(bundle_path)}, doc
    proc = warm("merge", url, bundle_path, "-o", tmp_path / "m2.warm")
    assert url in proc.stdout and copies not in proc.stdout, proc.stdout


def test_a_warm_home_below_a_file_names_warm_home_and_the_file(
    warm: Warm,
    workload_file,
    bundle_path: Path,
    tmp_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    url = _served(warm, workload_file, bundle_path, http_store)
    blocker = tmp_path / "somefile"
    blocker.write_text("")
    for home in (blocker / "home", blocker / "a" / "b"):
        warm.env["WARM_HOME"] = str(home)
        said = f"warm: error: WARM_HOME={home} is below {blocker}, which is not a directory"
        commands = ("run", workload_file(INC_DBL), "-q"), ("stats",), ("check",), ("clean",)
        for args in (*commands, ("stats", url), ("verify", url)):
            proc = warm(*args)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert proc.stderr.startswith(said), proc.stderr
            assert len(proc.stderr.splitlines()) == 1, proc.stderr
