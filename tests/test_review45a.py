"""Review of what a host kernel's key covers of what its build reads (review 45a).

Each case here was a wrong result served from a bundle: the C compiler or its linker read a
file that an edit changed, and the kernel's key stayed the same (a production process under
`WARM_STRICT=1` printed the old value where a cold one printed the new):
- `-L A` with `A/libm.a`: warm links `-lm` after the kernel's source, searched in `A` first,
  and the key looked for the libraries cc links unasked (`libc`, `libgcc`) but not warm's own;
- `-Xlinker -L -Xlinker A`, `-Xlinker -l -Xlinker X`: a folder or library handed the linker in
  two `-Xlinker` options was never searched by the key;
- `-Bstatic` given cc itself (a `-B` prefix to gcc, no linker flag): the key took the archive
  a static link would, the linker linked the shared library (or the script) it found first;
- a linker script among the linked files saying `INCLUDE inner.ld` or `SEARCH_DIR(/other)`:
  what the included script links, and the libraries found in the folder it adds;
- a precompiled header `val.h.gch` beside the `val.h` a source includes first: gcc reads the
  `.gch`, the key only `val.h`;
- two copies of one `#pragma once` header: gcc reads the second only where its modification
  second differs from the first's, the key held their content alone (false sharing).
Others make cc read a file no key can follow; they are refused before cc runs, in one line:
`-Wa,@file` (the assembler's options from a file), `-Xpreprocessor -idirafter -Xpreprocessor
dir` (an include folder past the key), `-x c /opt/helper.txt` (another source, read as C
whatever its name), `-I-` (quoted names no longer searched in the including header's
folder), `-L=/opt/lib` and `-Wl,--sysroot=...` (folders in the linker's system root),
`-iplugindir=dir` (where `-fplugin=name` loads a compiler plugin from, its code unkeyed).
Real CLI, real SQLite bundles, the system C compiler and `ar`; no fakes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from host_keys import HEADER_SOURCE, LINK_SOURCE, workload
from host_keys import archive as _archive
from host_keys import key as _key
from host_keys import served_and_cold as _served_and_cold


def test_a_libm_in_a_library_folder_is_keyed_end_to_end(warm: Warm, tmp_path: Path) -> None:
    """`-L A`, `A/libm.a` defining `helper`: the kernel's `helper` comes from it (warm's own
    `-lm`); a rebuilt one was served the old build. Now a miss, refused under strict."""
    lib = tmp_path / "A"
    _archive(lib, 1, "m")
    script = tmp_path / "w.py"
    script.write_text(workload(LINK_SOURCE, (f"-L{lib}",)))
    made = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    _archive(lib, 2, "m")
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "2.0", cold
    assert served != "1.0", "the old build served for a rebuilt libm.a"
    assert "strict mode" in served, served


@pytest.mark.parametrize(
    "spelling",
    [
        "-Xlinker|-L|-Xlinker|{lib}|-Wl,-u,helper|-lX",
        "-L{lib}|-Wl,-u,helper|-Xlinker|-l|-Xlinker|X",
        "-Xlinker|--library-path|-Xlinker|{lib}|-Wl,-u,helper|-lX",
        "-L{lib}",  # libm.a there: warm's own `-lm`
    ],
)
def test_a_library_handed_the_linker_keys_its_content(tmp_path: Path, spelling: str) -> None:
    """Key logic with real files: the archive the linker links changes the key."""
    lib = tmp_path / "lib"
    name = "m" if spelling == "-L{lib}" else "X"
    _archive(lib, 1, name)
    options = tuple(spelling.format(lib=lib).split("|"))
    before = _key(LINK_SOURCE, options)
    _archive(lib, 2, name)
    assert _key(LINK_SOURCE, options) != before, options


def test_bstatic_given_cc_itself_is_no_linker_flag(tmp_path: Path) -> None:
    """`-Bstatic` given cc itself (not `-Wl,-Bstatic`) is a `-B` prefix, `static`: the linker
    stays dynamic and links `A/libX.so` (here a linker script naming `A/libreal.a`), not the
    `B/libX.a` the key covered, so a rebuilt `libreal.a` was served the old build."""
    a, b = tmp_path / "A", tmp_path / "B"
    _archive(b, 1)
    _archive(a, 2, "real")
    (a / "libX.so").write_text(f"INPUT({a / 'libreal.a'})\n")
    options = (f"-L{a}", f"-L{b}", "-Bstatic", "-Wl,-u,helper", "-lX")
    before = _key(LINK_SOURCE, options)
    _archive(a, 3, "real")
    assert _key(LINK_SOURCE, options) != before


@pytest.mark.parametrize("by", ["include", "search_dir", "search_dir_later"])
def test_a_linker_script_keys_what_it_includes_and_searches(tmp_path: Path, by: str) -> None:
    """`libX.a` in a `-L` folder that is a linker script saying `INCLUDE inner.ld` (whose
    `INPUT(...)` links `libreal.a`), or `SEARCH_DIR(/other)` before `INPUT(-ldeep)` (or before
    a later `-ldeep`): the linker links what those name; no key covered it, so a rebuilt one
    was served the old build (checked with the real cc)."""
    lib, other = tmp_path / "lib", tmp_path / "other"
    _archive(lib, 1, "real")
    _archive(other, 1, "deep")
    later = ("-Wl,-u,helper", "-ldeep") if by == "search_dir_later" else ()
    script = {
        "include": f"INCLUDE {lib / 'inner.ld'}\n",
        "search_dir": f"SEARCH_DIR({other})\nINPUT(-ldeep)\n",
        "search_dir_later": f"SEARCH_DIR({other})\n",
    }[by]
    (lib / "inner.ld").write_text(f"INPUT({lib / 'libreal.a'})\n")
    (lib / "libX.a").write_text(f"/* a linker script */\n{script}")
    options = (f"-L{lib}", "-Wl,-u,helper", "-lX", *later)
    before = _key(LINK_SOURCE, options)
    _archive(lib if by == "include" else other, 2, "real" if by == "include" else "deep")
    assert _key(LINK_SOURCE, options) != before


def _precompile(tmp_path: Path, value: int, gch: Path) -> None:
    """`gch`, a precompiled `val.h` defining VAL as `value`."""
    (tmp_path / "other").mkdir(exist_ok=True)
    (tmp_path / "other" / "val.h").write_text(f"#define VAL {value}\n")
    made = [str(tmp_path / "other" / "val.h"), "-o", str(gch)]
    subprocess.run(["cc", "-O2", "-fPIC", "-x", "c-header", *made], check=True)


def test_a_precompiled_header_is_keyed_end_to_end(warm: Warm, tmp_path: Path) -> None:
    """`inc/val.h.gch` beside `inc/val.h`: warm's cc read the `.gch` for the source's first
    `#include "val.h"` (its VAL, not `val.h`'s), and a rebuilt one was served the old build.
    Since warm 46 cc reads the header warm gives it first (`__BASE_FILE__`'s, `-include`), so
    gcc takes no precompiled header: a cold start reads `val.h` itself; the `.gch` is still
    keyed, so a rebuilt one is a miss (strict mode), never the old build served."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    _precompile(tmp_path, 2, tmp_path / "inc" / "val.h.gch")
    script = tmp_path / "w.py"
    script.write_text(workload(HEADER_SOURCE, (f"-I{tmp_path / 'inc'}",)))
    made = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    _precompile(tmp_path, 3, tmp_path / "inc" / "val.h.gch")
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "1.0", cold  # val.h's: gcc takes no .gch after an -include
    assert "strict mode" in served, served


def test_a_precompiled_header_beside_the_first_include_is_keyed(tmp_path: Path) -> None:
    """Key logic with real files: a `.gch` beside the header, in a folder searched before it
    (`-I a -I inc`, `a/val.h.gch` alone), or a folder of them, keys the kernel."""
    inc, first = tmp_path / "inc", tmp_path / "a"
    inc.mkdir()
    first.mkdir()
    (inc / "val.h").write_text("#define VAL 1\n")

    (first / "val.h.gch").mkdir()
    for gch, options in [
        (inc / "val.h.gch", (f"-I{inc}",)),
        (first / "val.h.gch" / "one.gch", (f"-I{first}", f"-I{inc}")),
    ]:
        before = _key(HEADER_SOURCE, options)
        _precompile(tmp_path, 2, gch)
        with_pch = _key(HEADER_SOURCE, options)
        assert with_pch != before, options
        _precompile(tmp_path, 3, gch)
        assert _key(HEADER_SOURCE, options) != with_pch, options


ONCE = "#pragma once\n#ifdef N\n#undef N\n#define N 2\n#else\n#define N 1\n#endif\n"
ONCE_SOURCE = '#include "x/h.h"\n#include "y/h.h"\nvoid f(float *x) { x[0] = N; }\n'


def test_copies_of_a_pragma_once_header_key_whether_their_times_match(
    warm: Warm, tmp_path: Path
) -> None:
    """`x/h.h` and `y/h.h`, one `#pragma once` text: gcc reads the second only where its
    modification second differs from the first's (N 2, else N 1). The key held their content
    alone, so a bundle warmed with the copies' times alike served N 1 where a cold build of
    copies touched apart computed N 2. End to end: warm run, then a served WARM_STRICT=1
    process against a cold one."""
    for copy in ("x", "y"):
        (tmp_path / copy).mkdir()
        (tmp_path / copy / "h.h").write_text(ONCE)
        os.utime(tmp_path / copy / "h.h", (1_000_000_000, 1_000_000_000))
    script = tmp_path / "w.py"
    script.write_text(workload(ONCE_SOURCE, (f"-I{tmp_path}",)))
    made = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    os.utime(tmp_path / "y" / "h.h", (2_000_000_000, 2_000_000_000))
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "2.0", cold
    assert served != "1.0", "a build of copies read once served where gcc reads both"
    assert "strict mode" in served, served
    # copies without a mark gcc reads once are read twice whatever their times: as before
    plain = ONCE.replace("#pragma once\n", "")
    for copy in ("x", "y"):
        (tmp_path / copy / "h.h").write_text(plain)
    options = (f"-I{tmp_path}",)
    before = _key(ONCE_SOURCE, options)
    os.utime(tmp_path / "y" / "h.h", (1_000_000_000, 1_000_000_000))
    assert _key(ONCE_SOURCE, options) == before


@pytest.mark.parametrize(
    ("spelling", "said"),
    [
        ("-Wa,@{d}/as.opt", "reads a file"),
        ("-Xpreprocessor|-idirafter|-Xpreprocessor|{d}", "reads a file"),
        ("-x|c|{d}/helper.txt|-x|none", "is a source cc would compile"),
        ("-I{d}|-I-|-I{d}", "reads a file"),
        ("-L={d}|-lX", "reads a file"),
        ("-Wl,-L,={d}|-lX", "reads a file"),
        ("-Wl,--sysroot={d}|-lX", "reads a file"),
        ("-iplugindir={d}|-fplugin=counter", "reads a file"),  # {d}/counter.so: compiler code
    ],
)
def test_an_option_no_key_can_follow_is_refused(
    warm: Warm, tmp_path: Path, spelling: str, said: str
) -> None:
    """Each made cc read a file its key did not follow (an edit there was served the old
    build: `-Wa,@file`'s `--defsym`, a header of `-idirafter`, `helper.txt`'s `#include`);
    refused before cc runs, in one line, nothing stored."""
    (tmp_path / "as.opt").write_text("--defsym VALSYM=5\n")
    (tmp_path / "helper.txt").write_text("float helper(void) { return 1.0f; }\n")
    options = tuple(spelling.format(d=tmp_path).split("|"))
    script = tmp_path / "w.py"
    script.write_text(workload(LINK_SOURCE, options))
    run = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert said in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
