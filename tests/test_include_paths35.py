"""An include folder's path is not keyed: a checkout pre-built at one path serves another.

A workload names its headers' folder by its own location (`-I` + `HERE + "/inc"`, PyCUDA's
`include_dirs`), so CI's checkout (`/builds/...`) and production's (`/app`) differ only in
that path. The key covers each header the kernel reaches by name and content
(`warmcli.headers`), never the folder's path (as ccache's base folder), so production is
served CI's build; an edited header at the new path is still a new kernel, never a stale
hit. Through the real CLI, the real compiler and a strictly serving process.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_kernel_headers import WORKLOAD, _served

from warmcli.kernel import Kernel, kernel_key, key_components

SOURCE = '#include "val.h"\nvoid setv(float *x) { x[0] = VAL; }'


def _checkout(root: Path, value: str) -> Path:
    (root / "inc").mkdir(parents=True)
    (root / "inc" / "val.h").write_text(f"#define VAL {value}\n")
    (root / "hw.py").write_text(WORKLOAD)
    return root


def test_a_checkout_at_another_path_is_served_ci_s_build(warm: Warm, tmp_path: Path) -> None:
    ci = _checkout(tmp_path / "builds" / "job-17" / "repo", "3.0f")
    bundle = tmp_path / "fleet.warm"
    made = warm("run", ci / "hw.py", "-b", bundle)
    assert made.returncode == 0 and "stored 1 new kernel" in made.stdout, made.stderr
    app = tmp_path / "app"
    shutil.copytree(ci, app)
    assert _served(bundle, app) == "3.0"  # strict: a compile would have failed it

    (app / "inc" / "val.h").write_text("#define VAL 4.0f\n")  # production's own header
    miss = _served(bundle, app, ok=False)  # never CI's stale build
    assert "would compile kernel setv" in miss and "headers: bundle has sha256" in miss, miss


def test_the_folder_s_spelling_and_path_key_alike_its_headers_do_not(tmp_path: Path) -> None:
    for name, value in (("a", "1"), ("b", "1"), ("c", "2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "val.h").write_text(f"#define VAL {value}\n")

    def key(*options: str) -> str:
        return kernel_key(Kernel(SOURCE, "setv", "P", options=options), "x86_64", "cc 1")

    assert key(f"-I{tmp_path}/a") == key(f"-I{tmp_path}/b")
    assert key(f"-I{tmp_path}/a") != key(f"-I{tmp_path}/c")  # another header's content
    assert key(f"-I{tmp_path}/a", "-O2") != key(f"-I{tmp_path}/b")  # other options
    assert key("-isystem", f"{tmp_path}/a") == key("-isystem", f"{tmp_path}/b")
    assert key(f"--include-path={tmp_path}/a") == key(f"--include-path={tmp_path}/b")
    assert key(f"-I{tmp_path}/a") != key(f"-isystem{tmp_path}/a")  # the flag stays keyed
    shown = key_components(
        Kernel(SOURCE, "setv", "P", options=(f"-I{tmp_path}/a", "-O2")), "x86_64", "cc 1"
    )
    assert json.loads(shown["options"]) == ["-I<include folder>", "-O2"]


def test_a_header_a_macro_names_keeps_the_folders_path(tmp_path: Path) -> None:
    """`#include HEADER` is not followed by the key: the folder's path stays in it."""
    source = '#define HEADER "val.h"\n#include HEADER\nvoid setv(float *x) { x[0] = VAL; }'
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "val.h").write_text("#define VAL 1\n")

    def key(folder: str) -> str:
        return kernel_key(Kernel(source, "setv", "P", options=(f"-I{folder}",)), "x86_64", "c")

    assert key(f"{tmp_path}/a") != key(f"{tmp_path}/b")
    guarded = Kernel("#include_next <val.h>\nint x;", "f", "", options=(f"-I{tmp_path}/a",))
    assert guarded.keyed_options == ("-I<include folder>",)  # `_next` is no macro's name


def test_a_header_read_first_by_its_absolute_path_keys_by_content(tmp_path: Path) -> None:
    for name, value in (("a", "1"), ("b", "1"), ("c", "2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cfg.h").write_text(f"#define VAL {value}\n")
    source = "void setv(float *x) { x[0] = VAL; }"

    def key(*options: str) -> str:
        return kernel_key(Kernel(source, "setv", "P", options=options), "x86_64", "cc 1")

    for spelling in ("-include {}", "-include{}", "--pre-include={}", "-imacros {}"):
        a, b, c = (spelling.format(tmp_path / n / "cfg.h").split(" ") for n in "abc")
        assert key(*a) == key(*b), spelling
        assert key(*a) != key(*c), spelling  # another content
    assert key("-include", f"{tmp_path}/a/cfg.h") != key("-imacros", f"{tmp_path}/a/cfg.h")
