"""Review of stop 35's merged change (keys without include folders' paths, recipe 2,
bundle index consistency), each finding with real parts.

- A kernel's key no longer names its include folders' paths (`keyed_options`): the
  headers it reaches are keyed by name and content instead. But what a header does by a
  macro is not followed: a header's `#include CFG` (the source's alone kept the paths),
  a `__has_include(NAME)` of a macro, and a header's `__FILE__` (its folder's path is
  what it computes with) then keyed alike at two paths whose builds differ: a checkout
  at another path was strictly served the other's build (a stale hit).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import Warm
from test_kernel_headers import WORKLOAD, _served

from warmcli.kernel import Kernel, kernel_key


def _key(source: str, folder: Path) -> str:
    return kernel_key(Kernel(source, "setv", "P", options=(f"-I{folder}",)), "x86_64", "cc 1")


def test_a_header_s_computed_include_keeps_the_folders_path(warm: Warm, tmp_path: Path) -> None:
    ci = tmp_path / "builds" / "repo"
    (ci / "inc").mkdir(parents=True)
    (ci / "inc" / "val.h").write_text('#define CFG "cfg.h"\n#include CFG\n#define VAL CFGVAL\n')
    (ci / "inc" / "cfg.h").write_text("#define CFGVAL 3.0f\n")
    (ci / "hw.py").write_text(WORKLOAD)
    bundle = tmp_path / "fleet.warm"
    made = warm("run", ci / "hw.py", "-b", bundle)
    assert made.returncode == 0 and "stored 1 new kernel" in made.stdout, made.stderr
    app = tmp_path / "app"
    shutil.copytree(ci, app)
    (app / "inc" / "cfg.h").write_text("#define CFGVAL 4.0f\n")  # what a cold start reads
    miss = _served(bundle, app, ok=False)  # never CI's 3.0
    assert "would compile kernel setv" in miss, miss


def test_a_computed_has_include_keeps_the_folders_path(tmp_path: Path) -> None:
    source = (
        '#define FEATURE "feature.h"\n#if __has_include(FEATURE)\n#define VAL 1\n#else\n'
        "#define VAL 2\n#endif\nvoid setv(float *x) { x[0] = VAL; }"
    )
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "feature.h").write_text("\n")  # b has none: VAL 2 there
    assert _key(source, tmp_path / "a") != _key(source, tmp_path / "b")


def test_a_header_s_file_name_keeps_the_folders_path(tmp_path: Path) -> None:
    source = '#include "val.h"\nvoid setv(float *x) { x[0] = VAL; }'
    for name in ("a", "bb"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "val.h").write_text("#define VAL ((float)sizeof(__FILE__))\n")
    assert _key(source, tmp_path / "a") != _key(source, tmp_path / "bb")
    plain = '#include "plain.h"\nvoid setv(float *x) { x[0] = 1; }'
    for name in ("a", "bb"):
        (tmp_path / name / "plain.h").write_text("#define ONE 1\n")
    assert _key(plain, tmp_path / "a") == _key(plain, tmp_path / "bb")  # still shared
