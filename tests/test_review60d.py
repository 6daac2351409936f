"""review60d: a hostile review of two key-derivation changes of warm 60 (the real CLI, the real
C compiler, real nvcc compile-only, real SQLite; no mocks).

The file a `#pragma GCC dependency` names is keyed as a header (diff60), but only in the
directive's spelling and in `_Pragma("GCC dependency \\"f\\"")` written out: gcc runs the same
pragma from `_Pragma(L"...")` (the prefix dropped), from a `_Pragma(` whose string is on the next
line, and from GCC's own idiom `#define DO_PRAGMA(x) _Pragma(#x)` / `DO_PRAGMA(GCC dependency
"f")`, and from `_Pragma` naming the file by its absolute path in a kernel with no include folder:
with the file deleted a cold start failed (`cc1: fatal error: dep.h: No such file or directory`)
where a process over the bundle was served the stored build.

An nvcc script that only runs another (`exec /opt/w/nvcc "$@"`) keys as the nvcc it runs
(diffcuda60); where that one is itself a script adding to the real nvcc (`-DWVAL=1`), an edit to
it kept every key: the bundle served the cubin a cold compile no longer builds. Following such a
chain ends (a loop of scripts is keyed by its digest) and waits on no FIFO. `--explain-misses`
named no file for a dependency edited (it now says `changed: dep.h`, as for a header).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_diff60 import WORKLOAD, served
from test_diffcuda60 import WORKLOAD as CUDA_WORKLOAD  # (one nvcc wrapper case each)
from test_diffcuda60 import _rows as _keys
from test_diffcuda60 import _script

# gcc runs each as `#pragma GCC dependency "dep.h"` (each fails cold with dep.h deleted).
SOURCES = {
    "wide": '_Pragma(L"GCC dependency \\"dep.h\\"")\nvoid k(int *x) { x[0] = 7; }\n',
    "next line": '_Pragma(\n"GCC dependency \\"dep.h\\"")\nvoid k(int *x) { x[0] = 7; }\n',
    "stringized": (
        "#define DO_PRAGMA(x) _Pragma(#x)\n"
        'DO_PRAGMA(GCC dependency "dep.h")\nvoid k(int *x) { x[0] = 7; }\n'
    ),
}


def _warmed(warm: Warm, tmp_path: Path, source: str, folder: bool = True) -> tuple[Path, Path]:
    """The workload of `source` (its `-I` folder `inc` holding `dep.h`, where `folder`) warmed:
    (its file, the bundle)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "dep.h").write_text("/* the grammar this kernel was made from */\n")
    text = WORKLOAD.format(source=source)
    if not folder:
        text = text.replace('options=("-I" + os.path.join(HERE, "inc"),)', "")
    workload = tmp_path / "w.py"
    workload.write_text(text)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert served(warm, workload, bundle) == {"x": 7, "compiled": 0}
    return workload, bundle


@pytest.mark.parametrize("form", sorted(SOURCES))
def test_a_dependency_pragma_in_another_spelling_deleted_fails_the_hit_as_the_cold_start(
    warm: Warm, tmp_path: Path, form: str
) -> None:
    """Before: the hit was served `{"x": 7}` where the cold start failed naming dep.h."""
    workload, bundle = _warmed(warm, tmp_path, SOURCES[form])
    (tmp_path / "inc" / "dep.h").unlink()
    cold = served(warm, workload, None)
    assert "dep.h: No such file or directory" in str(cold.get("error")), cold
    assert served(warm, workload, bundle) == cold


def test_a_pragma_operator_naming_a_file_by_its_path_is_keyed_without_include_folders(
    warm: Warm, tmp_path: Path
) -> None:
    """`_Pragma("GCC dependency \\"/abs/dep.h\\"")` in a kernel naming no include folder (the
    directive's spelling was keyed so, the operator's not: served after the file was deleted)."""
    dep = tmp_path / "inc" / "dep.h"
    source = f'_Pragma("GCC dependency \\"{dep}\\"")\nvoid k(int *x) {{ x[0] = 7; }}\n'
    workload, bundle = _warmed(warm, tmp_path, source, folder=False)
    dep.unlink()
    cold = served(warm, workload, None)
    assert "dep.h: No such file or directory" in str(cold.get("error")), cold
    assert served(warm, workload, bundle) == cold


def test_an_nvcc_script_running_another_script_keys_that_one_s_edit(
    warm: Warm, tmp_path: Path
) -> None:
    """`exec "<inner>" "$@"`, the inner script adding `-DWVAL=1`, edited to 2: the cold builds
    differ, so must the keys (before: the same key, the outer keyed as the real nvcc)."""
    real = nvcc_or_skip()
    (tmp_path / "w.py").write_text(CUDA_WORKLOAD)
    inner = _script(tmp_path / "inner" / "nvcc", f'exec {real} -DWVAL=1 "$@"')
    outer = _script(tmp_path / "bin" / "nvcc", f'exec "{inner}" "$@"')
    before = _keys(warm, tmp_path, "before", outer)
    _script(inner, f'exec {real} -DWVAL=2 "$@"')
    after = _keys(warm, tmp_path, "after", outer)
    assert set(before.values()) != set(after.values())
    assert not set(before) & set(after)


def test_nvcc_scripts_running_each_other_are_keyed_not_followed_for_good(tmp_path: Path) -> None:
    """Two pass-through scripts exec'ing each other (as a link loop would): followed
    `MAX_PASSED` deep, then keyed by the digest, not recursed without end."""
    from warmcli.wrapper_script import NVCC_SCRIPT_MARK, nvcc_script

    one, two = tmp_path / "one" / "nvcc", tmp_path / "two" / "nvcc"
    _script(one, f'exec "{two}" "$@"')
    _script(two, f'exec "{one}" "$@"')
    assert nvcc_script(str(one)).startswith(NVCC_SCRIPT_MARK)


def test_explain_misses_names_the_dependency_pragma_s_file_edited(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm verify --explain-misses` says which file changed, as for an edited header (before:
    `headers: bundle has sha256 ..., this process wants ...` and no name)."""
    source = '#pragma GCC dependency "dep.h"\nvoid k(int *x) { x[0] = 7; }\n'
    workload, bundle = _warmed(warm, tmp_path, source)
    (tmp_path / "inc" / "dep.h").write_text("/* edited */\n")
    got = warm("verify", bundle, "--workload", workload, "--explain-misses")
    assert "miss: kernel k: headers:" in got.stdout + got.stderr, got.stdout + got.stderr
    assert "(changed: dep.h)" in got.stdout + got.stderr, got.stdout + got.stderr


def test_an_nvcc_script_running_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    """A pass-through script naming a FIFO (made by hand, or in a link's place): followed, the
    FIFO's open waited for a writer for good; it is no file to read, so keyed as before ("")."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outer = _script(tmp_path / "bin" / "nvcc", f'exec "{fifo}" "$@"')
    code = (
        f"from warmcli.wrapper_script import nvcc_script; print(repr(nvcc_script({str(outer)!r})))"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert got.stdout.strip() == "''", got.stdout + got.stderr


def test_an_nvcc_script_passing_through_from_an_env_shebang_keys_its_edit(
    warm: Warm, tmp_path: Path
) -> None:
    """`#!/usr/bin/env -S NVCC_APPEND_FLAGS=-DWVAL=1 sh` then `exec <nvcc> "$@"`: the shebang sets
    what nvcc appends, edited to 2 the cold builds differ (before: the shebang, read past, left
    it a pass-through keyed as the real nvcc: the same key)."""
    real = nvcc_or_skip()
    (tmp_path / "w.py").write_text(CUDA_WORKLOAD)
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    keys = []
    for value in (1, 2):
        shebang = f"#!/usr/bin/env -S NVCC_APPEND_FLAGS=-DWVAL={value} sh"
        wrapper.write_text(f'{shebang}\nexec "{real}" "$@"\n')
        wrapper.chmod(0o755)
        keys.append(_keys(warm, tmp_path, f"v{value}", wrapper))
    assert set(keys[0].values()) != set(keys[1].values())
    assert not set(keys[0]) & set(keys[1])
