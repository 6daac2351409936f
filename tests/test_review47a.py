"""Review of stop 47 (nvcc47): where a CUDA kernel's folders shadow what nvcc's own headers
include, and nvcc still built something else under the same key.

- `-Xcompiler -nostdinc`: `headers_digest` dropped the compiler's own folders for any kernel
  naming `-nostdinc`, so nvcc's `cuda_runtime.h` (which nvcc still reads from its toolkit,
  given by nvcc itself) was not followed: an `inc/stdlib.h` added to the kernel's first folder
  changed the cubin while the key stayed.
- `CPATH` (or `CPLUS_INCLUDE_PATH`) at a folder, a kernel that includes nothing: its headers were
  not looked at (no `include` in its text), though nvcc reads `cuda_runtime.h` before it and
  finds `stdlib.h` in `CPATH` first: the same key for another cubin.
- `-I$CUDA_HOME/include` (nvcc's own `include` named by the kernel): the `cuda_runtime.h` nvcc
  reads there was keyed as the kernel's header with all it reaches: another key than before,
  and ~500 ms at each process's first key. It is nvcc's own (by the folder's identity) now.
- Hot start: the remembered walk of nvcc's `cuda_runtime.h` listed 521 paths to `stat`, 77 of
  them subfolders found missing (each `stat` raising, ~10 us); the folder each was looked in is
  stamped too and vouches for it, so they are not kept (a link pointing nowhere is).

Real nvcc and gcc; each key and cubin made in a fresh process (`CPATH` is read once a process).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, nvcc_or_skip

SHADOW = "#define SHADOWED 42\n#include_next <stdlib.h>\n"
PLAIN = (
    '#ifndef SHADOWED\n#define SHADOWED 1\n#endif\nextern "C" __global__ void k(int *o) '
    "{ o[0] = SHADOWED; }\n"
)
KEY_AND_CUBIN = """
import hashlib, json, sys
from warmcli import Kernel
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.cuda.nvcc import NvccCompiler
from warmcli.kernel import included_headers, kernel_key
compiler = NvccCompiler()
identity = compiler.toolchain.identity
kernel = Kernel(sys.argv[1], "k", "P", language="cuda", options=tuple(json.loads(sys.argv[2])))
key = kernel_key(kernel, "sm_90", identity)
built = compiler.compile_group([CompileUnit(key, kernel, "sm_90")]).binary
print(json.dumps([key, hashlib.sha256(built).hexdigest(), included_headers(kernel, identity)]))
"""


def _key_and_cubin(
    options: list[str], env: dict[str, str], home: Path, source: str = PLAIN
) -> tuple[str, str, str]:
    """The kernel's key, its cubin's sha256 and its headers' digest, in a fresh process."""
    run_env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "CPLUS_INCLUDE_PATH")}
    run_env.update(env, WARM_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", KEY_AND_CUBIN, source, json.dumps(options)],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    key, cubin, headers = json.loads(done.stdout)
    return key, cubin, headers


@pytest.mark.nvcc
def test_nostdinc_given_to_nvccs_gcc_still_follows_cuda_runtime(tmp_path: Path) -> None:
    """`-Xcompiler -nostdinc` with gcc's own folders named as the kernel's `-I`, after
    `inc`: nvcc still reads its toolkit's `cuda_runtime.h`, whose `<stdlib.h>` is `inc`'s."""
    nvcc_or_skip()
    from warmcli.backends.system_folders import system_folders

    gxx = shutil.which("g++")
    own = system_folders(gxx, "c++") if gxx else ()
    if not own:
        pytest.skip("no g++ that lists its folders")
    inc = tmp_path / "inc"
    inc.mkdir()
    options = ["-Xcompiler", "-nostdinc", f"-I{inc}", *(f"-I{f}" for f in own)]
    before = _key_and_cubin(options, {}, tmp_path / "home")
    (inc / "stdlib.h").write_text(SHADOW)
    after = _key_and_cubin(options, {}, tmp_path / "home")
    assert after[1] != before[1]  # nvcc read it: another cubin
    assert after[0] != before[0]  # another key (was the same)


@pytest.mark.nvcc
@pytest.mark.parametrize("variable", ["CPATH", "CPLUS_INCLUDE_PATH"])
def test_a_kernel_including_nothing_with_cpath_at_a_shadowing_folder_is_keyed(
    tmp_path: Path, variable: str
) -> None:
    """nvcc's `cuda_runtime.h` includes `<stdlib.h>`: one `CPATH`'s folder holds is read
    there, though the kernel names no folder and includes nothing."""
    nvcc_or_skip()
    inc = tmp_path / "inc"
    inc.mkdir()
    env = {variable: str(inc)}
    before = _key_and_cubin([], env, tmp_path / "home")
    assert before[2] == ""  # nothing shadowed: no headers keyed, as before
    (inc / "stdlib.h").write_text(SHADOW)
    after = _key_and_cubin([], env, tmp_path / "home")
    assert after[1] != before[1]  # nvcc read it: another cubin
    assert after[0] != before[0]  # another key (was the same)


@pytest.fixture
def fake_store(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A fake of warm's home for `system_shadows` (a dict), nothing racy, memos cleared."""
    from warmcli import system_shadows

    kept: dict[str, object] = {}
    monkeypatch.setattr(system_shadows, "RACY_NS", 0)
    monkeypatch.setattr(system_shadows, "store", [(kept.get, kept.__setitem__)])
    for memo in ("_memo", "_roots", "_stamps"):  # (this process's put back after)
        monkeypatch.setattr(system_shadows, memo, {})
    return kept


def _new_process() -> None:
    """What a fresh process has: no memo of a walk, a place or a stamp."""
    from warmcli import system_shadows

    for memo in (system_shadows._memo, system_shadows._roots, system_shadows._stamps):
        memo.clear()


def test_a_missing_subfolder_is_not_stamped_but_vouched_for_by_its_folder(
    tmp_path: Path, fake_store: dict[str, object]
) -> None:
    """A remembered walk of a system header lists no subfolder it found missing (`stat`ing
    one raises: ~10 us a path at a hot start, 77 of cuda_runtime.h's 521): the folder's stamp
    it was looked in vouches for it. Made later, the walk is not believed: what it includes,
    a kernel's folder shadows, is keyed."""
    from warmcli.system_shadows import shadowed

    system, kernel = tmp_path / "sys", tmp_path / "inc"
    system.mkdir()
    kernel.mkdir()
    (system / "root.h").write_text("#include <sub/x.h>\n#include <plain.h>\n")
    (system / "plain.h").write_text("#define PLAIN 1\n")
    (kernel / "y.h").write_text("#define Y 1\n")
    orders = ([str(kernel)], [str(kernel)])
    assert shadowed("root.h", orders, (str(system),)) == []
    (entry,) = fake_store.values()
    assert isinstance(entry, dict)
    paths = entry["paths"].split("\0")
    assert str(system / "plain.h") in paths and str(system) in paths
    assert str(system / "sub") not in paths  # (was stamped "-": a raise in each process)
    _new_process()
    assert shadowed("root.h", orders, (str(system),)) == []  # believed: nothing changed
    (system / "sub").mkdir()
    (system / "sub" / "x.h").write_text("#include <y.h>\n")
    _new_process()
    assert shadowed("root.h", orders, (str(system),)) == [("y.h", False, str(system / "sub"))]


def test_a_link_to_a_missing_subfolder_stays_stamped(
    tmp_path: Path, fake_store: dict[str, object]
) -> None:
    """A subfolder that is a link pointing nowhere: what it points at may be made while its
    folder stays as it was, so its own stamp is kept and checked."""
    from warmcli.system_shadows import shadowed

    system, kernel, there = tmp_path / "sys", tmp_path / "inc", tmp_path / "there"
    system.mkdir()
    kernel.mkdir()
    (system / "root.h").write_text("#include <sub/x.h>\n")
    (system / "sub").symlink_to(there)
    (kernel / "y.h").write_text("#define Y 1\n")
    orders = ([str(kernel)], [str(kernel)])
    assert shadowed("root.h", orders, (str(system),)) == []
    (entry,) = fake_store.values()
    assert isinstance(entry, dict)
    assert str(system / "sub") in entry["paths"].split("\0")
    there.mkdir()
    (there / "x.h").write_text("#include <y.h>\n")
    _new_process()
    assert shadowed("root.h", orders, (str(system),)) == [("y.h", False, str(system / "sub"))]


@pytest.mark.nvcc
def test_a_kernel_naming_nvccs_own_include_folder_keys_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-I$CUDA_HOME/include` (nvcc's own `include`, spelled otherwise): the `cuda_runtime.h`
    nvcc reads there is its own, not the kernel's header: the key is as where no folders are
    told (stop 47 keyed all it reaches, ~500 ms at each process's first key, and another key);
    a `stdlib.h` a later folder of the kernel's holds is still keyed."""
    nvcc = nvcc_or_skip()
    from warmcli import Kernel
    from warmcli.backends.cuda.host_options import toolkit_includes
    from warmcli.backends.cuda.nvcc import NvccCompiler
    from warmcli.kernel import CC_SYSTEM, included_headers

    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    own = toolkit_includes(nvcc)
    assert own
    include = os.path.realpath(own[0])
    identity = NvccCompiler().toolchain.identity
    kernel = Kernel(PLAIN, "k", "P", language="cuda", options=(f"-I{include}",))
    told = included_headers(kernel, identity)
    system = CC_SYSTEM.pop(identity)
    try:
        assert included_headers(kernel, identity) == told
    finally:
        CC_SYSTEM[identity] = system
    inc = tmp_path / "inc"
    inc.mkdir()
    options = [f"-I{include}", f"-I{inc}"]
    before = _key_and_cubin(options, {}, tmp_path / "home")
    (inc / "stdlib.h").write_text(SHADOW)
    after = _key_and_cubin(options, {}, tmp_path / "home")
    assert after[1] != before[1] and after[0] != before[0]


def test_a_system_header_edited_with_its_mtime_put_back_is_walked_again(
    tmp_path: Path, fake_store: dict[str, object]
) -> None:
    """A toolkit header edited after `warm run`, its mtime put back (`touch -r`): its ctime
    moved, so the remembered walk is not believed and the name it includes now is keyed."""
    from warmcli.system_shadows import shadowed

    system, kernel = tmp_path / "sys", tmp_path / "inc"
    system.mkdir()
    kernel.mkdir()
    root = system / "root.h"
    root.write_text("#include <plain.h>\n")
    (system / "plain.h").write_text("#define PLAIN 1\n")
    (kernel / "y.h").write_text("#define Y 1\n")
    orders = ([str(kernel)], [str(kernel)])
    assert shadowed("root.h", orders, (str(system),)) == []
    assert len(fake_store) == 1
    was = root.stat()
    root.write_text("#include <y.h>\n//a\n")  # (as long: the size the same)
    assert root.stat().st_size == was.st_size
    os.utime(root, ns=(was.st_atime_ns, was.st_mtime_ns))
    _new_process()
    assert shadowed("root.h", orders, (str(system),)) == [("y.h", False, str(system))]


@pytest.mark.nvcc
def test_a_kernel_folder_gcc_drops_as_its_own_does_not_hide_a_later_ones_header(
    tmp_path: Path,
) -> None:
    """`-I/usr/include -I inc`: gcc drops a `-I` folder that is one of its system folders
    ("ignoring duplicate directory"), so `inc`'s `stdlib.h` is read before `/usr/include`'s,
    where nvcc's `cuda_runtime.h` includes it: keyed (stop 47 counted `/usr/include` first)."""
    nvcc_or_skip()
    from warmcli.backends.system_folders import system_folders

    gxx = shutil.which("g++")
    own = system_folders(gxx, "c++") if gxx else ()
    first = next((f for f in own if os.path.isfile(os.path.join(f, "stdlib.h"))), None)
    if first is None:
        pytest.skip("no g++ folder holding stdlib.h")
    inc = tmp_path / "inc"
    inc.mkdir()
    options = [f"-I{first}", f"-I{inc}"]
    before = _key_and_cubin(options, {}, tmp_path / "home")
    (inc / "stdlib.h").write_text(SHADOW)
    after = _key_and_cubin(options, {}, tmp_path / "home")
    assert after[1] != before[1]  # gcc read it: another cubin
    assert after[0] != before[0]  # another key (was the same)
