"""What warm's home holds is believed only when this user alone wrote it: a host library
replaced by a same-size file, a symbolic link or a hard link is never executed, and a
`toolchains.json` others may write (or another user owns) is not read.

Each case is the real CLI in a subprocess over a real bundle; the attacker's library is
a real shared object whose constructor leaves a marker file when it is loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_hostile_schema import attacker_blob

from warmcli.backends.host.libraries import DIRECTORY, LibraryCache

WORKLOAD = """\
from warmcli import Kernel

SRC = ("static const volatile char pad[40000] = {1};\\n"
       "void fill(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 2.0f + pad[0]; }")
FILL = Kernel(SRC, "fill", "Pi")

def workload(rt):
    x = rt.buffer(16)
    rt.launch(FILL, x, 16)
"""


def replace_same_size(library: Path, evil: Path) -> None:
    library.write_bytes(evil.read_bytes())  # in place: same inode, owner and mode


def replace_by_symlink(library: Path, evil: Path) -> None:
    library.unlink()
    library.symlink_to(evil)


def replace_by_hard_link(library: Path, evil: Path) -> None:
    library.unlink()
    os.link(evil, library)


def test_a_replaced_or_linked_host_library_is_never_executed(warm: Warm, tmp_path: Path) -> None:
    workload, bundle = tmp_path / "fill.py", tmp_path / "b.warm"
    workload.write_text(WORKLOAD)
    assert warm("run", workload, "--bundle", bundle, "-q").returncode == 0
    (library,) = (Path(warm.env["WARM_HOME"]) / DIRECTORY).glob("*.so")
    genuine = library.read_bytes()
    marker = tmp_path / "PWNED"
    payload = attacker_blob(tmp_path, marker)
    assert len(payload) < len(genuine)
    evil = tmp_path / "evil.so"
    evil.write_bytes(payload + bytes(len(genuine) - len(payload)))  # the same size
    evil.chmod(0o600)
    for attack in (replace_same_size, replace_by_symlink, replace_by_hard_link):
        attack(library, evil)
        proc = warm("verify", bundle, "--workload", workload)
        assert proc.returncode == 0, (attack.__name__, proc.stdout, proc.stderr)
        assert not marker.exists(), f"{attack.__name__}: the attacker's library was loaded"
        assert not library.is_symlink() and library.stat().st_nlink == 1
        assert library.read_bytes() == genuine, "written again"


def test_a_toolchains_file_others_may_write_is_not_believed(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "fill.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "--bundle", bundle, "-q").returncode == 0
    remembered = Path(warm.env["WARM_HOME"]) / "toolchains.json"
    assert remembered.stat().st_mode & 0o777 == 0o600
    forged = {stamp: "cc (forged) 0.0" for stamp in json.loads(remembered.read_text())}
    for mode, owner in [(0o666, None), (0o644, 12345)]:
        remembered.write_text(json.dumps(forged))
        remembered.chmod(mode)
        if owner is not None:
            if os.getuid() != 0:
                continue  # only root can give a file away
            os.chown(remembered, owner, owner)
        proc = warm("check", bundle)  # its kernels are served only by the real cc
        assert proc.returncode == 0, (mode, owner, proc.stdout)
        remembered.unlink()


def test_one_library_loaded_twice_holds_one_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    source = tmp_path / "k.c"
    source.write_text("int answer(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "k.so", source], check=True)
    binary = (tmp_path / "k.so").read_bytes()
    first = LibraryCache().load(binary)  # written, hashed, loaded by its descriptor
    held = len(os.listdir("/proc/self/fd"))
    again = LibraryCache().load(binary)  # found, hashed, the same file: no new descriptor
    assert again.answer() == first.answer() == 42
    assert len(os.listdir("/proc/self/fd")) == held
