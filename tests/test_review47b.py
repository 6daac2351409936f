"""review47b: a hostile review of `rt.can_build`, `pinned` (a relative bundle where a workload
changes folder), and hostile47's hardening of warm's home (`toolchains.json`'s remembered lines,
`host-libraries/`). Each test failed before its fix."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_trial47a import CHDIR  # a workload that moves to its data folder as it is imported

# A fast path the workload can do without (README's "the workload contract"), a numpy fallback
# computing the same bytes.
OPTIONAL = """
import numpy as np
from warmcli import Kernel

FAST = Kernel("void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * 2 + 1; }",
              "scale", "Pi")


def workload(rt):
    x = np.arange(16, dtype=np.float32) / 3
    if rt.can_build(FAST):
        buf = rt.upload(x)
        rt.launch(FAST, buf, 16)
        x = rt.read(buf)
    else:
        x = x * np.float32(2) + np.float32(1)
    print("fast" if rt.can_build(FAST) else "fallback", x.tobytes().hex())
"""

SERVE = """
import runpy, sys, warmcli
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
"""


def _serve(
    warm: Warm, workload: Path, bundle: Path | str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SERVE, str(workload)],
        capture_output=True,
        text=True,
        env=dict(warm.env, WARM_BUNDLE=str(bundle), **env),
        timeout=120,
    )


def test_can_build_is_false_where_the_bundles_build_cannot_be_served(
    warm: Warm, tmp_path: Path
) -> None:
    workload = tmp_path / "opt.py"
    workload.write_text(OPTIONAL)
    bundle = tmp_path / "opt.warm"
    done = warm("run", workload, "--bundle", bundle, "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    no_cc = {"WARM_CC": str(tmp_path / "no-such-cc")}
    cold = _serve(warm, workload, "", **no_cc)
    assert cold.stdout.startswith("fallback"), cold.stderr
    served = _serve(warm, workload, bundle, **no_cc)
    assert served.stdout.startswith("fast"), served.stderr
    assert served.stdout.split()[1] == cold.stdout.split()[1]
    # Its blob damaged (a disk's, a copy's): not served, so no build of it here either.
    with sqlite3.connect(bundle) as db:
        db.execute("UPDATE blobs SET data = zeroblob(size)")
    damaged = _serve(warm, workload, bundle, **no_cc)
    assert damaged.returncode == 0, damaged.stderr
    assert damaged.stdout == cold.stdout


def test_a_remembered_version_line_longer_than_warm_writes_is_read_again(
    warm: Warm, tmp_path: Path
) -> None:
    import json

    workload = tmp_path / "opt.py"
    workload.write_text(OPTIONAL)
    done = warm("run", workload, "-b", tmp_path / "a.warm", "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    remembered = Path(warm.env["WARM_HOME"]) / "toolchains.json"
    lines = json.loads(remembered.read_text())
    forged = {
        k: v + " " + "x" * (4100 - len(v)) if k.startswith("cc|") else v for k, v in lines.items()
    }
    assert forged != lines
    remembered.write_text(json.dumps(forged, indent=0))
    remembered.chmod(0o600)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "--allow-discarded-reads")
    assert done.returncode == 0, done.stdout + done.stderr
    done = warm("check", tmp_path / "b.warm")
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "a.warm") as a, sqlite3.connect(tmp_path / "b.warm") as b:
        sql = "SELECT key, toolchain FROM kernels"
        assert a.execute(sql).fetchall() == b.execute(sql).fetchall()


@pytest.mark.parametrize("home", ["home", "off"])  # off: a folder's name to WARM_HOME (stop 60)
def test_a_relative_warm_home_is_the_callers_though_the_workload_moves(
    warm: Warm, tmp_path: Path, home: str
) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "w.py").write_text(CHDIR)
    done = warm.with_env(WARM_HOME=home)("run", "app/w.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = warm.with_env(WARM_HOME=home)("verify", "--workload", "app/w.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list((tmp_path / "app" / "data").iterdir())  # its remembered lines, libraries
    assert (tmp_path / home / "toolchains.json").is_file()


STILL = CHDIR.replace(
    'os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))', ""
)


def test_a_bundle_named_through_a_linked_folders_parent_is_the_one_the_system_names(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "w.py").write_text(CHDIR)
    (tmp_path / "app" / "still.py").write_text(STILL)
    (tmp_path / "other" / "dir").mkdir(parents=True)
    (tmp_path / "sub").symlink_to(tmp_path / "other" / "dir")  # sub/.. is other, not here
    for workload, name in (("app/still.py", "s.warm"), ("app/w.py", "m.warm")):
        done = warm("run", workload, "-b", f"sub/../{name}", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / "other" / name).is_file() and not (tmp_path / name).exists()
        done = warm("verify", f"sub/../{name}", "--workload", workload, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    served = subprocess.run(
        [sys.executable, "-c", SERVE, "app/still.py"],
        capture_output=True,
        text=True,
        env=dict(warm.env, WARM_BUNDLE="sub/../s.warm", WARM_REPORT="1"),
        cwd=tmp_path,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr
    assert "compiled 0 kernel" in served.stderr, served.stderr


def test_a_workload_working_in_a_folder_it_removed_still_warms(warm: Warm, tmp_path: Path) -> None:
    gone = CHDIR.replace(
        'os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))',
        "import tempfile; gone = tempfile.mkdtemp(); os.chdir(gone); os.rmdir(gone)",
    )
    (tmp_path / "gone.py").write_text(gone)
    done = warm("run", "gone.py", "-b", "g.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify: compiled 0 kernels" in done.stdout


# The workload moves, then starts a process of its own that serves `WARM_BUNDLE` (spawned: it
# starts in the workload's folder, with warm's environment).
SPAWNING = (
    CHDIR
    + """

def child():
    import warmcli

    rt = warmcli.runtime("host")
    rt.launch(K, rt.buffer(1))


def workload(rt):
    import multiprocessing

    rt.launch(K, rt.buffer(1))
    spawned = multiprocessing.get_context("spawn").Process(target=child)
    spawned.start()
    spawned.join()
    assert spawned.exitcode == 0, spawned.exitcode
"""
)


def test_a_child_the_moved_workload_spawns_serves_the_callers_bundle(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "w.py").write_text(SPAWNING)
    done = warm.with_env(WARM_BUNDLE="rel.warm")("run", "app/w.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "rel.warm").is_file()
    assert not list((tmp_path / "app" / "data").iterdir())


# A program cc runs, answering `--version` with a line of 1,000 characters (under the 1,024 a
# line is named whole in), else running the real one.
PROGRAM = """
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++)
    if (!strcmp(argv[a], "--version")) {
      printf("NAME (long) "); for (int i = 0; i < 1000; i++) putchar('v'); puts(""); return 0; }
  execv("REAL", argv); return 127;
}
"""


def test_a_toolchain_named_longer_than_a_bundle_holds_is_never_stored(
    warm: Warm, tmp_path: Path
) -> None:
    """Each part of cc's identity under 1,024 characters, the whole of it 5,275: `warm run`
    stored a kernel row and a fingerprint its own verify pass called corrupt (exit 1)."""
    import shutil

    cc1 = subprocess.run(["cc", "-print-prog-name=cc1"], capture_output=True, text=True)
    real = {"as": shutil.which("as"), "ld": shutil.which("ld"), "cc1": cc1.stdout.strip()}
    if not all(real.values()) or not Path(real["cc1"]).is_absolute():
        import pytest

        pytest.skip("no gcc toolchain with as, ld and cc1 here")
    programs = tmp_path / "programs"
    programs.mkdir()
    for name, where in real.items():
        source = tmp_path / f"{name}.c"
        source.write_text(PROGRAM.replace("NAME", name).replace("REAL", str(where)))
        subprocess.run(["cc", "-o", str(programs / name), str(source)], check=True)
    workload = tmp_path / "opt.py"
    workload.write_text(OPTIONAL)
    moved = warm.with_env(COMPILER_PATH=f"{programs}:/{'p' * 900}")
    done = moved("run", workload, "-b", tmp_path / "l.warm", "--allow-discarded-reads")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "never served (its toolchain's name is" in done.stdout
    done = moved("check", tmp_path / "l.warm")
    assert done.returncode == 0, done.stdout + done.stderr
