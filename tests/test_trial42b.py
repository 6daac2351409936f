"""trial42b: a host-backend service under Kubernetes, as an ops engineer runs it.

- A pod stopped while its at-exit report waited to read the bundle (another process held
  SQLite's lock: a merge's or another pod's commit), its SIGTERM handled with `sys.exit` as
  the README advises (or a Ctrl-C), printed Python's "Exception ignored in atexit callback"
  and a traceback: the report read the bundle before the guarded write-back. Now that is
  the write-back's one line, `warm: could not write back into the bundle: interrupted`,
  and the bundle is left as it was.
- A container run under a random uid (no passwd entry) with `HOME` unset: working out
  warm's home raised platformdirs' `RuntimeError` ("could not determine the home
  directory") from the first launch, hot or cold: the service died with a traceback. With
  `HOME=/`, what containerd and Docker set for such a uid, warm's home was `/.cache/warm`,
  which a read-only root refuses: every process re-checked its compiler, kept its host
  libraries in a temporary folder of its own, and could not keep a bundle named by URL
  (`warm pull` and a URL's `WARM_BUNDLE` failed). Now warm's home is then `warm-<uid>` in
  `TMPDIR`, and the service serves as with a home; a `warm-<uid>` there that is not this
  user's own (another's, writable by all, a link) is not taken: nothing is kept.

Real CLI and production processes in subprocesses, the system cc, real SQLite files; the
random uid is a real user namespace (`unshare --map-user`), skipped where there is none.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_cli import ForkedWarm
from full_disk import in_private_mount

WORKLOAD = r"""
import os
import numpy as np
from warmcli import Kernel
DEVICE = "host"
def _k(name, expr):
    src = "void %s(const float *x, float *y, int n) { for (int i = 0; i < n; i++) y[i] = %s; }"
    return Kernel(src % (name, expr), name, "PPi")
KERNELS = [_k("scale", "x[i] * 1.5f"), _k("relu", "x[i] > 0.0f ? x[i] : 0.0f")]
def compute(rt, extra=""):
    x = rt.upload(np.random.default_rng(0).standard_normal(256, dtype=np.float32))
    outs = []
    for k in KERNELS + ([_k("extra_" + extra, "x[i] + 7.0f")] if extra else []):
        y = rt.buffer(256, "float32")
        rt.launch(k, x, y, 256)
        outs.append(y)
    return outs
def workload(rt):
    compute(rt, os.environ.get("EXTRA", ""))
"""

# The service: serves one request (with a kernel the bundle lacks where MISS is set),
# prints its results' hash, says it is done, and exits once GO exists; SIGTERM -> sys.exit.
SERVICE = r"""
import hashlib, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
import warmcli, svc
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
rt = warmcli.runtime()
h = hashlib.sha256()
for y in svc.compute(rt, os.environ.get("MISS", "")):
    h.update(rt.read(y).tobytes())
print(h.hexdigest(), flush=True)
if os.environ.get("DONE"):
    open(os.environ["DONE"], "w").close()
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.01)
    if os.environ.get("AGAIN"):  # a later request, with a kernel not read yet
        h = hashlib.sha256()
        for y in svc.compute(rt, os.environ["AGAIN"]):
            h.update(rt.read(y).tobytes())
        print(h.hexdigest(), flush=True)
"""


@pytest.fixture(scope="module")
def warmed_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """A folder holding `app/svc.py` (WORKLOAD), `app.warm` (its bundle, from `warm run`)
    and `home`, the warm home that warmed it, once for the module (the run forked,
    `tests/forked_cli.py`): what `_bundle` copies for each test, which may write into its
    copy."""
    base = tmp_path_factory.mktemp("trial42b")
    (base / "app").mkdir()
    (base / "app" / "svc.py").write_text(WORKLOAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    done = warm("run", base / "app" / "svc.py", "--bundle", base / "app.warm", "-q")
    assert done.returncode == 0, done.stderr
    return base


def _bundle(warm: Warm, tmp_path: Path, warmed_once: Path) -> Path:
    """`app/svc.py` in `tmp_path` and its bundle (returned), `warmed_once`'s copied with
    the warm home that warmed it as `warm`'s home, as a run there would leave them."""
    shutil.copytree(warmed_once, tmp_path, dirs_exist_ok=True, symlinks=True)
    assert warm.env["WARM_HOME"] == str(tmp_path / "home")
    return tmp_path / "app.warm"


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_the_exit_report_waits_for_the_bundle_is_the_report_not_written_back(
    warm: Warm, tmp_path: Path, stop: signal.Signals, warmed_once: Path, forked: Any
) -> None:
    bundle = _bundle(warm, tmp_path, warmed_once)
    before = bundle.read_bytes()
    done, go = tmp_path / "done", tmp_path / "go"
    env = dict(
        warm.env,
        WARM_BUNDLE=str(bundle),
        WARM_BUNDLE_WRITE="1",
        WARM_REPORT="1",
        MISS="late",
        DONE=str(done),
        GO=str(go),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(tmp_path / "app")],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(done, proc)
    holder = sqlite3.connect(bundle, isolation_level=None)  # another writer mid-commit
    try:
        holder.execute("BEGIN EXCLUSIVE")
        go.touch()  # the service exits: its report waits for the lock
        time.sleep(1.0)
        proc.send_signal(stop)  # kubelet's SIGTERM (or a Ctrl-C) lands there
        time.sleep(0.5)  # (handled once SQLite's busy wait returns: the lock is let go)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    # one report, made again reading no bundle, saying the write-back was cut (trial44a:
    # before, only "could not write back into the bundle: interrupted", the misses unsaid)
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"warm: bundle {bundle} lacked 1 kernel"), err
    assert lines[0].endswith("(NOT written back: interrupted):"), err
    assert lines[1].startswith("  kernel extra_late on host (key "), err
    assert len(out.split()) == 1
    assert bundle.read_bytes() == before  # nothing written, nothing lost
    assert forked(warm)("verify", bundle).returncode == 0  # (a verdict: forked)


@pytest.mark.parametrize(("home", "planted"), [(None, False), ("/", False), ("/", True)])
def test_a_random_uid_with_no_home_serves_from_a_home_in_tmpdir(
    warm: Warm, tmp_path: Path, home: str | None, planted: bool, warmed_once: Path
) -> None:
    unshare = shutil.which("unshare")
    userns = [unshare or "unshare", "--user", "--map-user=54321", "--map-group=54321"]
    if unshare is None or subprocess.run([*userns, "true"], capture_output=True).returncode:
        pytest.skip("no user namespace here to run as a uid with no passwd entry")
    bundle = _bundle(warm, tmp_path, warmed_once)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    folder = tmp / "warm-54321"
    if planted:  # made by someone else in the shared TMPDIR, writable by every user
        folder.mkdir()
        folder.chmod(0o777)
    code = [sys.executable, "-c", SERVICE, str(tmp_path / "app")]
    unset = ("HOME", "WARM_HOME", "XDG_CACHE_HOME")
    base = {k: v for k, v in warm.env.items() if k not in unset}
    if home is not None:  # what a container runtime sets for a uid it knows no home of
        base["HOME"] = home
    results = {}
    for name, where in (("cold", ""), ("hot", str(bundle))):
        env = dict(base, TMPDIR=str(tmp), WARM_BUNDLE=where, WARM_REPORT="1")
        proc = subprocess.run(
            [*userns, *code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        results[name] = proc.stdout
    assert results["hot"] == results["cold"] != ""
    if planted:  # not taken: nothing kept there, nothing loaded from there
        assert list(folder.iterdir()) == []
    else:
        assert (folder / "toolchains.json").is_file()
        assert any((folder / "host-libraries").iterdir())
    assert not (Path(ROOT) / "~").exists()  # no `~/.cache` relative to the working folder
    assert os.listdir(tmp) == ["warm-54321"]


def test_a_configmap_volume_swapped_under_a_service_and_a_write_back_on_it(
    warm: Warm, tmp_path: Path, warmed_once: Path
) -> None:
    """Kubernetes' layout (`..<stamp>/app.warm`, `..data` -> it, `app.warm` ->
    `..data/app.warm`) bind-mounted read-only: a service that opened the bundle keeps
    serving, as cold, after an update swapped `..data` and deleted its folder; a write-back
    there is one line naming the read-only file system once (it named the lock file twice)."""
    bundle = _bundle(warm, tmp_path, warmed_once)
    extra = Warm(dict(warm.env, EXTRA="late"))  # its blob read only by a later request
    assert extra("run", tmp_path / "app" / "svc.py", "--bundle", bundle, "-q").returncode == 0
    volume, mount = tmp_path / "volume", tmp_path / "mnt"
    (volume / "..2026_12_05_x").mkdir(parents=True)
    mount.mkdir()
    shutil.copy(bundle, volume / "..2026_12_05_x" / "app.warm")
    (volume / "..data").symlink_to("..2026_12_05_x")
    (volume / "app.warm").symlink_to("..data/app.warm")
    shutil.copy(bundle, tmp_path / "new.warm")
    py = f"{sys.executable} -c '{SERVICE}' {tmp_path / 'app'}"
    update = (  # kubelet's update: a new folder, `..data` swapped, the old folder deleted
        f"cd {volume} && mkdir ..y && cp {tmp_path}/new.warm ..y/app.warm && "
        "ln -s ..y ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..2026_12_05_x"
    )
    script = (
        f"mount --bind {volume} {mount} && mount -o remount,bind,ro {mount} || exit 99; "
        f"export WARM_BUNDLE={mount}/app.warm DONE={tmp_path}/done GO={tmp_path}/go; "
        f"AGAIN=late WARM_REPORT=1 {py} > {tmp_path}/before.out 2> {tmp_path}/before.err & "
        f"while [ ! -f {tmp_path}/done ]; do sleep 0.01; done; {update}; touch {tmp_path}/go; "
        f"wait $! || echo failed; DONE= MISS=other WARM_BUNDLE_WRITE=1 {py} 2>&1; echo rc=$?"
    )
    env = {k: v for k, v in warm.env.items() if k != "WARM_BUNDLE"}
    proc = in_private_mount(script, env, timeout=120)
    cold = {
        miss: subprocess.run(
            [sys.executable, "-c", SERVICE, str(tmp_path / "app")],
            env=dict(env, WARM_BUNDLE="", MISS=miss),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        for miss in ("", "late", "other")
    }
    assert (tmp_path / "before.out").read_text() == cold[""] + cold["late"]
    served = f"warm: bundle {mount}/app.warm served everything: compiled 0 kernels, tuned 0"
    assert (tmp_path / "before.err").read_text() == f"{served} operations\n"
    out, err_line, rc = proc.stdout.splitlines()
    assert rc == "rc=0" and out == cold["other"].strip(), proc.stdout + proc.stderr
    assert err_line.startswith("warm: could not write back into the bundle: "), err_line
    assert "Read-only file system" in err_line and err_line.count("app.warm.lock") == 1, err_line
