"""A new user's fleet trial (stop 41, b): one bundle warmed on CI, signed, shared and
served by many production processes at once, on workloads warm had not seen. The real CLI
and real production processes in subprocesses, the real cc, real SQLite files."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A tunable whose `key=` text holds a newline (a user's own key), and one plain kernel.
NEWLINE_KEY = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void f(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 2 + V; }"
T = Tunable("dbl", {f"v{v}": Kernel(SRC, "f", "Pi", defines={"V": v}) for v in (0, 0.0)},
            lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, stream=stream),
            key=lambda y, n: f"rows\\n{n}")
ONE = Kernel("void one(float *y) { y[0] = 1; }", "one", "P")
def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8)
    rt.launch(ONE, y)
"""
SERVE = """
import runpy, sys
import warmcli
warmcli.use_bundle(sys.argv[2], write=sys.argv[3] == "write")
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime())
"""


def _serve(warm: Warm, workload: Path, bundle: Path, how: str) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_REPORT="1")
    return subprocess.run(
        [sys.executable, "-c", SERVE, str(workload), str(bundle), how],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_warm_report_names_a_bundle_path_and_a_tune_key_holding_a_newline_on_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """`WARM_REPORT=1` printed a bundle path holding a newline (`odd/n<LF>l.warm`) and a
    miss's tune key holding one (a `key=` text) raw, each over two lines, while its own
    write-back line and `warm stats` wrote them escaped (`\\x0a`)."""
    workload = tmp_path / "w.py"
    workload.write_text(NEWLINE_KEY)
    folder = tmp_path / "odd\nplace"
    folder.mkdir()
    bundle = folder / "b\nl.warm"
    made = warm("run", workload, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr
    served = _serve(warm, workload, bundle, "read")
    assert served.returncode == 0, served.stderr
    assert served.stderr.count("\n") == 1, served.stderr
    assert "b\\x0al.warm served everything" in served.stderr, served.stderr
    other = tmp_path / "other\nb.warm"  # holds the plain kernel only: the tune is a miss
    (tmp_path / "one.py").write_text(NEWLINE_KEY.replace("    rt.tune(T, y, 8)\n", ""))
    assert warm("run", tmp_path / "one.py", "-b", other, "-q").returncode == 0
    for how in ("read", "write"):
        served = _serve(warm, workload, other, how)
        assert served.returncode == 0, served.stderr
        lines = served.stderr.splitlines()
        assert all(line.startswith(("warm: ", "  ")) for line in lines), served.stderr
        assert any(line.startswith("  tune dbl rows\\x0a8 on host") for line in lines), lines
        assert any("other\\x0ab.warm lacked 2 kernel(s) and 1 tune(s)" in x for x in lines)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over plain http on this machine (as `python -m http.server` serves
    it, each URL path percent-decoded into a file name), and its base URL."""
    folder = tmp_path / "www"
    folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_pull_without_path_names_the_file_as_its_url_decodes_not_percent_encoded(
    warm: Warm, tmp_path: Path, served_folder: tuple[Path, str]
) -> None:
    """An https:// URL is ASCII (the README: `é` as `%C3%A9`), so `warm pull
    http://host/fleet%20%C3%A9.warm` with no PATH wrote a file named `fleet%20%C3%A9.warm`,
    not the bundle's name `fleet é.warm`; a name that decodes to a folder's (`%2F`) or to
    a control character is refused, as a dot file is: name PATH."""
    folder, base = served_folder
    workload = tmp_path / "w.py"
    workload.write_text(NEWLINE_KEY)
    assert warm("run", workload, "-b", folder / "fleet é.warm", "-q").returncode == 0
    here = tmp_path / "here"
    here.mkdir()
    pulled = warm("pull", f"{base}/fleet%20%C3%A9.warm", cwd=here)
    assert pulled.returncode == 0, pulled.stderr
    assert [p.name for p in here.iterdir() if not p.name.endswith(".lock")] == ["fleet é.warm"]
    assert pulled.stdout.strip().endswith("into fleet é.warm"), pulled.stdout
    assert (here / "fleet é.warm").read_bytes() == (folder / "fleet é.warm").read_bytes()
    (folder / "sub").mkdir()
    (folder / "sub" / "x.warm").write_bytes((folder / "fleet é.warm").read_bytes())
    (folder / "n\nl.warm").write_bytes((folder / "fleet é.warm").read_bytes())
    for name in ("sub%2Fx.warm", "n%0Al.warm", "%2E%2E", "%2Ebashrc"):
        refused = warm("pull", f"{base}/{name}", cwd=here)
        assert refused.returncode == 2, (name, refused.stdout)
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert "name the file to write" in refused.stderr, refused.stderr
    assert sorted(p.name for p in here.iterdir()) == ["fleet é.warm", "fleet é.warm.lock"]


def _as_another_user() -> tuple[str, ...]:
    """A prefix that runs a command as root without the capabilities to write others'
    files and folders (the tests run as root), or () where they run as another user."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("setpriv"):
        pytest.skip("root without setpriv: every folder is writable")
    caps = "-dac_override,-dac_read_search,-fowner"
    return ("setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}")


def test_a_bundle_in_a_folder_not_writable_says_its_folder_not_the_file(
    warm: Warm, tmp_path: Path
) -> None:
    """A bundle file writable by all (and its lock) in a folder the user may not write: a
    write-back, `warm run` and `warm sign` said `cannot write the bundle (attempt to write a
    readonly database)`, as for a read-only file, though the file may be written (SQLite
    could not make its journal beside it); `warm merge -o` into that folder named a
    temporary file it had made up (`.b.warm.123.merge: cannot create the write lock
    .b.warm.123.merge.lock`), not OUT. Each now names the folder, nothing written."""
    workload = tmp_path / "w.py"
    workload.write_text(NEWLINE_KEY)
    folder = tmp_path / "shared é"
    folder.mkdir()
    bundle = folder / "b.warm"
    other = tmp_path / "other.warm"
    (tmp_path / "one.py").write_text(NEWLINE_KEY.replace("    rt.tune(T, y, 8)\n", ""))
    assert warm("run", tmp_path / "one.py", "-b", bundle, "-q").returncode == 0
    assert warm("run", workload, "-b", other, "-q").returncode == 0
    before = bundle.read_bytes()
    bundle.chmod(0o666)
    (folder / "b.warm.lock").chmod(0o666)
    folder.chmod(0o555)
    prefix = _as_another_user()
    env = dict(warm.env, WARM_REPORT="1")
    try:
        serve = [*prefix, sys.executable, "-c", SERVE, str(workload), str(bundle), "write"]
        done = subprocess.run(serve, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"NOT written back: {bundle}: cannot write the bundle: its folder " in done.stderr
        for args in (
            ("run", workload, "-b", bundle, "-q"),
            ("merge", other, bundle, "-o", bundle),
            ("merge", other, "-o", folder / "new.warm"),
        ):
            cli = [*prefix, sys.executable, "-m", "warmcli", *map(str, args)]
            done = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=120)
            assert done.returncode == 2, (args, done.stderr)
            assert done.stderr.count("\n") == 1, done.stderr
            assert "its folder" in done.stderr and "not writable" in done.stderr, done.stderr
            assert ".merge" not in done.stderr, done.stderr
    finally:
        folder.chmod(0o755)
    assert bundle.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["b.warm", "b.warm.lock"]


# Tunes of sizes from SIZES; with EXTRA, one more kernel (a miss a write-back stores).
SIZED = """
import os
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void sc(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * F; }"
T = Tunable("sc", {f"f{f}": Kernel(SRC, "sc", "Pi", defines={"F": f}) for f in (2, 2.0)},
            lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, stream=stream))
def workload(rt):
    for n in map(int, os.environ.get("SIZES", "8").split(",")):
        rt.tune(T, rt.upload(np.ones(n, np.float32)), n)
    if os.environ.get("EXTRA"):
        ex = Kernel("void ex(float *y) { y[0] = EX; }", "ex", "P", defines={"EX": 3})
        rt.launch(ex, rt.buffer(1))
"""


def test_dask_run_under_trusted_keys_rewarms_what_they_did_not_sign_as_a_local_run(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    """A signed bundle that production wrote back into (a tune and a kernel no trusted key
    signed): a local `warm run --key` under WARM_TRUSTED_KEYS measures and builds them again
    (misses: `unsigned`), stores and signs them, exit 0. `warm run --dask` did the same on
    its shards, but its merge kept the bundle's own unsigned rows over the shards' (as it
    keeps a pick the bundle held), so they stayed unsigned and its verify pass exited 1
    (`miss: ... unsigned`). Now it ends as the local run does."""
    workload, key = tmp_path / "w.py", tmp_path / "ci.key"
    workload.write_text(SIZED)
    assert warm("keygen", key).returncode == 0
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "--key", key, "-q").returncode == 0
    env = dict(warm.env, SIZES="8,16", EXTRA="1")
    back = subprocess.run(
        [sys.executable, "-c", SERVE, str(workload), str(bundle), "write"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert back.returncode == 0 and "wrote 2 entries back" in back.stderr, back.stderr
    trusted = warm.with_env(SIZES="8,16", EXTRA="1", WARM_TRUSTED_KEYS=f"{key}.pub")  # forked
    assert trusted("verify", bundle).returncode == 1  # 2 entries no trusted key signed
    local = tmp_path / "local.warm"
    shutil.copy(bundle, local)
    ran = trusted("run", workload, "-b", local, "--key", key, "-q")
    assert ran.returncode == 0, ran.stderr
    dask = ("--dask", dask_scheduler, "--dask-env", "SIZES", "--dask-env", "EXTRA")
    done = trusted("run", workload, "-b", bundle, "--key", key, *dask, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    doc = json.loads(done.stdout)
    assert doc["explanations"] == [] and doc["verified"] is True, done.stdout
    assert "and 1 new tune(s)" in ran.stdout, ran.stdout  # the tune measured again
    assert doc["stored"]["tunes"] == 1  # (its kernel too, as its shard batched it, or kept)
    for made in (bundle, local):
        checked = trusted("verify", made, "--workload", workload)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "not signed" not in checked.stdout, checked.stdout
        rows = re.search(r"covers (\d+) of (\d+) row", checked.stdout)
        assert rows is not None and rows[1] == rows[2], checked.stdout
    assert len(warm.json("stats", bundle)["kernels"]) == 3
