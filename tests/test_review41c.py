"""Holes review41c found in what hostile41 and trial41c added, each reproduced for real:
real cc, real libraries, the real CLI in a subprocess (no fake of anything)."""

from __future__ import annotations

import _sqlite3
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from elf_blobs import LINKED_WORKLOAD, SERVE
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_a_loaded_extension_modules_file_name_is_no_name_the_loader_matches(
    warm: Warm, tmp_path: Path
) -> None:
    """glibc matches a needed name against a loaded object's `DT_SONAME` (and the name it
    was asked for), never its file's name. Every warm process has Python's `_sqlite3`
    extension mapped, opened by its whole path, with no `DT_SONAME`: a blob needing a
    library of that file name (made where LD_LIBRARY_PATH found one) fails to load in
    production, yet `warm check` matched the name against /proc/self/maps' file names and
    called it servable (exit 0)."""
    name = Path(_sqlite3.__file__ or "").name
    if not name.endswith(".so"):
        pytest.skip("this Python's _sqlite3 is no extension module file")
    lib = tmp_path / "lib"
    lib.mkdir()
    source = tmp_path / "helper.c"
    source.write_text("int helper(void) { return 1; }\n")
    built = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", lib / name, source], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    workload = tmp_path / "wl.py"
    workload.write_text(LINKED_WORKLOAD.replace("LIBDIR", str(lib)).replace("LIBNAME", name))
    bundle = tmp_path / "b.warm"
    made = Warm(dict(warm.env, LD_LIBRARY_PATH=str(lib)))("run", workload, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr + made.stdout
    env = {k: v for k, v in warm.env.items() if k != "LD_LIBRARY_PATH"}
    served = subprocess.run(
        [sys.executable, "-c", SERVE, workload],
        capture_output=True,
        text=True,
        env=dict(env, WARM_BUNDLE=str(bundle), WARM_STRICT="1"),
        cwd=ROOT,
    )
    assert served.returncode != 0 and "cannot open shared object" in served.stderr
    checked = Warm(env)("check", bundle, "--json")
    assert checked.returncode == 1, checked.stdout[-1500:] + checked.stderr[-1500:]
    (unservable,) = json.loads(checked.stdout)["unservable"]
    assert name in json.dumps(unservable)
    assert os.path.basename(_sqlite3.__file__ or "") == name


def test_no_merge_conflict_is_left_in_the_tree() -> None:
    """Merging trial41c left its conflict in script_main.py's opening doc (`<<<<<<< HEAD`
    ... `>>>>>>> trial41c`, both sides kept): Python parsed it (a docstring), so no test
    saw the module's doc say two things at once."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], capture_output=True, cwd=ROOT, check=True
    ).stdout.split(b"\0")
    left = []
    for name in filter(None, files):
        path = ROOT / os.fsdecode(name)
        if path.suffix not in (".py", ".md", ".toml", ".cfg", ".txt") or not path.is_file():
            continue
        for n, text in enumerate(path.read_bytes().splitlines(), 1):
            if text.startswith((b"<<<<<<< ", b">>>>>>> ")) or text == b"=======":
                left.append(f"{path.relative_to(ROOT)}:{n}")
    assert left == []


HELD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))  # Python ignores SIGXFSZ
from warmcli.bundle.counts import HeldCounts
from warmcli.errors import BundleError
try:
    held = HeldCounts(((str(i),), 2) for i in range(100_000))
except BundleError as exc:
    print("refused:", exc)
    sys.exit(0)
print("wrong:", sum(held.get((str(i),)) != 2 for i in range(100_000)))
"""


def test_held_counts_a_write_refused_is_said_never_read_as_a_whole_share() -> None:
    """`warm stats --json` counts the kernels sharing each binary (and each compile's
    rows) in a temporary SQLite file (`HeldCounts`, hostile41). A write of that file the
    system refused (a full TMPDIR, a file size limit) was swallowed and every count not
    kept read as 1: each kernel of a batch said to own its whole binary, the shares summing
    past the bundle, with exit 0 (README: a full folder where SQLite keeps its temporary
    files is named as such, exit 2). Real SQLite under a real 64 KiB file size limit."""
    proc = subprocess.run(
        [sys.executable, "-c", HELD], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert proc.stdout.startswith("refused: "), proc.stdout
    assert "a write to the disk failed" in proc.stdout and "\n" not in proc.stdout.strip()


TYPO = """
import numpy as np
import warmcli
from warmcli import Kernel

K = Kernel("void twice(float *y, int n) { for (int i = 0; i < n; i++) y[i] *= 2.0f; }",
           "twice", "Pi")

def main():
    print("MAIN RAN")
    rt = warmcli.runtime("host")
    rt.launch(K, rt.upload(np.ones(8, np.float32)), 8)
"""


def test_pycuda_entry_naming_no_function_is_refused_not_replaced_by_main(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run s.py --pycuda --entry mian` (a typo) ran the script's `main()` in its place,
    exit 0, though the function named is not there (without --pycuda: 'defines no
    function mian(runtime)', exit 2). trial41c made `--entry main` name that main; a name
    the file lacks is now refused under --pycuda too, and main() still runs by default."""
    script = tmp_path / "s.py"
    script.write_text(TYPO)
    args = [script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b.warm"]
    typo = warm("run", *args, "--entry", "mian")
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "defines no function mian(runtime)" in typo.stderr, typo.stderr
    assert "MAIN RAN" not in typo.stdout + typo.stderr
    assert "or main()" not in typo.stderr and "Traceback" not in typo.stderr
    plain = warm("run", *args)
    assert plain.returncode == 0, plain.stderr
    assert warm("run", *args, "--entry", "main").returncode == 0
