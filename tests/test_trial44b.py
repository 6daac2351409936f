"""A bundle kept in a CI cache and restored in another checkout path (trial 44b).

A host kernel that links an object or archive of its own checkout by its absolute path
(`/builds/a/proj/lib/helper.o`, `-Wl,...`, `-Xlinker ...`, or a library in a folder `-L`
names) was keyed with that path, so a
bundle warmed in one CI job's checkout missed (recompiled) that kernel in the next job's,
at another path, though the file was the same: the linked file's content is keyed, its
path is not (as `-I` folders are not), where the path cannot reach the binary (an ELF
relocatable object or a regular archive; a shared library linked by path may be named by
it in the binary, a thin archive names its members' paths: those keep it; a library found
through `-L` is keyed by its file's name and content). Real CLI, real
SQLite bundles, the system C compiler; the pure key checks name no fakes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.kernel import Kernel, kernel_key

TOOLCHAIN = "cc:test"
HELPER = "float helper(int i) { return i * SCALE.0f; }\n"
SOURCE = (
    "float helper(int i);\n"
    "void f(float *o, int n) { for (int i = 0; i < n; i++) o[i] = helper(i); }\n"
)
WORKLOAD = """
import os
from pathlib import Path
from warmcli import Kernel
DEVICE = "host"
LIB = Path(__file__).resolve().parent / "lib"
K = Kernel({source!r}, "f", "Pi", options=({spelling}))
def workload(rt):
    out = rt.buffer(4, "float32")
    rt.launch(K, out, 4)
"""


def _checkout(root: Path, scale: int = 2, thin: bool = False) -> Path:
    """A project at `root`: `lib/helper.o` (cc-built, `helper` scaling by `scale`), the
    archive `lib/libhelper.a` holding it (thin where asked), and `lib/libhelper.so`."""
    lib = root / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "helper.c").write_text(HELPER.replace("SCALE", str(scale)))
    cc = ["cc", "-O2", "-fPIC"]
    subprocess.run([*cc, "-c", "helper.c", "-o", "helper.o"], cwd=lib, check=True)
    (lib / "libhelper.a").unlink(missing_ok=True)
    subprocess.run(
        ["ar", "rcsT" if thin else "rcs", "libhelper.a", "helper.o"], cwd=lib, check=True
    )
    subprocess.run([*cc, "-shared", "helper.o", "-o", "libhelper.so"], cwd=lib, check=True)
    return lib


def _key(options: tuple[str, ...]) -> str:
    return kernel_key(Kernel(SOURCE, "f", "Pi", options=options), "x86_64", TOOLCHAIN)


@pytest.mark.parametrize(
    "spelling",
    [
        "{lib}/helper.o", "-Wl,{lib}/helper.o", "-Xlinker|{lib}/helper.o", "{lib}/libhelper.a",
        "-L{lib}|-Wl,-u,helper|-lhelper", "-L|{lib}|-lhelper", "-Wl,-L,{lib},-lhelper",
        "-Wl,--library-path={lib},--library=helper", "-Wl,--whole-archive,{lib}/libhelper.a",
    ],
)  # fmt: skip
def test_a_linked_object_keys_by_content_not_by_its_checkout_path(
    tmp_path: Path, spelling: str
) -> None:
    """Pure key logic, real files: the same object at two checkout paths is one key; its
    content changed is another; a shared library or thin archive by path keeps its path."""
    one, two = _checkout(tmp_path / "runner1" / "proj"), _checkout(tmp_path / "runner2" / "p")
    first, second = (tuple(spelling.format(lib=lib).split("|")) for lib in (one, two))
    assert _key(first) == _key(second)
    _checkout(tmp_path / "runner2" / "p", scale=3)  # same path, other code: another key
    assert _key(first) != _key(second)


def test_what_the_path_may_reach_keeps_it(tmp_path: Path) -> None:
    """A shared library linked by its path (`DT_NEEDED` may name that path) and a thin
    archive (its members found by path) are keyed with their path, as before."""
    one, two = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    assert _key((str(one / "libhelper.so"),)) != _key((str(two / "libhelper.so"),))
    one, two = _checkout(tmp_path / "c", thin=True), _checkout(tmp_path / "d", thin=True)
    assert _key((str(one / "libhelper.a"),)) != _key((str(two / "libhelper.a"),))
    # an output file (`-o`) or dependency file names no linked input: its path is kept
    obj = str(one / "helper.o")
    assert _key(("-MF", obj)) != _key(("-MF", str(two / "helper.o")))


def test_a_bundle_restored_into_another_checkout_path_serves_it(warm: Warm, tmp_path: Path) -> None:
    """CI cache: job 1 warms in runner1's checkout; job 2 restores the bundle in runner2's
    (another path, another HOME): `warm verify` compiles nothing, and an edit to the object
    there is still a miss, never the old build."""
    bundle = tmp_path / "cache" / "b.warm"
    bundle.parent.mkdir()
    spelling = 'str(LIB / "helper.o"),'
    roots = [tmp_path / "runner1" / "_work" / "proj", tmp_path / "runner2" / "build" / "proj"]
    for root in roots:
        _checkout(root)
        (root / "w.py").write_text(WORKLOAD.format(source=SOURCE, spelling=spelling))
    run = warm("run", roots[0] / "w.py", "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    warm.env["HOME"] = str(tmp_path / "home2")
    warm.env["WARM_HOME"] = str(tmp_path / "home2" / "warm")
    verify = warm("verify", bundle, "--workload", roots[1] / "w.py", "-q")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "compiled 0 kernels" in verify.stdout, verify.stdout
    _checkout(roots[1], scale=3)
    verify = warm("verify", bundle, "--workload", roots[1] / "w.py", "-q", "--explain-misses")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "miss: kernel f: headers" in verify.stdout, verify.stdout
    shutil.rmtree(roots[0])


def test_one_include_folder_spelled_relative_and_absolute_keys_alike_at_two_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-I/builds/a/proj/include -Iinclude` (one folder named twice, its two spellings) kept
    both checkouts' paths in the key: at another path it missed. Which named folders are one
    is keyed instead (gcc drops a folder named twice), so `-I x -I y -isystem x` and `-I x -I
    y -isystem z` still key apart (test_review35b)."""
    source = '#include "val.h"\nvoid setv(float *x) { x[0] = VAL; }'
    keys = []
    for root in (tmp_path / "runner1" / "proj", tmp_path / "runner2" / "build" / "proj"):
        (root / "include").mkdir(parents=True)
        (root / "include" / "val.h").write_text("#define VAL 10\n")
        (root / "other").mkdir()
        (root / "other" / "val.h").write_text("#define VAL 10\n")
        monkeypatch.chdir(root)
        options = (f"-I{root / 'include'}", "-Iinclude")
        keys.append(kernel_key(Kernel(source, "setv", "P", options=options), "x86_64", TOOLCHAIN))
        other = (f"-I{root / 'include'}", "-Iother")  # two folders, files alike: not one
        assert (
            kernel_key(Kernel(source, "setv", "P", options=other), "x86_64", TOOLCHAIN) != keys[-1]
        )
    assert keys[0] == keys[1]
