"""Review of this stop's key changes for host kernels (review 45c): linker scripts and once-only
header copies.

Each case here was a wrong result a bundle could serve (the key stayed the same where what cc
builds changed), or a key that took a minute to compute:
- a linker script's quoted names, `SEARCH_DIR("/opt/lib")`, `INCLUDE "/opt/inner.ld"`,
  `INPUT("/opt/libdeep.a")` (as `ld --verbose` writes its own, and as a path with a space must
  be): the linker reads them, the key followed only unquoted ones;
- a linker script that `INCLUDE`s itself twice: each inclusion was followed again, 2^8 parses
  of up to 1 MiB each (a minute for one key), where ld itself stops at once;
- a chain of 9 linker scripts each `INCLUDE`ing the next, as deep as ld follows: the key
  followed 8;
- a source that `#import`s the second of two copies of one header: gcc skips it where the
  copies share their modification second, the key looked for `#import` in the headers only.
A kernel's `-x c --param max-unroll-times=4` (`-A system=linux`) was refused: the value after
`--param` taken for another source to compile (any word after `-x c` is one).
A precompiled header folder (`x.h.gch/`) the process may not list: keying raised.
And one of how a process a Ctrl-C stopped ends: a child forked by an exit handler run after
warm's, once a Ctrl-C cut warm's write-back short, sent its end's SIGINT to its parent.
Real files, the system C compiler, `ar` and `ld`; keys by `warmcli.kernel.kernel_key`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_trial45a as T45A
from conftest import Warm
from counted_calls import counted
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from host_keys import LINK_SOURCE, settle
from host_keys import archive as _archive
from host_keys import key as _key


def _linked_value(tmp_path: Path, options: tuple[str, ...]) -> str:
    """What `helper` returns in the library the real cc links with `options`."""
    made = tmp_path / "k.so"
    build = ["cc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(made), *options]
    subprocess.run(build, input=LINK_SOURCE, text=True, check=True, capture_output=True)
    probe = tmp_path / "probe.c"
    probe.write_text(
        "#include <dlfcn.h>\n#include <stdio.h>\nint main(int c, char **v) {\n"
        '  float (*h)(void) = (float (*)(void))dlsym(dlopen(v[1], RTLD_NOW), "helper");\n'
        '  printf("%g", h()); return 0; }\n'
    )
    subprocess.run(["cc", str(probe), "-o", str(tmp_path / "probe"), "-ldl"], check=True)
    return subprocess.run(
        [str(tmp_path / "probe"), str(made)], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("by", ["search_dir", "search_dir_space", "include", "input"])
def test_a_linker_scripts_quoted_names_are_keyed(tmp_path: Path, by: str) -> None:
    """`libX.a` in a `-L` folder is a linker script naming a folder, a script or an archive
    in double quotes: the real linker links the rebuilt `libdeep.a` there, the key stayed."""
    lib, other = tmp_path / "lib", tmp_path / ("other dir" if by == "search_dir_space" else "o")
    lib.mkdir()
    _archive(other, 1, "deep")
    (lib / "inner.ld").write_text(f'INPUT("{other / "libdeep.a"}")\n')
    script = {
        "search_dir": f'SEARCH_DIR("{other}")\nINPUT(-ldeep)\n',
        "search_dir_space": f'SEARCH_DIR("{other}")\nINPUT(-ldeep)\n',
        "include": f'INCLUDE "{lib / "inner.ld"}"\n',
        "input": f'INPUT("{other / "libdeep.a"}")\n',
    }[by]
    (lib / "libX.a").write_text(f"/* a linker script */\n{script}")
    _deep_rebuilt_is_keyed(tmp_path, lib, other)


def _deep_rebuilt_is_keyed(tmp_path: Path, lib: Path, other: Path) -> None:
    """`-L lib -lX` (`lib/libX.a` a linker script reaching `other/libdeep.a`, whose `helper`
    returns 1): cc links the rebuilt `libdeep.a`'s 2, and the key changes with it."""
    options = (f"-L{lib}", "-Wl,-u,helper", "-lX")
    before = _key(LINK_SOURCE, options)
    assert _linked_value(tmp_path, options) == "1"
    _archive(other, 2, "deep")
    assert _linked_value(tmp_path, options) == "2"  # what cc links changed
    assert _key(LINK_SOURCE, options) != before


def test_a_linker_script_including_itself_is_keyed_reading_it_once(tmp_path: Path) -> None:
    """A 1 MiB linker script saying `INCLUDE` of itself twice (ld: "nested too deeply"): each
    inclusion was followed again to depth 8 (511 parses, about a minute for one key). Counted,
    not timed (the parses of a short script as many as of a long one): each followed once."""
    lib = tmp_path / "lib"
    lib.mkdir()
    script = lib / "libX.a"
    script.write_text(f"INCLUDE {script}\n" * 2 + "SECTIONS { . = 0x1000; }\n" * 40)
    with counted() as calls:
        _key(LINK_SOURCE, (f"-L{lib}", "-lX"))
    assert calls["_script_inputs"] == 2, calls["_script_inputs"]  # (each inclusion: 345)


def test_a_source_importing_a_copy_keys_whether_the_copies_share_a_second(
    tmp_path: Path,
) -> None:
    """`#include "c.h"` (found in `a/`) then `#import <c.h>` (found in `b/`, the same text, no
    `#pragma once`): gcc skips `b/c.h` where both share their modification second, reads it
    where they differ (checked with the real cc's preprocessor); the key was the same."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "c.h").write_text("+1\n")
        os.utime(tmp_path / folder / "c.h", (1577836800, 1577836800))
    source = 'float v = 0\n#include "c.h"\n#import <c.h>\n;\nvoid f(float *x) { x[0] = v; }\n'
    options = (f"-iquote{tmp_path / 'a'}", f"-I{tmp_path / 'b'}")
    (tmp_path / "s.c").write_text(source)

    def expanded() -> str:
        cpp = ["cc", "-E", "-P", "-Wno-deprecated", *options, str(tmp_path / "s.c")]
        return " ".join(
            subprocess.run(cpp, capture_output=True, text=True, check=True).stdout.split()
        )

    alike, alike_key = expanded(), _key(source, options)
    os.utime(tmp_path / "b" / "c.h", (1577836805, 1577836805))
    assert expanded() != alike  # `b/c.h` read once more
    assert _key(source, options) != alike_key


def test_a_child_forked_after_a_ctrl_c_in_the_write_back_ends_by_sigint_itself(
    warm: Warm, tmp_path: Path
) -> None:
    """An exit handler registered before warm's import (run after warm's) forks; the child
    ends as its parent would. A Ctrl-C stopped the parent's write-back (in its lock's wait):
    the child's teardown sent SIGINT to the parent's pid, taken when the stop was noted, so the
    parent's wait for the child was cut ("Exception ignored in atexit callback") and the child
    itself ended with 0, where CPython ends a process by SIGINT with its own pid."""
    (tmp_path / "wl.py").write_text(T45A.WORKLOAD)
    made = warm("run", tmp_path / "wl.py", "--bundle", tmp_path / "b.warm", "-q", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    warmed = tmp_path / "b.warm"
    code = (
        "import atexit, os\n"
        "def forks():\n"
        "    child = os.fork()\n"
        "    if child:\n"
        "        print('child ended', os.waitpid(child, 0)[1], flush=True)\n"
        "atexit.register(forks)\n"
        f"{T45A.SETUP}; from warmcli import Kernel; x = rt.upload(np.ones(8, np.float32))\n"
        "rt.launch(Kernel('void neg(float *x){x[0]=-x[0];}', 'neg', 'P'), x)\n"
        "print('ending', flush=True)\n"
    )
    session, out, err = T45A.ctrl_c_in_write_back(warm, tmp_path, warmed, code)
    assert session.returncode == -signal.SIGINT, err
    assert f"child ended {signal.SIGINT}\n" in out, out + err  # by SIGINT (status 2), itself
    assert "Exception ignored" not in err, err


@pytest.mark.parametrize("valued", [("--param", "max-unroll-times=4"), ("-A", "system=linux")])
def test_an_options_value_after_x_c_is_no_other_source(
    warm: Warm, tmp_path: Path, valued: tuple[str, str]
) -> None:
    """`-x c --param max-unroll-times=4` (cc compiles it, the value is no file): since `-x c`
    made any later word a source to refuse, the value of an option cc reads in the next word
    (`--param`, `-A`) was refused as "another source" and the kernel never built."""
    script = tmp_path / "w.py"
    options = ("-x", "c", *valued)
    script.write_text(
        "import warmcli\nfrom warmcli import Kernel\nDEVICE = 'host'\n"
        f"K = Kernel('void f(float *x) {{ x[0] = 2.0f; }}', 'f', 'P', options={options!r})\n"
        "def workload(rt):\n    rt.launch(K, rt.buffer(1, 'float32'))\n"
    )
    made = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert made.returncode == 0, made.stdout + made.stderr


def test_an_unreadable_precompiled_header_folder_keys_as_none(tmp_path: Path) -> None:
    """`inc/x.h.gch` a folder the process may not list (mode 000; root made to lack the
    capabilities that pass it): gcc opens it, fails and reads `x.h`; `precompiled` listed it
    unguarded, so keying the kernel raised PermissionError (a traceback in a production
    process) where a key never raises for a file it cannot read."""
    (tmp_path / "inc" / "x.h.gch").mkdir(parents=True)
    (tmp_path / "inc" / "x.h").write_text("#define VAL 1\n")
    (tmp_path / "inc" / "x.h.gch").chmod(0)
    unprivileged = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    if os.geteuid() == 0 and subprocess.run([*unprivileged, "true"]).returncode != 0:
        pytest.skip("root, and setpriv cannot drop the capabilities that read any folder")
    code = (
        "from warmcli.kernel import Kernel, kernel_key\n"
        "k = Kernel('#include \"x.h\"\\nvoid f(float *x) { x[0] = VAL; }\\n', 'f', 'P', "
        f"options=('-I{tmp_path / 'inc'}',))\n"
        "print(len(kernel_key(k, 'x86_64', 'cc:test')))\n"
    )
    keyed = subprocess.run(
        [*(unprivileged if os.geteuid() == 0 else []), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
        timeout=60,
    )
    (tmp_path / "inc" / "x.h.gch").chmod(0o755)  # (for pytest's clean-up)
    assert keyed.returncode == 0 and keyed.stdout == "64\n", keyed.stderr[-500:]


def test_a_linker_script_chain_as_deep_as_ld_follows_is_keyed(tmp_path: Path) -> None:
    """`libX.a`, a linker script, INCLUDEs s2.ld, which INCLUDEs s3.ld, ... s10.ld, whose
    `INPUT` links `libdeep.a`: ld follows 9 nested INCLUDEs (10 files on its include stack; one
    more: "includes nested too deeply"), the key followed 8 and so missed a rebuilt libdeep.a."""
    lib, other = tmp_path / "lib", tmp_path / "o"
    lib.mkdir()
    _archive(other, 1, "deep")
    for at in range(1, 10):
        (lib / f"s{at}.ld").write_text(f"INCLUDE {lib / f's{at + 1}.ld'}\n")
    (lib / "s10.ld").write_text(f"INPUT({other / 'libdeep.a'})\n")
    (lib / "libX.a").write_text((lib / "s1.ld").read_text())
    _deep_rebuilt_is_keyed(tmp_path, lib, other)


def test_keying_again_rereads_no_header_for_copies(tmp_path: Path) -> None:
    """Two copies of a `#pragma once` header among 40 headers of 256 KiB: each key of the kernel
    read the first 4 MiB of every header reached again (looking for `import`), 10 MiB per key in
    a process keying it once more, where the headers' own digests are memoised (measured by the
    bytes this process reads, `/proc/self/io`'s rchar)."""
    names = [f"h{at}.h" for at in range(40)]
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "c.h").write_text("#pragma once\n#define C 1\n")
    for name in names:
        (tmp_path / "a" / name).write_text(f"int {name[:-2]};\n" + "// filler line\n" * 17476)
    for file in [*(tmp_path / "a").iterdir(), tmp_path / "b" / "c.h"]:
        os.utime(file, (1577836800, 1577836800))  # settled: memoised
    settle(*(tmp_path / "a").iterdir(), tmp_path / "b" / "c.h")  # (their ctimes too)
    source = "".join(f'#include "{n}"\n' for n in names) + '#include "c.h"\n#include <c.h>\n'
    options = (f"-iquote{tmp_path / 'a'}", f"-I{tmp_path / 'b'}")
    first = _key(source + "void f(float *x) { x[0] = C; }\n", options)

    def read_so_far() -> int:
        io = Path("/proc/self/io").read_text()
        return int(next(line for line in io.splitlines() if line.startswith("rchar:")).split()[1])

    before = read_so_far()
    assert _key(source + "void f(float *x) { x[0] = C; }\n", options) == first
    assert read_so_far() - before < 1 << 20
