"""A kernel's key covers the headers it includes from the folders its options name.

Through the real CLI and a real compiler: a kernel `#include "val.h"` with `-I inc`
is warmed; after the header (or one it includes) changes, `warm run` stores a new
kernel and a strictly served process computes the new value, never the stale build.
The key of a kernel naming no include folder is byte for byte what it was before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from host_keys import settle

from warmcli import headers
from warmcli.kernel import Kernel, kernel_key, key_components
from warmcli.pycuda import SourceModule

WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel(
    '#include "val.h"\\nvoid setv(float *x, int n) { for (int i = 0; i < n; i++) x[i] = VAL; }',
    "setv", "Pi", options=("-I" + HERE + "/inc",),
)


def workload(rt):
    x = rt.buffer(4)
    rt.launch(K, x, 4)
    return x
"""
SERVE = """
import sys
import warmcli
sys.path.insert(0, sys.argv[2])
import hw
warmcli.use_bundle(sys.argv[1], strict=True)
rt = warmcli.runtime("host")
print(rt.read(hw.workload(rt))[0])
"""


def _served(bundle: Path, folder: Path, ok: bool = True) -> str:
    """What a process serving `bundle` strictly computes (`ok`), else its error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env |= {"WARM_HOME": str(folder / "home"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, str(bundle), str(folder)],
        capture_output=True, text=True, env=env, cwd=folder, timeout=120,
    )  # fmt: skip
    assert (proc.returncode == 0) == ok, proc.stderr
    return proc.stdout.strip() if ok else proc.stderr.strip().splitlines()[-1]


def test_an_edited_header_is_a_new_kernel_never_a_stale_hit(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text('#include "inner.h"\n#define VAL INNER\n')
    (tmp_path / "inc" / "inner.h").write_text("#define INNER 1.0f\n")
    (tmp_path / "hw.py").write_text(WORKLOAD)
    bundle = tmp_path / "h.warm"
    first = warm("run", tmp_path / "hw.py", "-b", bundle)
    assert first.returncode == 0 and "stored 1 new kernel" in first.stdout, first.stderr
    assert _served(bundle, tmp_path) == "1.0"

    (tmp_path / "inc" / "inner.h").write_text("#define INNER 2.0f\n")  # a header it reaches
    miss = _served(bundle, tmp_path, ok=False)  # never the stale build: a miss, explained
    assert "would compile kernel setv" in miss and "lacks: headers: bundle has sha256" in miss
    second = warm("run", tmp_path / "hw.py", "-b", bundle)
    assert second.returncode == 0 and "stored 1 new kernel" in second.stdout, second.stdout
    assert _served(bundle, tmp_path) == "2.0"
    again = warm("run", tmp_path / "hw.py", "-b", bundle)
    assert again.returncode == 0 and "stored 1 new kernel" not in again.stdout, again.stdout


def test_a_key_without_include_folders_is_as_it_was() -> None:
    """Bundles made before headers were keyed stay valid: the same bytes, hard-coded."""
    k = Kernel(
        "#include <math.h>\nvoid f(float *x) { x[0] = 1; }",
        "f", "P", options=("-O2", "-DZ=1"), defines={"B": 4},
    )  # fmt: skip
    assert kernel_key(k, "x86_64", "gcc 12.2.0") == (
        "e75425ca953da19e0c349092324b497066bf62305c3ecfa2506f1a4de840c4f0"
    )
    assert "headers" not in key_components(k, "x86_64", "gcc 12.2.0")


@pytest.mark.parametrize("spelling", ["-I{}", "-I {}", "--include-path={}", "--include-path {}"])
def test_every_spelling_of_a_folder_keys_its_headers(tmp_path: Path, spelling: str) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.h").write_text('#include "sub/b.h"\n')
    (tmp_path / "sub" / "b.h").write_text("#define B 1\n")
    options = tuple(spelling.format(tmp_path).split(" "))
    k = Kernel('#include "a.h"\n#include <stdio.h>\nvoid f(void) {}', "f", options=options)
    base = kernel_key(k, "x86_64", "gcc")
    assert "headers" in key_components(k, "x86_64", "gcc")
    assert kernel_key(k, "x86_64", "gcc") == base, "the same headers: the same key"
    (tmp_path / "unrelated.h").write_text("#define U 1\n")
    assert kernel_key(k, "x86_64", "gcc") == base, "a header it does not reach"
    (tmp_path / "sub" / "b.h").write_text("#define B 2\n")
    assert kernel_key(k, "x86_64", "gcc") != base, "a header the header includes"
    (tmp_path / "stdio.h").write_text("/* shadows the system's */\n")
    assert kernel_key(k, "x86_64", "gcc") != base, "a header found where none was"


def test_headers_are_bounded_memoised_and_never_raise(tmp_path: Path) -> None:
    (tmp_path / "self.h").write_text('#include "self.h"\n#include "gone.h"\n')
    old = 1_000_000_000 * 1_000_000_000  # 2001: a file not edited just now is memoised
    os.utime(tmp_path / "self.h", ns=(old, old))
    settle(tmp_path / "self.h")  # (its ctime, which no `utime` sets back, too)
    options = (f"-I{tmp_path}", "-I/no/such/folder")
    first = headers.headers_digest('#include "self.h"', options)
    assert os.path.normpath(tmp_path / "self.h") in headers._memo, "known by its stamp"
    assert headers.headers_digest('#include "self.h"', options) == first
    assert headers.headers_digest('#include "gone.h"', options) != first


def test_pycuda_include_dirs_key_the_headers(tmp_path: Path) -> None:
    (tmp_path / "v.h").write_text("#define V 1\n")
    mod = SourceModule(
        '#include "v.h"\n__global__ void f(int *x) { x[0] = V; }', include_dirs=[str(tmp_path)]
    )
    assert headers.include_folders(mod.options) == (str(tmp_path),)
    k = Kernel(mod.source, "f", "P", language="cuda", options=mod.options)
    base = kernel_key(k, "sm_90", "nvcc")
    (tmp_path / "v.h").write_text("#define V 2\n")
    assert kernel_key(k, "sm_90", "nvcc") != base
