"""The options cc hands on to another tool, as each of warm's three readers reads them (fold 46).

`-Wl,a,b` and `-Xlinker a` hand the linker an option, `-Wp,`/`-Xpreprocessor` the
preprocessor, `-Wa,`/`-Xassembler` the assembler. Three readers read them: the linker's words
(`warmcli.linked.linker_words`, for the linked digest), the preprocessor's options
(`warmcli.computed_includes._as_preprocessor_reads`, for a computed include's macro values) and
the first option reading a file no key covers (`warmcli.backends.host.refused.unkeyed_option`).
`TABLE` holds what each returned for many spellings before the three were folded into one
reader (`warmcli.handed_on`): the fold changes no output. Pure-logic unit tests: no fakes, no
compiler run; but one bug the table found, with the real CLI and the system C compiler:
`unkeyed_option` took an `-X` flag handed on by another (`-Xlinker -Xlinker -specs=f`: cc hands
the linker `-Xlinker` and reads the specs file `f` itself) for one handing the next option on,
so a specs file, an include prefix or a folder of compiler programs (`-B dir/`) read so was
never refused: an edit there was served the old build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from host_keys import LINK_SOURCE, workload

from warmcli.backends.host.refused import unkeyed_option
from warmcli.computed_includes import _as_preprocessor_reads
from warmcli.linked import linker_words

# (options, the linker's words, the preprocessor's options, the option refused or None)
Row = tuple[list[str], list[str], list[str], str | None]
TABLE: list[Row] = [
    ([], [], [], None),
    (
        ["-O2", "-DX=1", "/opt/lib/a.o"],
        ["-O2", "-DX=1", "/opt/lib/a.o"],
        ["-O2", "-DX=1", "/opt/lib/a.o"],
        None,
    ),
    (["-Wl,-L/opt/lib,-lhelper"], ["-L/opt/lib", "-lhelper"], ["-Wl,-L/opt/lib,-lhelper"], None),
    (["-Wl,"], [""], ["-Wl,"], None),
    (["-Wl"], ["-Wl"], ["-Wl"], None),
    (["-Wl,a,,b"], ["a", "", "b"], ["-Wl,a,,b"], None),
    (
        ["-Xlinker", "-L", "-Xlinker", "/opt/lib"],
        ["-L", "/opt/lib"],
        ["-Xlinker", "-L", "-Xlinker", "/opt/lib"],
        None,
    ),
    (
        ["-Xlinker", "-L", "-Xlinker", "=/lib"],
        ["-L", "=/lib"],
        ["-Xlinker", "-L", "-Xlinker", "=/lib"],
        "=/lib",
    ),
    (["-Xlinker", "-L", "=/lib"], ["-L", "=/lib"], ["-Xlinker", "-L", "=/lib"], "=/lib"),
    (["-Xlinker"], [], ["-Xlinker"], None),
    (["-Xlinker", "-Xlinker"], ["-Xlinker"], ["-Xlinker", "-Xlinker"], None),
    (
        ["-Xlinker", "-Xlinker", "-Xlinker", "a,@b"],
        ["-Xlinker", "a,@b"],
        ["-Xlinker", "-Xlinker", "-Xlinker", "a,@b"],
        "a,@b",
    ),
    (["-Xlinker", "a,b"], ["a,b"], ["-Xlinker", "a,b"], None),
    (["-Xlinker", "@file"], ["@file"], ["-Xlinker", "@file"], "@file"),
    (["-Xlinker", "-Wl,-L/x"], ["-Wl,-L/x"], ["-Xlinker", "-Wl,-L/x"], None),
    (["-Xlinker", "-Wp,-DX"], ["-Wp,-DX"], ["-Xlinker", "-DX"], None),
    (["-Xlinker", "-DY", "-DX"], ["-DY", "-DX"], ["-Xlinker", "-DY", "-DX"], None),
    (["-Xlinker", "--sysroot=/r"], ["--sysroot=/r"], ["-Xlinker", "--sysroot=/r"], "--sysroot=/r"),
    (
        ["-Xlinker", "--library-path", "-Xlinker", "/opt"],
        ["-L", "/opt"],
        ["-Xlinker", "--library-path", "-Xlinker", "/opt"],
        None,
    ),
    (
        ["-Xlinker", "-Bstatic", "-Bstatic", "-Wl,-Bdynamic"],
        ["-Bstatic", "-Bdynamic"],
        ["-Xlinker", "-Bstatic", "-Bstatic", "-Wl,-Bdynamic"],
        "-Bstatic",  # cc's own second one: a `-B` prefix, refused since toolid46
    ),
    (["-Xlinker", "-Xpreprocessor", "-DX"], ["-Xpreprocessor", "-DX"], ["-Xlinker", "-DX"], None),
    (
        ["-Xlinker", "-Xassembler", "@f"],
        ["-Xassembler", "@f"],
        ["-Xlinker", "-Xassembler", "@f"],
        "@f",
    ),
    (["-Wl,@file"], ["@file"], ["-Wl,@file"], "-Wl,@file"),
    (["@file"], ["@file"], ["@file"], "@file"),
    (
        ["-Wl,--library-path=/opt", "-Wl,--library=foo", "--library=bar"],
        ["-L/opt", "-lfoo", "-lbar"],
        ["-Wl,--library-path=/opt", "-Wl,--library=foo", "--library=bar"],
        None,
    ),
    (
        ["-Wl,--library-path", "-Wl,/opt", "--library-path=/p"],
        ["-L", "/opt", "-L/p"],
        ["-Wl,--library-path", "-Wl,/opt", "--library-path=/p"],
        None,
    ),
    (
        ["-Bstatic", "-dn", "-static", "-Bdynamic", "-call_shared"],
        ["-static"],
        ["-Bstatic", "-dn", "-static", "-Bdynamic", "-call_shared"],
        "-Bstatic",  # a `-B` prefix to cc: refused since toolid46
    ),
    (["-L", "=/lib"], ["-L", "=/lib"], ["-L", "=/lib"], "=/lib"),
    (["-L=/lib"], ["-L=/lib"], ["-L=/lib"], "-L=/lib"),
    (["-L$SYSROOT/lib"], ["-L$SYSROOT/lib"], ["-L$SYSROOT/lib"], "-L$SYSROOT/lib"),
    (["-Wl,-L,=/lib"], ["-L", "=/lib"], ["-Wl,-L,=/lib"], "-Wl,-L,=/lib"),
    (["-Wl,-L", "-Wl,=/lib"], ["-L", "=/lib"], ["-Wl,-L", "-Wl,=/lib"], "-Wl,=/lib"),
    (["-Wl,--sysroot=/r"], ["--sysroot=/r"], ["-Wl,--sysroot=/r"], "-Wl,--sysroot=/r"),
    (["-L", "-Wp,x", "=/lib"], ["-L", "-Wp,x", "=/lib"], ["-L", "x", "=/lib"], None),
    (["-L", "-Wa,x", "=/lib"], ["-L", "-Wa,x", "=/lib"], ["-L", "-Wa,x", "=/lib"], None),
    (['-Wp,-DCFG="b.h",-DX'], ['-Wp,-DCFG="b.h",-DX'], ['-DCFG="b.h"', "-DX"], None),
    (["-Wp,-DA,B"], ["-Wp,-DA,B"], ["-DA", "B"], None),
    (["-Wp,"], ["-Wp,"], [""], None),
    (["-Wp,-I,/opt/inc"], ["-Wp,-I,/opt/inc"], ["-I", "/opt/inc"], "-Wp,-I,/opt/inc"),
    (["-Wp,-MD,deps.d"], ["-Wp,-MD,deps.d"], ["-MD", "deps.d"], None),
    (["-Xpreprocessor", '-DCFG="b.h"'], ["-Xpreprocessor", '-DCFG="b.h"'], ['-DCFG="b.h"'], None),
    (["-Xpreprocessor", "-DA,B"], ["-Xpreprocessor", "-DA,B"], ["-DA,B"], None),
    (
        ["-Xpreprocessor", "-I", "-Xpreprocessor", "/opt"],
        ["-Xpreprocessor", "-I", "-Xpreprocessor", "/opt"],
        ["-I", "/opt"],
        "-I",
    ),
    (
        ["-Xpreprocessor", "-idirafter", "/x"],
        ["-Xpreprocessor", "-idirafter", "/x"],
        ["-idirafter", "/x"],
        "-idirafter",
    ),
    (["-Xpreprocessor", "-Wl,-L/opt"], ["-Xpreprocessor", "-L/opt"], ["-Wl,-L/opt"], None),
    (["-Xpreprocessor", "-Wp,-DA,B"], ["-Xpreprocessor", "-Wp,-DA,B"], ["-Wp,-DA,B"], None),
    (
        ["-Xpreprocessor", "-Xpreprocessor", "-DX"],
        ["-Xpreprocessor", "-Xpreprocessor", "-DX"],
        ["-Xpreprocessor", "-DX"],
        None,
    ),
    (
        ["-Xpreprocessor", "-Xpreprocessor", "-Xpreprocessor", "-DX"],
        ["-Xpreprocessor", "-Xpreprocessor", "-Xpreprocessor", "-DX"],
        ["-Xpreprocessor", "-DX"],
        None,
    ),
    (["-Xpreprocessor"], ["-Xpreprocessor"], [], None),
    (
        ["-Xpreprocessor", "-Xlinker", "-L/x"],
        ["-Xpreprocessor", "-L/x"],
        ["-Xlinker", "-L/x"],
        None,
    ),
    (["-Xpreprocessor", "@f"], ["-Xpreprocessor", "@f"], ["@f"], "@f"),
    (["-Xpreprocessor", "-L", "=/lib"], ["-Xpreprocessor", "-L", "=/lib"], ["-L", "=/lib"], None),
    (["-Wa,@file"], ["-Wa,@file"], ["-Wa,@file"], "-Wa,@file"),
    (["-Wa,-I,/x"], ["-Wa,-I,/x"], ["-Wa,-I,/x"], None),
    (["-Wa,--sysroot=/x"], ["-Wa,--sysroot=/x"], ["-Wa,--sysroot=/x"], "-Wa,--sysroot=/x"),
    (["-Wa,"], ["-Wa,"], ["-Wa,"], None),
    (["-Xassembler", "@file"], ["-Xassembler", "@file"], ["-Xassembler", "@file"], "@file"),
    (
        ["-Xassembler", "-Xassembler"],
        ["-Xassembler", "-Xassembler"],
        ["-Xassembler", "-Xassembler"],
        None,
    ),
    (
        ["-Xassembler", "-L", "-Xlinker", "=/lib"],
        ["-Xassembler", "-L", "=/lib"],
        ["-Xassembler", "-L", "-Xlinker", "=/lib"],
        None,
    ),
    (["-Xassembler", "-Wl,@f"], ["-Xassembler", "@f"], ["-Xassembler", "-Wl,@f"], "-Wl,@f"),
    (
        ["-iprefix", "/x", "-specs=/f", "-B/opt/bin/", "-I-"],
        ["-iprefix", "/x", "-specs=/f", "-B/opt/bin/", "-I-"],
        ["-iprefix", "/x", "-specs=/f", "-B/opt/bin/", "-I-"],
        "-iprefix",
    ),
    (
        ["-DX", "-Xlinker", "-DY", "-Wp,-UZ", "-Xpreprocessor", "-DW"],
        ["-DX", "-DY", "-Wp,-UZ", "-Xpreprocessor", "-DW"],
        ["-DX", "-Xlinker", "-DY", "-UZ", "-DW"],
        None,
    ),
    (
        ["-I", "/inc", "-include", "h.h", "-Wl,-T,/s.ld", "-Wl,-Map=out.map"],
        ["-I", "/inc", "-include", "h.h", "-T", "/s.ld", "-Map=out.map"],
        ["-I", "/inc", "-include", "h.h", "-Wl,-T,/s.ld", "-Wl,-Map=out.map"],
        None,
    ),
    (
        ["-Wl,-rpath,/opt", "-Xlinker", "-rpath", "-Xlinker", "/opt"],
        ["-rpath", "/opt", "-rpath", "/opt"],
        ["-Wl,-rpath,/opt", "-Xlinker", "-rpath", "-Xlinker", "/opt"],
        None,
    ),
    # an `-X` flag handed on by another hands nothing on: the option after it is cc's own
    (
        ["-Xlinker", "-Xlinker", "-specs=/f"],
        ["-Xlinker", "-specs=/f"],
        ["-Xlinker", "-Xlinker", "-specs=/f"],
        "-specs=/f",
    ),
    (
        ["-Xpreprocessor", "-Xlinker", "-specs=/f"],
        ["-Xpreprocessor", "-specs=/f"],
        ["-Xlinker", "-specs=/f"],
        "-specs=/f",
    ),
    (
        ["-Xlinker", "-Xlinker", "-B/opt/bin/"],
        ["-Xlinker", "-B/opt/bin/"],
        ["-Xlinker", "-Xlinker", "-B/opt/bin/"],
        "-B/opt/bin/",
    ),
    (
        ["-Xassembler", "-Xassembler", "-iprefix", "/x"],
        ["-Xassembler", "-Xassembler", "-iprefix", "/x"],
        ["-Xassembler", "-Xassembler", "-iprefix", "/x"],
        "-iprefix",
    ),
    (
        ["-Xlinker", "-Xlinker", "a,@b"],
        ["-Xlinker", "a,@b"],
        ["-Xlinker", "-Xlinker", "a,@b"],
        None,
    ),
]


@pytest.mark.parametrize(
    ("options", "words", "read", "refused"), TABLE, ids=[" ".join(r[0]) or "-" for r in TABLE]
)
def test_each_reader_reads_each_spelling_as_before(
    options: list[str], words: list[str], read: list[str], refused: str | None
) -> None:
    assert list(linker_words(tuple(options))) == words  # (kept per options: a tuple)
    assert _as_preprocessor_reads(options) == read
    assert unkeyed_option(options) == refused


def test_a_specs_file_after_a_flag_handed_on_is_refused(warm: Warm, tmp_path: Path) -> None:
    """`-Xlinker -Xlinker -specs=FILE`: cc reads FILE's specs (which may add any option), the
    key does not; refused before cc runs, in one line, nothing stored."""
    specs = tmp_path / "s.specs"
    specs.write_text("*cc1_options:\n+ -DVAL=2\n\n")
    script = tmp_path / "w.py"
    script.write_text(workload(LINK_SOURCE, ("-Xlinker", "-Xlinker", f"-specs={specs}")))
    run = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "reads a file" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
