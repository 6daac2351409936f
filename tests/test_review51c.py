"""Review 51c (a hostile review of keying: can a stale binary be served?): what it found.

- `LD_RUN_PATH`: GNU ld writes it into a shared object as its `RUNPATH` where no `-rpath` is
  given, and cc's link of every host kernel read it from warm's environment, while no key
  held it. A kernel warmed with `LD_RUN_PATH=/opt/v1` was served, under the key a process
  without it computes, a binary whose `dlopen("libplug.so")` (and whose needed libraries)
  were found in `/opt/v1`, where a cold build finds none there: a hit returned 1, a cold
  start -1. Now no compile warm runs gets `LD_RUN_PATH` (`backends.processes`): a build
  never depends on it (a kernel that wants a run path names `-Wl,-rpath,...`, keyed).
- nvcc's `nvcc.profile` (beside the nvcc binary it is started as): an `INCLUDES += -DR51C=3`
  there (or a `PTXAS_FLAGS`, a `PATH +=` to another gcc) changes every build, but nvcc's
  identity is its version line and host compiler alone, and its `--dryrun` was remembered by
  the binary's stamp: the same key for the cubin of `o[0] = R51C` built with 1 and with 3.
  Now a profile no toolkit ships is named in the identity by its digest
  (`backends.cuda.profile`: served as another kernel, as `NVCC_APPEND_FLAGS` is), and the
  `--dryrun`s are remembered by that digest too; a toolkit's own profile keys as before.
  nvcc also takes the variables the profile adds to (`INCLUDES +=`, `SYSTEM_INCLUDES`,
  `CUDAFE_FLAGS`, `PTXAS_FLAGS`) from the environment first: `INCLUDES=-DR51C=5` or
  `PTXAS_FLAGS=-O0` built another cubin under the key of none. A compile where one is set
  is now refused, naming it (give such options in `NVCC_APPEND_FLAGS`, keyed).
- A NUL character in a kernel's source: gcc reads past it as a blank (a warning), so
  `#\\0include "own.h"` (or `#include\\0"own.h"`) includes `own.h`, while the key's scan of
  directives read no include there (its headers part named no file: an edit to `own.h` was
  served the old build), and what shares a unit read `#\\0include <h.h>` and `#\\0define N 3`
  as a null directive, so such a kernel shared a unit, its header's and its macros reaching
  the kernels after it. `Kernel(...)` now refuses a NUL in its source, options or defines
  (`printable.refuse_unreadable`), as it refuses a lone surrogate; and a header holding
  one (`#\\0include "deep.h"` in `own.h`) is read as gcc reads it (`directives`: a NUL is a
  blank), so `deep.h` keys the kernel (before: only `own.h` did).
- A C compiler that is a wrapper script tuning for the building CPU (`WARM_CC` running `exec
  cc -march=native "$@"`, or `$CFLAGS` saying so): its identity named the script's digest,
  not the CPU, so its builds were served on any CPU where the same script is the compiler
  (another CPU's instructions: a crash, or FMA contraction: other bits), where a kernel's
  own `-march=native` is served on its building CPU only. Now such a compiler's identity is
  keyed with this CPU, as `-march=native`'s kernels are (`HostCompiler.toolchain`), and a
  build through it that names no CPU (an older warm's) is not served where it tunes.
- gcc reads a `specs` file found along its library folders, `LIBRARY_PATH`'s among them, and
  takes its options into every compile: one there adding `-DR51C=7` built `o[0] = R51C` as 7
  under the key a process without `LIBRARY_PATH` computes (its hit 7, a cold build 1), and an
  edit of it was served the old build. No key can read what cc makes of a specs file, so a
  compile where `LIBRARY_PATH` makes cc read one (`-print-file-name=specs`, with and without
  the variable) is refused, naming the file, as a kernel's `-specs=` is.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A host kernel that opens a plugin by its bare name (the loader searches its caller's
# RUNPATH): the plugin's `v()`, or -1 where none is found.
_DLOPEN_WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('''
void *dlopen(const char *, int);
void *dlsym(void *, const char *);
void f(long *o) {
    void *h = dlopen("libr51cplug.so", 2);
    long (*v)(void) = h ? (long (*)(void))dlsym(h, "v") : 0;
    o[0] = v ? v() : -1;
}
''', "f", "P")
def workload(rt):
    x = rt.upload(np.zeros(1, dtype=np.int64))
    rt.launch(K, x)
    return x
"""
# A production process over argv[1], the workload's folder argv[2]: what a hit computes, its
# binary's RUNPATH, then what a cold build computes.
_SERVED_AND_COLD = """
import json, sys, sqlite3, warmcli
sys.path.insert(0, sys.argv[2])
from dl_workload import workload
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
out = {"served": rt.read(workload(rt)).tolist(), "missed": len(warmcli.report().misses)}
(blob,) = sqlite3.connect(sys.argv[1]).execute("select data from blobs").fetchone()
out["runpath"] = b"/r51c-v1" in blob
warmcli.use_bundle(None)
rt = warmcli.runtime("host")
out["cold"] = rt.read(workload(rt)).tolist()
print(json.dumps(out))
"""


def test_ld_run_path_never_reaches_a_build(warm: Any, tmp_path: Path) -> None:
    """Warmed with `LD_RUN_PATH` naming a folder holding the plugin, served where it is
    unset: before, the hit found the plugin (1) through the RUNPATH ld wrote, the cold build
    did not (-1), under one key. Now the build holds no RUNPATH: hit and cold agree."""
    plugin = tmp_path / "r51c-v1"
    plugin.mkdir()
    (tmp_path / "dl_workload.py").write_text(_DLOPEN_WORKLOAD)
    (plugin / "p.c").write_text("long v(void) { return 1; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", plugin / "libr51cplug.so", plugin / "p.c"], check=True
    )
    bundle = tmp_path / "b.warm"
    proc = warm.with_env(LD_RUN_PATH=str(plugin))(
        "run", tmp_path / "dl_workload.py", "-b", bundle, "-q"
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    got = warm.production(_SERVED_AND_COLD, bundle, tmp_path)
    assert got["missed"] == 0, got  # served, under the key a process without it computes
    assert got["served"] == got["cold"] == [-1], got
    assert not got["runpath"], got


def _toolkit_view(real: Path, at: Path, profile: str) -> Path:
    """A toolkit at `at` that is `real`'s (every file and folder linked) but for its
    `bin/nvcc.profile`, `profile`: nvcc reads the one beside the path it is started as."""
    (at / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (at / entry.name).symlink_to(entry)
    for entry in (real / "bin").iterdir():
        if entry.name != "nvcc.profile":
            (at / "bin" / entry.name).symlink_to(entry)
    (at / "bin" / "nvcc.profile").write_text(profile)
    return at / "bin" / "nvcc"


def test_an_edited_nvcc_profile_is_another_toolchain(tmp_path: Path) -> None:
    """The toolkit's own profile keys as the toolkit does (no key changed); one that defines
    a macro in every kernel (`INCLUDES += -DR51C=3`) is another identity, so another key
    (before: one key, two cubins); other edits: `test_a_toolkits_own_profiles_are_plain`."""
    from warmcli.backends.cuda.host_options import runs

    nvcc = Path(runs(nvcc_or_skip(), os.environ.get("PATH", "")))  # a script's: its binary
    real = nvcc.parent.parent
    if not (nvcc.parent / "nvcc.profile").is_file():
        pytest.skip(f"no nvcc.profile beside {nvcc}")
    stock = (nvcc.parent / "nvcc.profile").read_text()
    edited = re.sub(r"(?m)^(INCLUDES\s*\+=)", r'\1 "-DR51C=3"', stock)
    assert stock != edited
    views = [_toolkit_view(real, tmp_path / n, t) for n, t in (("own", stock), ("edited", edited))]
    from warmcli import Kernel
    from warmcli.backends.cuda.nvcc import NvccCompiler
    from warmcli.kernel import kernel_key

    k = Kernel('extern "C" __global__ void k(int *o) { o[0] = R51C; }', "k", "P", language="cuda")
    ids = [NvccCompiler(str(n)).toolchain.identity for n in (nvcc, *views)]
    keys = [kernel_key(k, "sm_90", i) for i in ids]
    got = {"ids": ids, "keys": keys}
    assert ids[0] == ids[1] and keys[0] == keys[1], got  # the toolkit's own: as before
    assert "; NVCC_PROFILE=" not in ids[0], got
    assert keys[2] != keys[0] and "; NVCC_PROFILE=" in ids[2], got  # before: one key


def test_a_toolkits_own_profiles_are_plain() -> None:
    """The profiles CUDA toolkits ship (a system toolkit's, with its target folder) key
    nothing; a folder outside the toolkit, an option, a flag or a name unknown key it."""
    from warmcli.backends.cuda.profile import is_plain

    system = (
        b"\nTOP              = $(_HERE_)/..\n\nCICC_PATH        = $(TOP)/nvvm/bin\n"
        b"NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n\nLD_LIBRARY_PATH += $(TOP)/lib:\n"
        b"PATH            += $(CICC_PATH):$(_HERE_):\n\n"
        b'INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)\n\n'
        b'LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" '
        b'"-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"\n\n'
        b"CUDAFE_FLAGS    +=\nPTXAS_FLAGS     +=\n"
    )
    assert is_plain(system)
    for edit in (
        (b"$(CICC_PATH):$(_HERE_):", b"/opt/gcc-13/bin:$(CICC_PATH):$(_HERE_):"),
        (b"$(TOP)/nvvm/bin", b"$(TOP)/../other/nvvm/bin"),
        (b'include" $(_SPACE_)', b'include" -DX=1 $(_SPACE_)'),
        (b"CUDAFE_FLAGS    +=", b"CUDAFE_FLAGS    += --diag_suppress=1"),
        (b"TOP              = $(_HERE_)/..", b"TOP              = /opt/cuda"),
        (b"\nPTXAS_FLAGS", b"\nCICC_FLAGS += -O0\nPTXAS_FLAGS"),
    ):
        assert edit[0] in system and not is_plain(system.replace(*edit)), edit


# A production process over argv[1] whose CPU is the one `/proc/cpuinfo`'s copy argv[2] says:
# the kernel's misses (and why), then what a hit or its own build and a cold build compute.
_ON_ANOTHER_CPU = """
import json, sys
sys.path.insert(0, sys.argv[3])
import warmcli
from warmcli.backends import native
native.CPUINFO = sys.argv[2]
from dl_workload import workload
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
out = {"served": rt.read(workload(rt)).tolist()}
out["missed"] = [m.name for m in warmcli.report().misses]
print(json.dumps(out))
"""


def test_a_wrapper_script_tuning_for_its_cpu_is_keyed_with_it(warm: Any, tmp_path: Path) -> None:
    """`WARM_CC` a script adding `-march=native`: its build names this CPU and is served on
    it; a process on another CPU (its `/proc/cpuinfo` another model's) builds its own,
    where before it was served this CPU's build."""
    script = tmp_path / "cc"
    script.write_text('#!/bin/sh\nexec cc -march=native "$@"\n')
    script.chmod(0o755)
    (tmp_path / "dl_workload.py").write_text(_DLOPEN_WORKLOAD)
    bundle = tmp_path / "b.warm"
    wrapped = warm.with_env(WARM_CC=str(script))
    proc = wrapped("run", tmp_path / "dl_workload.py", "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    other = tmp_path / "cpuinfo"
    other.write_text("vendor_id\t: Other\nmodel name\t: Another CPU\nflags\t\t: fpu sse2\n\n")
    there = wrapped.production(_ON_ANOTHER_CPU, bundle, other, tmp_path)
    assert there["missed"] == ["f"], there  # before: served this CPU's build
    here = wrapped.production(_ON_ANOTHER_CPU, bundle, "/proc/cpuinfo", tmp_path)
    assert here["missed"] == [] and there["served"] == here["served"], here  # its own: served
    with sqlite3.connect(bundle) as db:
        (toolchain,) = db.execute("select toolchain from kernels").fetchone()
    assert "wrapper script" in toolchain and " +native " in toolchain, toolchain


# A kernel computing a macro a compile's options may define.
_SPECS_WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("#ifndef R51C\\n#define R51C 1\\n#endif\\nvoid f(long *o) { o[0] = R51C; }", "f", "P")
def workload(rt):
    x = rt.upload(np.zeros(1, dtype=np.int64))
    rt.launch(K, x)
    return x
"""


def test_a_specs_file_in_library_path_is_refused(warm: Any, tmp_path: Path) -> None:
    """A `specs` file in a `LIBRARY_PATH` folder that defines a macro in every compile: the
    compile is refused, naming it (before: built, stored, served where it is not). A
    `LIBRARY_PATH` with no specs file builds as before (`test_keyprop38`, `test_needed40`)."""
    dumped = subprocess.run(["cc", "-dumpspecs"], capture_output=True, text=True)
    if dumped.returncode != 0 or "*cpp:\n" not in dumped.stdout:
        pytest.skip("cc is no gcc (it has no specs)")
    head, _, rest = dumped.stdout.partition("*cpp:\n")
    line, _, tail = rest.partition("\n")
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "specs").write_text(f"{head}*cpp:\n{line} -DR51C=7\n{tail}")
    workload = tmp_path / "specs_workload.py"
    workload.write_text(_SPECS_WORKLOAD)
    with_specs = warm.with_env(LIBRARY_PATH=str(folder))
    proc = with_specs("run", workload, "-b", tmp_path / "b.warm", "-q")
    said = " ".join((proc.stderr + proc.stdout).split())
    assert proc.returncode != 0, said  # before: exit 0, `o[0] = 7` stored
    assert f"cc reads the specs file {folder / 'specs'} in a LIBRARY_PATH or" in said, said
    assert "Traceback" not in said, said


_CUDA_WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('extern "C" __global__ void k(int *o) { o[0] = 1; }', "k", "P", language="cuda")
def workload(rt):
    x = rt.upload(np.zeros(1, dtype=np.int32))
    rt.launch(K, x, grid=(1,), block=(1,))
    return x
"""


def test_nvcc_profile_variables_from_the_environment_are_refused(warm: Any, tmp_path: Path) -> None:
    """`INCLUDES=-DR51C=5` (nvcc's profile adds its own to the environment's): refused,
    naming the variable, where before the cubin was built with it under the key of none."""
    nvcc = nvcc_or_skip()
    workload = tmp_path / "cuda_workload.py"
    workload.write_text(_CUDA_WORKLOAD)
    args = ("run", workload, "--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc, "-q")
    proc = warm.with_env(INCLUDES="-DR51C=5")(*args, "-b", tmp_path / "b.warm")
    said = " ".join((proc.stderr + proc.stdout).split())
    assert proc.returncode != 0, said
    assert "INCLUDES is set in the environment, and nvcc adds it to every compile" in said, said
    assert "Traceback" not in said, said


def test_a_nul_in_a_kernel_is_refused() -> None:
    """`#\\0include "own.h"`: `Kernel` refuses it (before: made, keyed with no header, and
    sharing a unit), as it does a NUL in an option or a define (a workload making one
    fails as any raising at import: one line)."""
    from warmcli import Kernel

    body = "void f(long *o) { o[0] = OWN; }"
    for source, options, defines in (
        ('#\0include "own.h"\n' + body, ["-Iinc"], {}),
        ('#include\0"own.h"\n' + body, ["-Iinc"], {}),
        ("#\0define OWN 3\n" + body, [], {}),
        (body, ["-DOWN=\0"], {}),
        (body, [], {"OWN": "1\0"}),
    ):
        with pytest.raises(ValueError, match="holds a NUL"):  # (options: since before)
            Kernel(source, "f", "P", options=options, defines=defines)


def test_a_header_hiding_an_include_behind_a_nul_keys_it(tmp_path: Path) -> None:
    """`own.h` holding `#\\0include "deep.h"`: gcc includes `deep.h` (a warning), so the
    kernel's headers name it (before: `own.h` alone, an edit to `deep.h` served the old
    build)."""
    from warmcli import Kernel
    from warmcli.backends.host.compiler import HostCompiler
    from warmcli.kernel import key_components

    (tmp_path / "own.h").write_bytes(b'#\0include "deep.h"\n')
    (tmp_path / "deep.h").write_text("#define OWN 5\n")
    source = '#include "own.h"\nvoid f(long *o) { o[0] = OWN; }\n'
    kernel = Kernel(source, "f", "P", options=[f"-I{tmp_path}"])
    parts = key_components(kernel, "x86_64", HostCompiler().toolchain.identity)
    named = [name for name, _ in json.loads(parts["header_files"])]
    assert named == ["own.h", "deep.h"], parts
