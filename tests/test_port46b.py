"""speed46b's remembered system-header walk (`warmcli.system_shadows`' `store`, in warm's home)
ported onto review46b's bounds: a walk cut past `MAX_SYSTEM` headers or a header over
`MAX_SCANNED` is remembered as cut, so a kernel with folders of its own that includes such a
header stays unkeyed in the next process too (which reads no system header); and an `-I` folder
that can be searched but not listed is still looked in by name where the walk is remembered.
Each step is a real process over real files in a real warm home."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from forked_python import ForkedPythons

# One process: the key of a kernel including <argv[3]> with `-I argv[2]` through the system
# folder(s) argv[1] (":"), why it is unkeyed, and which files under argv[4] it opened. With
# argv[5], `os.listdir` refuses folders under it as a mode 0111 folder refuses another user
# (a fake: root lists any folder).
SCRIPT = r"""
import json, os, sys
opened = []
sys.addaudithook(lambda e, a: opened.append(a[0]) if e == "open" and type(a[0]) is str else None)
import warmcli.backends.system_folders  # (it lends `system_shadows` warm's home)
from warmcli.headers import headers_digest
from warmcli.unkeyed import reason_of
system, kernel, name, tree = tuple(sys.argv[1].split(":")), sys.argv[2], sys.argv[3], sys.argv[4]
if len(sys.argv) > 5:
    listdir = os.listdir
    def fake_listdir(path="."):
        if os.fspath(path).startswith(sys.argv[5]):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return listdir(path)
    os.listdir = fake_listdir
key = headers_digest(f"#include <{name}>\nint k;\n", ("-I" + kernel,), system=lambda: system)
print(json.dumps({"key": key, "why": reason_of(key),
                  "opened": sorted({p for p in opened if p.startswith(tree)})}))
"""


_python = ForkedPythons(ROOT)  # this module's servers, one an environment apart from WARM_*


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """`_run`'s forking servers, ended with the module."""
    yield
    _python.close()


def _run(tmp: Path, system: str, name: str, *refused: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"))
    args = [system, str(tmp / "inc"), name, str(tmp / "sys"), *refused]
    proc = _python(env).run(SCRIPT, *args, env=env, cwd=tmp, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return dict(json.loads(proc.stdout))


def _chain(tmp: Path) -> None:
    """sys/chain: h0.h includes h1.h ... past `MAX_SYSTEM`; `inc` empty."""
    from warmcli.system_shadows import MAX_SYSTEM

    chain = tmp / "sys" / "chain"
    chain.mkdir(parents=True)
    for i in range(MAX_SYSTEM + 50):
        (chain / f"h{i}.h").write_text(f"#include <h{i + 1}.h>\n")
    (tmp / "inc").mkdir()


def _big(tmp: Path) -> None:
    """sys/big: h0.h includes big.h, over `MAX_SCANNED`; `inc` empty."""
    from warmcli.system_shadows import MAX_SCANNED

    big = tmp / "sys" / "big"
    big.mkdir(parents=True)
    (big / "h0.h").write_text("#include <big.h>\n")
    with open(big / "big.h", "w") as f:
        f.write("/*" + " " * MAX_SCANNED + "*/\n#include <late.h>\n")
    (tmp / "inc").mkdir()


def _shadowable(tmp: Path) -> None:
    """sys/2/top.h includes <mid.h> and <bits/x.h>; mid.h includes <stddef.h> (in sys/1);
    `inc` empty."""
    sys1, sys2, inc = tmp / "sys" / "1", tmp / "sys" / "2", tmp / "inc"
    for folder in (sys1, sys2 / "bits", inc):
        folder.mkdir(parents=True)
    (sys1 / "stddef.h").write_text("#define SD 1\n")
    (sys2 / "top.h").write_text("#include <mid.h>\n#include <bits/x.h>\n")
    (sys2 / "mid.h").write_text("#include <stddef.h>\n")
    (sys2 / "bits" / "x.h").write_text("#define X 1\n")


@pytest.fixture(scope="module")
def _trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each test's tree, made at once and settled by one wait (a file changed in the last
    `RACY_NS` is not remembered)."""
    trees = {}
    for name, make in (
        ("test_a_walk_past_the_bound_is_remembered_as_cut", _chain),
        ("test_a_header_over_4_mb_is_remembered_as_cut", _big),
        (
            "test_a_search_only_folder_is_looked_in_by_name_where_the_walk_is_remembered",
            _shadowable,
        ),
    ):
        trees[name] = tmp_path_factory.mktemp("tree")
        make(trees[name])
    time.sleep(2.1)
    return trees


@pytest.fixture
def tree(_trees: dict[str, Path], request: pytest.FixtureRequest) -> Path:
    """This test's settled tree (its own folder, its own warm home)."""
    return _trees[request.node.name]


def test_a_walk_past_the_bound_is_remembered_as_cut(tree: Path) -> None:
    """speed46b remembered a walk's edges alone: a second process believed the edges of a walk
    `MAX_SYSTEM` had cut and keyed the kernel (a header past the bound added to `-I` then kept
    the key, the stale build served), where review46b unkeys it."""
    chain = tree / "sys" / "chain"
    first = _run(tree, str(chain), "h0.h")
    assert "over 2048 system headers" in first["why"]
    assert len(list((tree / "home" / "system-headers").glob("*.json"))) == 1
    second = _run(tree, str(chain), "h0.h")  # remembered: no system header read
    assert second["opened"] == [] and second["why"] == first["why"]  # (its key: this process's)


def test_a_header_over_4_mb_is_remembered_as_cut(tree: Path) -> None:
    big = tree / "sys" / "big"
    first = _run(tree, str(big), "h0.h")
    assert "or 4 MB" in first["why"]
    second = _run(tree, str(big), "h0.h")
    assert second["opened"] == [] and second["why"] == first["why"]


def test_a_search_only_folder_is_looked_in_by_name_where_the_walk_is_remembered(
    tree: Path,
) -> None:
    """speed46b's per-keying listing passed over a folder that cannot be listed (as main did
    before review46b): `stddef.h` or `bits/x.h` added to a mode 0111 `-I` folder kept the key."""
    sys1, sys2, inc = tree / "sys" / "1", tree / "sys" / "2", tree / "inc"
    system = f"{sys1}:{sys2}"
    before = _run(tree, system, "top.h", str(inc))
    assert before["why"] == "" and str(sys2 / "top.h") in before["opened"]
    (inc / "stddef.h").write_text("#define SD 2\n")
    shadowed = _run(tree, system, "top.h", str(inc))
    assert shadowed["opened"] == [] and shadowed["key"] != before["key"]
    assert shadowed["key"] == _run(tree, system, "top.h")["key"]  # as where it is listed
    (inc / "stddef.h").unlink()
    (inc / "bits").mkdir()
    (inc / "bits" / "x.h").write_text("#define X 2\n")
    deeper = _run(tree, system, "top.h", str(inc))
    assert deeper["opened"] == [] and deeper["key"] not in (before["key"], shadowed["key"])
    assert deeper["key"] == _run(tree, system, "top.h")["key"]
