"""Review of stop 35's merged change (keys without include folders' paths, recipe 2,
bundle index consistency), each finding with real parts.

- A kernel's key no longer names its include folders' paths (`keyed_options`): the
  headers it reaches are keyed by name and content instead. But what a header does by a
  macro is not followed: a header's `#include CFG` (the source's alone kept the paths),
  a `__has_include(NAME)` of a macro, and a header's `__FILE__` (its folder's path is
  what it computes with) then keyed alike at two paths whose builds differ: a checkout
  at another path was strictly served the other's build (a stale hit).
- gcc drops an `-I` folder also named `-isystem` (`-I x -I y -isystem x` reads y's header
  first), which the key's search does not follow: `-I x -I y -isystem x` and `-I x -I y
  -isystem z` keyed alike (no paths now) and compiled y's and x's headers. A folder named
  twice keeps the folders' paths in the key (the search itself is unchanged: listed).
- A header's `#include "../cfg.h"` in an include folder that is a link was resolved by
  its path spelled shorter (`normpath`: `x/cfg.h`), not where the compiler reads it (the
  link's target's parent): the key covered another file, or none, and an edit of the one
  compiled was a stale hit.
- A header's `#include_next <val.h>` was looked up from the first folder again (finding
  itself): the file the compiler reads next was never keyed, and an edit of it was a
  stale hit. Every file of that name along the chain is keyed now (by place, not path).
- A kernel row's components keep its headers' digest (a sha256), from which a reader
  recomputes its key, a PTX row's for each of ~570 archs its symbol may name: a hostile
  PTX row's `headers` of megabytes was hashed ~570 times (a 10 MB bundle took `warm
  check` 15 s). Its headers must be a sha256 as warm writes it, else the row is malformed.
- `warm run --pycuda` passes a script's `main(argv)` what its `__main__` block passes, but
  read only `main(...)` and `sys.exit(main(...))`: the idioms `raise SystemExit(main(
  sys.argv[1:]))` and `exit(main(sys.argv[1:]))` (and `sys.exit(main(argv=...))`, a
  keyword) passed `main` the runtime, as before the change.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_kernel_headers import WORKLOAD, _served

from warmcli.kernel import Kernel, kernel_key
from warmcli.warming.script_main import main_argv


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


def test_main_argv_reads_the_common_exit_idioms(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    given = ["s.py", "--n", "3"]
    for block, argv in [
        ("raise SystemExit(main(sys.argv[1:]))", given[1:]),
        ("raise SystemExit(main(sys.argv))", given),
        ("exit(main(sys.argv[1:]))", given[1:]),
        ("quit(main(sys.argv))", given),
        ("sys.exit(main())", None),  # no argv: the runtime, as before
        ("raise SystemExit(other(sys.argv))", None),
        ("raise SystemExit", None),
    ]:
        script.write_text(
            f"import sys\ndef main(a): pass\nif __name__ == '__main__':\n    {block}\n"
        )
        found = main_argv(script)
        assert (found(given) if found else None) == argv, block


def test_raise_system_exit_main_is_passed_its_argv(warm: Warm, workload_file, tmp_path) -> None:
    """Through the real CLI and NVRTC (`test_script_main35`'s script)."""
    pytest.importorskip("test_script_main35")  # skips where NVRTC is not installed
    from test_script_main35 import BODY, HEAD, _prebuilt_entries

    call = "raise SystemExit(main(sys.argv[1:]))"
    script = workload_file(HEAD + BODY.format(call=call, skip=0), "argv_raised.py")
    assert _prebuilt_entries(warm, script, tmp_path / "a.warm") == {"fill"}


def test_a_header_s_parent_through_a_linked_folder_is_the_one_the_compiler_reads(
    tmp_path: Path,
) -> None:
    """`-I x/inc`, `x/inc` a link to `real/deep/inc`, its header `#include "../cfg.h"`: the
    compiler reads `real/deep/cfg.h` (`..` of the folder the link names), which the key
    must cover; it read `x/cfg.h` (the path spelled shorter), found none and keyed that."""
    real = tmp_path / "real" / "deep"
    (real / "inc").mkdir(parents=True)
    (real / "inc" / "val.h").write_text('#include "../cfg.h"\n#define VAL CFG\n')
    (real / "cfg.h").write_text("#define CFG 1\n")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "inc").symlink_to(real / "inc")
    source = '#include "val.h"\nvoid setv(float *x) { x[0] = VAL; }'
    before = _key(source, tmp_path / "x" / "inc")
    (real / "cfg.h").write_text("#define CFG 2\n")  # what the compiler now reads
    assert _key(source, tmp_path / "x" / "inc") != before


def test_an_include_next_s_header_is_keyed(tmp_path: Path) -> None:
    """`a/val.h` holds `#include_next <val.h>`: the compiler reads `b/val.h` too, which the
    key skipped (it looked `val.h` up from the first folder again, and found `a/val.h`)."""
    import warmcli.headers

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "val.h").write_text("#include_next <val.h>\n")
    (tmp_path / "b" / "val.h").write_text("#define VAL 1\n")
    source = "#include <val.h>\nvoid setv(float *x) { x[0] = VAL; }"
    options = (f"-I{tmp_path}/a", f"-I{tmp_path}/b")

    def key() -> str:
        warmcli.headers._memo.clear()  # (an edit within the same second keeps mtime and size)
        return kernel_key(Kernel(source, "setv", "P", options=options), "x86_64", "cc 1")

    before = key()
    (tmp_path / "b" / "val.h").write_text("#define VAL 2\n")  # what the compiler reads
    assert key() != before
    has_next = "#if __has_include_next(<val.h>)\n#include_next <val.h>\n#endif\n"
    (tmp_path / "a" / "val.h").write_text(has_next)
    before = key()
    (tmp_path / "b" / "val.h").write_text("#define VAL 3\n")
    assert key() != before


def test_an_include_next_keys_alike_at_another_path(tmp_path: Path) -> None:
    for root in ("ci", "app"):
        for name, text in (("a", "#include_next <val.h>\n"), ("b", "#define VAL 1\n")):
            (tmp_path / root / name).mkdir(parents=True)
            (tmp_path / root / name / "val.h").write_text(text)
    source = "#include <val.h>\nvoid setv(float *x) { x[0] = VAL; }"

    def key(root: Path) -> str:
        options = (f"-I{root}/a", f"-I{root}/b")
        return kernel_key(Kernel(source, "setv", "P", options=options), "x86_64", "cc 1")

    assert key(tmp_path / "ci") == key(tmp_path / "app")


def test_a_ptx_row_s_headers_must_be_a_sha256(warm: Warm, host_bundle, tmp_path: Path) -> None:
    from warmcli.kernel_parts import key_of

    bundle = host_bundle(tmp_path / "h.warm")
    conn = sqlite3.connect(bundle)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(kernels)")]
    row = dict(zip(cols, conn.execute("SELECT * FROM kernels LIMIT 1").fetchone(), strict=True))
    content, headers = os.urandom(32).hex(), "ab" * 50_000  # (no sha256)
    components = json.loads(row["components"]) | {"kernel": content, "headers": headers}
    components["arch"] = "compute_90"
    row |= {
        "key": key_of(content, "compute_90", headers, row["toolchain"]),
        "arch": "compute_90",
        "symbol": f"warm_{'0' * 16}_{row['entry']}",
        "components": json.dumps(components, sort_keys=True),
    }
    conn.execute(f"INSERT INTO kernels VALUES ({', '.join('?' * len(cols))})", [*row.values()])
    conn.commit()
    conn.close()
    done = warm("stats", bundle)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "components: headers is not a sha256 in hex" in done.stderr, done.stderr


def test_a_cubin_row_s_headers_must_be_a_sha256_too(warm: Warm, host_bundle, tmp_path) -> None:
    from warmcli.kernel_parts import key_of

    bundle = host_bundle(tmp_path / "h.warm")
    conn = sqlite3.connect(bundle)
    key, toolchain, text = conn.execute("SELECT key, toolchain, components FROM kernels").fetchone()
    components = json.loads(text) | {"headers": "not a digest"}
    new = key_of(components["kernel"], components["arch"], "not a digest", toolchain)
    symbol = f"warm_{new[:16]}_{components['entry']}"
    conn.execute(
        "UPDATE kernels SET key = ?, symbol = ?, components = ? WHERE key = ?",
        (new, symbol, json.dumps(components, sort_keys=True), key),
    )
    conn.commit()
    conn.close()
    done = warm("stats", bundle)
    assert done.returncode == 2 and "headers is not a sha256 in hex" in done.stderr, done.stderr


def test_a_folder_named_twice_keeps_the_folders_paths(tmp_path: Path) -> None:
    """gcc drops an `-I` folder that is also `-isystem` (`-I x -I y -isystem x` reads y's
    header first), which the key's search does not: such options at two paths, their
    folders' files alike but placed otherwise, keyed alike and compiled otherwise."""
    source = "#include <val.h>\nvoid setv(float *x) { x[0] = VAL; }"
    for name, value in (("x", "10"), ("y", "20"), ("z", "30")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "val.h").write_text(f"#define VAL {value}\n")

    def key(*folders: str) -> str:
        flags = ("-I", "-I", "-isystem")
        options = tuple(f"{f}{tmp_path / d}" for f, d in zip(flags, folders, strict=True))
        return kernel_key(Kernel(source, "setv", "P", options=options), "x86_64", "cc 1")

    assert key("x", "y", "x") != key("x", "y", "z")  # cc reads y's (20), then x's (10)
