"""Stop 46's hot start of a host kernel whose include folders meet a system header: the
includes each system header reaches (`warmcli.system_shadows`) are remembered in warm's home,
believed by the stamps of every file and folder they were read from, so a second process reads
no system header; a changed or added system header is followed again, and an odd or hostile
remembered file is not believed (the key is computed as before). Each step is a real process
over real files in a real warm home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from forked_python import ForkedPythons

from warmcli.system_shadows import _entry, _stamp

# One process: `shadowed` for argv[3] through the system folders argv[1] (":"), the kernel
# folder argv[2]; what it found, which files under argv[4] it opened, and the key of a kernel
# including argv[3] with `-I argv[2]`.
SCRIPT = r"""
import json, sys
opened = []
sys.addaudithook(lambda e, a: opened.append(a[0]) if e == "open" and type(a[0]) is str else None)
import warmcli.backends.system_folders  # (it lends `system_shadows` warm's home)
from warmcli.headers import headers_digest
from warmcli.system_shadows import shadowed
system, kernel, name, tree = tuple(sys.argv[1].split(":")), sys.argv[2], sys.argv[3], sys.argv[4]
found = shadowed(name, ([kernel], [kernel]), system)
key = headers_digest(f"#include <{name}>\n", ("-I" + kernel,), system=lambda: system)
print(json.dumps({"found": found, "opened": sorted({p for p in opened if p.startswith(tree)}),
                  "key": key}))
"""


_python = ForkedPythons(ROOT)  # this module's servers, one an environment apart from WARM_*


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """`_run`'s forking servers, ended with the module."""
    yield
    _python.close()


def _run(tmp: Path, name: str = "top.h") -> dict[str, object]:
    system = f"{tmp / 'sys1'}:{tmp / 'sys2'}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"))
    proc = _python(env).run(
        SCRIPT, system, str(tmp / "k"), name, str(tmp / "sys"), env=env, cwd=tmp, timeout=60
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return dict(json.loads(proc.stdout))


def _tree(tmp: Path) -> None:
    """sys2/top.h includes <mid.h> and <bits/x.h>; mid.h includes <stddef.h> (in sys1); the
    kernel's folder `k` holds nothing yet."""
    for folder in ("sys1", "sys2/bits", "k"):
        (tmp / folder).mkdir(parents=True)
    (tmp / "sys1" / "stddef.h").write_text("#define SD 1\n")
    (tmp / "sys2" / "top.h").write_text("#include <mid.h>\n#include <bits/x.h>\n")
    (tmp / "sys2" / "mid.h").write_text('#include <stddef.h>\n#include "near.h"\n')
    (tmp / "sys2" / "bits" / "x.h").write_text("#define X 1\n")


@pytest.fixture(scope="module")
def _trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each test's `_tree`, made at once and settled by one wait (a file changed in the last
    `RACY_NS` is not remembered: its stamp may not tell the next change)."""
    trees = {name: tmp_path_factory.mktemp("tree") for name in globals() if name[:5] == "test_"}
    for tree in trees.values():
        _tree(tree)
    time.sleep(2.1)
    return trees


@pytest.fixture
def tree(_trees: dict[str, Path], request: pytest.FixtureRequest) -> Path:
    """This test's settled `_tree` (its own folder, its own warm home)."""
    return _trees[request.node.name]


def _stored(tmp: Path) -> list[Path]:
    return sorted((tmp / "home" / "system-headers").glob("*.json"))


def test_a_second_process_reads_no_system_header_and_keys_alike(tree: Path) -> None:
    first = _run(tree)
    assert first["found"] == [] and str(tree / "sys2" / "top.h") in first["opened"]
    assert len(_stored(tree)) == 1
    second = _run(tree)
    assert second["opened"] == [] and second["found"] == [] and second["key"] == first["key"]
    (tree / "k" / "stddef.h").write_text("#define SD 2\n")  # the kernel's folder: looked in
    third = _run(tree)
    assert third["found"] == [["stddef.h", False, str(tree / "sys2")]]
    assert third["opened"] == [] and third["key"] != first["key"]
    (tree / "home").rename(tree / "away")  # nothing remembered: the same key
    assert _run(tree)["key"] == third["key"]
    (tree / "home").rename(tree / "again")
    (tree / "home").write_text("")  # a home that is no folder: nothing kept, the same key
    assert _run(tree)["key"] == third["key"]


def test_a_system_header_added_or_changed_is_followed_again(tree: Path) -> None:
    (tree / "k" / "new.h").write_text("#define N 1\n")
    (tree / "k" / "deep.h").write_text("#define D 1\n")
    assert _run(tree)["found"] == []
    # An earlier system folder now holds mid.h (it shadows sys2's), which includes <new.h>.
    (tree / "sys1" / "mid.h").write_text("#include <new.h>\n")
    found = _run(tree)["found"]
    assert found == [["new.h", False, str(tree / "sys1")]]
    (tree / "sys1" / "mid.h").unlink()
    assert _run(tree)["found"] == []
    with open(tree / "sys2" / "bits" / "x.h", "a") as header:  # edited in place
        header.write("#include <deep.h>\n")
    found = _run(tree)["found"]
    assert found == [["deep.h", False, str(tree / "sys2" / "bits")]]
    (tree / "sys2" / "near.h").write_text("#include <new.h>\n")  # a quoted one, found
    assert ["new.h", False, str(tree / "sys2")] in _run(tree)["found"]


def test_an_odd_or_hostile_remembered_file_is_not_believed(tree: Path) -> None:
    (tree / "k" / "stddef.h").write_text("#define SD 2\n")
    truth = _run(tree)
    assert truth["found"] == [["stddef.h", False, str(tree / "sys2")]]
    [path] = _stored(tree)
    good = json.loads(path.read_text())
    odd: list[bytes | None] = [
        json.dumps(dict(good, edges="")).encode(),  # its digest no longer matches
        json.dumps(dict(good, digest=good["digest"][::-1])).encode(),
        json.dumps(dict(good, edges="x", paths=[1])).encode(),
        json.dumps(dict(good, edges=good["edges"].replace("\x000\x00", "\x002\x00"))).encode(),
        json.dumps(dict(good, edges=good["edges"] + "\0x")).encode(),
        json.dumps(dict(good, paths="")).encode(),
        json.dumps(dict(good, key="another")).encode(),
        json.dumps([good]).encode(),
        b"\xff\x00{",
        b"[" * 100_000,
        json.dumps(dict(good, filler="x" * (2 << 20))).encode(),
        None,  # a FIFO
    ]
    for data in odd:
        path.unlink()
        if data is None:
            os.mkfifo(path, 0o600)
        else:
            path.write_bytes(data)
            path.chmod(0o600)
        assert _run(tree)["found"] == truth["found"], data and data[:80]
    # An entry sealed for the files as they are, without the edge: believed only where this
    # user alone may write the file (as `toolchains.json`); another user may write this one.
    paths = good["paths"].split("\0")
    forged = _entry(good["key"], paths, [_stamp(p) for p in paths], [])
    path.unlink()
    path.write_text(json.dumps(forged))
    path.chmod(0o622)
    assert _run(tree)["found"] == truth["found"]
    path.write_text(json.dumps(forged))  # (written again: that process kept the truth)
    path.chmod(0o600)  # this user's alone: believed, as a version line there is
    assert _run(tree)["found"] == []


# In one process, with no descriptor left while it walks: each system header is unread, as
# before, and nothing is kept (a fake store records what it would keep), so the next process,
# descriptors back, walks again and finds what the headers include.
UNREAD = r"""
import json, resource, sys
from warmcli import system_shadows
kept = []
system_shadows.store[:] = [(lambda key: None, lambda key, entry: kept.append(key))]  # a fake
system = tuple(sys.argv[1].split(":"))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (3, hard))
try:
    found = system_shadows.shadowed("top.h", ([sys.argv[2]], [sys.argv[2]]), system)
finally:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print(json.dumps({"found": found, "kept": kept}))
"""


def test_a_system_header_that_could_not_be_read_is_not_remembered(tree: Path) -> None:
    (tree / "k" / "stddef.h").write_text("#define SD 2\n")
    system = f"{tree / 'sys1'}:{tree / 'sys2'}"
    proc = subprocess.run(
        [sys.executable, "-c", UNREAD, system, str(tree / "k")],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"found": [], "kept": []}
    assert _run(tree)["found"] == [["stddef.h", False, str(tree / "sys2")]]
