"""Review of stop 46's merges (trial46b, remote46, equality46), each finding through real parts:
the real CLI in subprocesses, real production processes (`equality_gen.DRIVE`), the real C
compiler and NVRTC, real files.

- A host kernel whose `__BASE_FILE__` comes by a paste (`C(__BASE, _FILE__)`), its options
  (`-DWHO=__BASE_FILE__`), a wrapper script's (`WARM_CC`) or a header its options pre-include
  (`-include pre.h`) still read warm's temporary build file's path, another in every build:
  `base_file` redefined it only where the kernel's own text, options or defines spelt it (or an
  include), in the unit's first line (after any pre-included header), and `sharing` put a
  kernel whose options name it in a shared unit, where none is redefined. Such a kernel is
  alone now, and every kernel alone is compiled from `<entry>.c` named relative to cc's
  folder, so `__BASE_FILE__` is that name (no redefinition: merged so, as one read first made
  gcc skip a precompiled header, `test_review45a`).
- A system header reaching more than `system_shadows.MAX_SYSTEM` headers had the rest silently
  not followed: a header added to the kernel's `-I` folder that one of those includes kept the
  key (a stale hit). Such a kernel is unkeyed now, as past the key's other bounds.
- `import warmcli.pycuda.autoinit` then `warmcli.pycuda.autoinit.context.synchronize()` (PyCUDA's
  `pycuda.autoinit.context` idiom) failed a GPU-less `warm run --arch` and `warm verify
  --workload --arch` (and `--pycuda` runs): the stand-in was put in `sys.modules` only, so the
  package `warmcli.pycuda` had no attribute `autoinit`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm, nvcc_or_skip, nvrtc_release_or_skip
from equality_gen import DRIVE
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WHO = """
from warmcli import Kernel
K = Kernel(SOURCE, 'who', 'P', options=OPTIONS)

def workload(rt):
    b = rt.buffer(64, 'int8'); rt.launch(K, b)
    return {'who': b}, []
"""
_COPY = " int n = 0; while (s[n] && n < 63) { out[n] = s[n]; n++; } }"
PASTED = "#define C(a, b) a##b\nvoid who(char *out) { const char *s = C(__BASE, _FILE__);" + _COPY
BY_WRAPPER = "void who(char *out) { const char *s = WHO;" + _COPY


def _computed(warm: Warm, w: Path, **env: str) -> bytes:
    """What the workload `w` writes in a cold production process (no bundle)."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVE, str(w)],
        capture_output=True,
        text=True,
        env=dict(warm.env, PYTHONPATH=str(ROOT), WARM_BUNDLE="", **env),
        timeout=120,
        cwd=w.parent,
    )
    assert proc.returncode == 0, proc.stderr
    return bytes.fromhex(dict(json.loads(proc.stdout)["out"])["who"]).rstrip(b"\0")


@pytest.mark.parametrize("how", ["paste", "option", "wrapper", "pre-included"])
def test_base_file_unwritten_in_the_kernel_reads_the_entry(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    """Was `/tmp/warm-cc-x1y2/batch.c`, another in each build: a hit and a cold start read
    two texts."""
    env, source, options = {}, PASTED, []
    if how == "option":  # (it shared a unit: `sharing` read no option for it)
        source, options = BY_WRAPPER, ["-DWHO=__BASE_FILE__"]
    if how == "pre-included":  # (read before the unit's first line, which redefined it)
        (tmp_path / "pre.h").write_text("static const char *who_ = __BASE_FILE__;\n")
        source = BY_WRAPPER.replace("WHO", "who_")
        options = ["-include", str(tmp_path / "pre.h")]
    if how == "wrapper":
        script = tmp_path / "wrap.sh"
        script.write_text('#!/bin/sh\nexec cc -DWHO=__BASE_FILE__ "$@"\n')
        script.chmod(0o755)
        env, source = {"WARM_CC": str(script)}, BY_WRAPPER
    w = tmp_path / "w.py"
    w.write_text(f"SOURCE = {source!r}\nOPTIONS = {options!r}\n{WHO}")
    assert _computed(warm, w, **env) == b"who.c"


def _chain(folder: Path, count: int) -> None:
    """System headers h0.h .. h{count-1}.h, each including the next."""
    folder.mkdir()
    for i in range(count):
        (folder / f"h{i}.h").write_text(f"#include <h{i + 1}.h>\n")


def test_a_system_header_past_the_bound_leaves_its_kernel_unkeyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `MAX_SYSTEM` the walk stopped and said nothing: `h2100.h` added to `-I` after a
    build kept the key, the old build served."""
    from warmcli.headers import headers_digest
    from warmcli.system_shadows import MAX_SYSTEM
    from warmcli.unkeyed import reason_of

    monkeypatch.chdir(tmp_path)
    count = MAX_SYSTEM + 50
    _chain(tmp_path / "sys", count)
    (tmp_path / "inc").mkdir()
    source, options = "#include <h0.h>\nvoid k(int *o) { o[0] = 1; }\n", (f"-I{tmp_path}/inc",)
    system = (str(tmp_path / "sys"),)
    digest = headers_digest(source, options, system=lambda: system)
    assert "over 2048 system headers" in reason_of(digest)
    # Within the bound, and without folders of its own to shadow anything, it keys as before.
    _chain(tmp_path / "few", 10)
    few = (str(tmp_path / "few"),)
    assert reason_of(headers_digest(source, options, system=lambda: few)) == ""
    assert reason_of(headers_digest(source, (), system=lambda: system)) == ""


AUTOINIT_CONTEXT = '''
import numpy as np
import warmcli.pycuda.autoinit  # was: import pycuda.autoinit
from warmcli.pycuda import SourceModule

MOD = SourceModule("""
__global__ void twice(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 2.0f * x[i];
}
""")

def workload(rt):
    x = rt.buffer(256, "float32")
    MOD.get_function("twice")(x, np.int32(256), block=(256, 1, 1), grid=(1, 1))
    warmcli.pycuda.autoinit.context.synchronize()  # was: pycuda.autoinit.context
'''


def test_autoinit_named_by_its_package_in_a_gpu_less_prebuild(warm: Warm, tmp_path: Path) -> None:
    """Was `AttributeError: module 'warmcli.pycuda' has no attribute 'autoinit'`, in each."""
    nvrtc_release_or_skip()
    w = tmp_path / "app.py"
    w.write_text(AUTOINIT_CONTEXT)
    bundle = tmp_path / "b.warm"
    run = warm("run", "--arch", "sm_90", w, "-b", bundle)
    assert run.returncode == 0, run.stderr
    pycuda = warm("run", "--pycuda", "--arch", "sm_90", w, "-b", tmp_path / "p.warm")
    assert pycuda.returncode == 0, pycuda.stderr
    verify = warm("verify", bundle, "--workload", w, "--arch", "sm_90")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_cuda_home_too_long_to_name_a_file_is_passed_over(warm: Warm) -> None:
    """`warm devices --compiler nvcc` with `CUDA_HOME` of a 300-byte name (a typo, a value
    meant for something else) ended on `[Errno 36] File name too long: '/AAAA…/bin/nvcc'`
    (pathlib's `is_file` raises for it): it is passed over, and said, as a folder without
    nvcc is."""
    nvcc_or_skip()
    home = "/" + "A" * 300
    proc = warm.with_env(CUDA_HOME=home)("devices", "--compiler", "nvcc")
    assert proc.returncode == 0, proc.stderr
    assert f"CUDA_HOME={home} holds no bin/nvcc" in proc.stdout, proc.stdout


def _listing_nothing(tmp_path: Path) -> None:
    """`tmp_path/cc`: a compiler binary that answers, listing nothing (each call's arguments
    appended to `tmp_path/asked`)."""
    log = tmp_path / "asked"
    program = tmp_path / "asked.c"
    program.write_text(
        "#include <stdio.h>\nint main(int n, char **v) {\n"
        f'  FILE *f = fopen("{log}", "a"); for (int i = 1; i < n; i++) fprintf(f, "%s ", v[i]);\n'
        '  fprintf(f, "\\n"); return 0;\n}\n'
    )
    subprocess.run(["cc", "-o", str(tmp_path / "cc"), str(program)], check=True, timeout=60)


def _wrappers(tmp_path: Path) -> None:
    """`_another_gcc_tree(tmp_path)`, and `wrap.sh` (`exec "${REAL_CC:-cc}" "$@"`) and
    `other.sh` (cc with `GCC_EXEC_PREFIX` the other tree's) beside it; a gcc tree's absence
    is kept as `skip` there."""
    try:
        cc, own, alt = _another_gcc_tree(tmp_path)
    except pytest.skip.Exception as exc:
        (tmp_path / "skip").write_text(str(exc))
        return
    (tmp_path / "trees").write_text(json.dumps([str(own), str(alt)]))
    wrapper, other = tmp_path / "wrap.sh", tmp_path / "other.sh"
    wrapper.write_text('#!/bin/sh\nexec "${REAL_CC:-cc}" "$@"\n')
    other.write_text(f'#!/bin/sh\nGCC_EXEC_PREFIX={tmp_path / "alt"}/ exec {cc} "$@"\n')
    for script in (wrapper, other):
        script.chmod(0o755)


@pytest.fixture(scope="module")
def _settled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The files of the tests that need them settled, made at once and settled by one wait
    (`toolchain.RACY_SECONDS`: a file just written is never remembered), each in its own
    folder (its own warm home)."""
    made = {}
    for name, make in (("listing_nothing", _listing_nothing), ("wrappers", _wrappers)):
        made[name] = tmp_path_factory.mktemp(name)
        make(made[name])
    time.sleep(2.1)
    return made


def test_a_cc_that_lists_no_folders_is_asked_once_not_in_every_process(
    _settled: dict[str, Path],
) -> None:
    """A cc that answers `cc -E -v` with no search list (another than GCC or Clang) was run
    again in every process that keyed a host kernel with folders of its own, production's hot
    start too (the module doc: 'a hot start runs no compiler for them'): only a list was
    remembered. Its answer, none, is remembered now."""
    tmp_path = _settled["listing_nothing"]
    log, script = tmp_path / "asked", tmp_path / "cc"
    ask = "import sys; from warmcli.backends.system_folders import system_folders as f; "
    env = dict(os.environ, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp_path / "home"))
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", ask + "print(f(sys.argv[1]))", str(script)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert proc.stdout == "()\n", proc.stderr
    assert log.read_text().count("-E -v") == 1, log.read_text()


def test_a_system_header_over_4_mb_leaves_its_kernel_unkeyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system header's includes were read in its first 4 MB and the rest passed over
    unsaid: `late.h`, included past them, added to `-I` kept the key."""
    from warmcli.headers import headers_digest
    from warmcli.system_shadows import MAX_SCANNED
    from warmcli.unkeyed import reason_of

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "h0.h").write_text("#include <big.h>\n")
    with open(tmp_path / "sys" / "big.h", "w") as f:
        f.write("/*" + " " * MAX_SCANNED + "*/\n#include <late.h>\n")
    (tmp_path / "inc").mkdir()
    source, options = "#include <h0.h>\nint k;\n", (f"-I{tmp_path}/inc",)
    system = (str(tmp_path / "sys"),)
    assert "or 4 MB" in reason_of(headers_digest(source, options, system=lambda: system))


def test_an_include_folder_cc_can_search_but_not_list_still_shadows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `-I` folder of mode 0111 (searchable, not listable: cc opens `inc/stddef.h` in it)
    made `_held`'s listing fail, and the shadowing header added there kept the key. Root
    lists any folder, so the refusal a user meets is a fake here (`os.listdir` raising
    PermissionError for that folder); the files and the system folders are real."""
    from warmcli.backends.system_folders import system_folders
    from warmcli.backends.toolchain import probe
    from warmcli.headers import headers_digest

    monkeypatch.chdir(tmp_path)
    folders = system_folders(probe("cc", "cc").path)
    inc = tmp_path / "inc"
    inc.mkdir()
    listdir = os.listdir

    def fake_listdir(path: str | os.PathLike[str] = ".") -> list[str]:
        if os.fspath(path).startswith(str(inc)):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", fake_listdir)
    source, options = "#include <stdlib.h>\nint k;\n", (f"-I{inc}",)
    before = headers_digest(source, options, system=lambda: folders)
    (inc / "stddef.h").write_text("#define SHADOWED 1\n")
    assert headers_digest(source, options, system=lambda: folders) != before


def _folders_in_a_process(cc: str, home: Path, **env: str) -> list[str]:
    """`system_folders(cc)` as a fresh process with `env` finds them (warm's home `home`)."""
    ask = "import sys; from warmcli.backends.system_folders import system_folders as f; "
    proc = subprocess.run(
        [sys.executable, "-c", ask + "print('\\n'.join(f(sys.argv[1])))", cc],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), WARM_HOME=str(home), **env),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def _another_gcc_tree(tmp_path: Path) -> tuple[str, Path, Path]:
    """cc, its gcc folder (`/usr/lib/gcc/x86_64-linux-gnu/12`) and another under `tmp_path/alt`
    for `GCC_EXEC_PREFIX`: the machine's, linked, its `include` a folder of its own."""
    from warmcli.backends.toolchain import probe

    cc = probe("cc", "cc").path
    said = subprocess.run([cc, "-print-libgcc-file-name"], capture_output=True, text=True)
    own = Path(said.stdout.strip()).parent
    if not (own / "include" / "stddef.h").is_file():
        pytest.skip(f"no gcc tree here: {own}")
    alt = tmp_path / "alt" / own.parent.name / own.name
    alt.mkdir(parents=True)
    for entry in own.iterdir():
        if entry.name != "include":
            (alt / entry.name).symlink_to(entry)
    (alt / "include").mkdir()
    return cc, own, alt


def test_cc_folders_under_gcc_exec_prefix_are_not_another_process_s(tmp_path: Path) -> None:
    """`GCC_EXEC_PREFIX=/opt/gcc/lib/gcc/` moves cc's own `include` folder (and keys the
    toolchain), but the folders were remembered by the binary's stamp alone: a process with
    the variable was given those a process without it remembered, and followed another
    `stddef.h`'s includes than cc reads. A real gcc tree: the machine's, linked, its `include`
    a folder of its own."""
    cc, own, alt = _another_gcc_tree(tmp_path)
    (alt / "include" / "stddef.h").write_text("#include <extra.h>\n")
    home = tmp_path / "home"
    assert str(own / "include") in _folders_in_a_process(cc, home)
    moved = _folders_in_a_process(cc, home, GCC_EXEC_PREFIX=f"{tmp_path / 'alt'}/")
    assert str(alt / "include") in moved, moved


def test_a_wrapper_cc_s_folders_are_asked_in_each_process(_settled: dict[str, Path]) -> None:
    """A wrapper script (`exec "${REAL_CC:-cc}" "$@"`) runs what the environment names, its
    own stamp unchanged: its version line is read in each process for that (never
    remembered), but its folders were remembered by its stamp, so a process whose script ran
    a gcc with another `include` folder was given the first one's."""
    tmp_path = _settled["wrappers"]
    if (tmp_path / "skip").exists():
        pytest.skip((tmp_path / "skip").read_text())
    own, alt = (Path(p) for p in json.loads((tmp_path / "trees").read_text()))
    wrapper, other = tmp_path / "wrap.sh", tmp_path / "other.sh"
    home = tmp_path / "home"
    assert str(own / "include") in _folders_in_a_process(str(wrapper), home)
    moved = _folders_in_a_process(str(wrapper), home, REAL_CC=str(other))
    assert str(alt / "include") in moved, moved
