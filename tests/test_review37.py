"""Review of the 37th stop's merges: what they missed, each shown with real parts (the
workloads' `warm run` and drivers forks of processes that imported warm once, `test_diff37`'s
`trial`: what each computes is tested, not how a process starts).

Found here: a C kernel that puts a function pointer in `.init_array` from a function's body
(`static void (*p)(void) __attribute__((section(".init_array"), used)) = seed;`) is code the
loader runs as much as a constructor is, but `_LOAD_TIME` knew only the words `constructor`,
`destructor` and `ifunc`: it shared a unit, so a hit ran `seed` when a neighbour loaded and
its neighbours' `rand()` differed from a cold start's.

A macro used at file scope whose text could declare something keeps a C kernel alone, but
only where it was used by its own name outside braces: one reached through another macro of
the source (`#define Y static int counter;` `#define X Y` `X`; `#define X DECL` with
`-DDECL=static int counter;`, the option-macro rule 9e85071 added) or used inside a
file-scope struct's braces (`struct s { DECLF };`, its text closing the struct) shared a unit,
and the unit's kernels shared one `counter`: a hit computed 1, 12, 23 where a cold start
computed 1, 11, 21.

The C rules of recipe 4 read the kernel's own options only: a C compiler that is a wrapper
script adding `-include state.h` (`static int counter;`) or `-DDECL=static int counter;`
(`WARM_CC=wrap.sh`, `exec cc -include ... "$@"`) let such kernels share a unit, and one
`counter`, as the options rule was written to prevent.

A paste was refused where a piece of `_Pragma`, `__func__` (or now `section`) showed, two
pieces at most: three (`CAT3(_, Prag, ma)`, `CAT3(se, ct, ion)`) or pieces from a define's
value formed the word all the same; now a word that the source's, defines' and options'
tokens can spell when pasted is refused however many pieces it takes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_diff37 import (
    CONSTRUCTOR,
    Trial,
    pythons,  # noqa: F401  (the fixture `trial` takes)
    same,
    served_everything,
    trial,  # noqa: F401  (the fixture: a Trial whose commands and drivers are forked)
)

from warmcli.backends.sharing import shares_unit
from warmcli.kernel import Kernel

_SEED = "static void seed(void) { srand(12345); }\n"
# test_diff37's constructor workload, its seeding kernel putting `seed` in `.init_array`.
INIT_ARRAY = CONSTRUCTOR.replace(
    '    "__attribute__((constructor)) static void seed(void) { srand(12345); }\\n"\n'
    '    "void b(int *o) { o[0] = rand() % 1000; }", "b", "P")',
    '    "static void seed(void) { srand(12345); }\\n"\n'
    '    "void b(int *o) {\\n"\n'
    '    "  static void (*p)(void) __attribute__((section(\\".init_array\\"), used)) = seed;\\n"\n'
    '    "  o[0] = rand() % 1000;\\n"\n'
    '    "}\\n", "b", "P")',
)
assert INIT_ARRAY != CONSTRUCTOR


def test_a_kernel_that_fills_init_array_from_its_body_is_served_as_cold(
    tmp_path: Path,
    trial: Callable[..., Trial],  # noqa: F811
) -> None:
    """Warmed with `-j 1` (one unit for all that share), then served: `a0..a2` read an
    unseeded `rand()` cold; in a shared binary `seed` ran as it loaded, before them."""
    one = trial(tmp_path / "w", INIT_ARRAY)
    cold = one.cold()
    one.warmed("-j", "1")
    hot, report = one.served()
    served_everything(report)
    same(cold, hot)


@pytest.mark.parametrize(
    "body",
    [
        '__attribute__((section(".init_array"), used))',
        '__attribute__((__section__(".init" "_array"), used))',
        '__attribute__((section(".ctors"), used))',
        '__attribute__((used, section(".fini_array")))',
        '[[gnu::section(".init_array"), gnu::used]]',
    ],
)
def test_code_the_loader_runs_from_a_section_is_built_alone(body: str) -> None:
    source = f"{_SEED}void b(int *o) {{ static void (*p)(void) {body} = seed; o[0] = rand(); }}\n"
    assert not shares_unit(Kernel(source, "b", "P"))


def test_a_section_an_option_macro_names_is_built_alone() -> None:
    """`-DS=__attribute__((section(".init_array"), used))`, used in a function's body."""
    source = f"{_SEED}void b(int *o) {{ static void (*p)(void) S = seed; o[0] = rand(); }}\n"
    option = '-DS=__attribute__((section(".init_array"), used))'
    assert not shares_unit(Kernel(source, "b", "P", options=[option]))
    assert shares_unit(
        Kernel(_USE.replace("++counter", "1"), "k", "P", options=["-ffunction-sections"])
    )


def test_a_section_named_by_a_paste_is_built_alone() -> None:
    source = (
        f"#define CAT(a, b) a##b\n{_SEED}void b(int *o) {{ static void (*p)(void) "
        '__attribute__((CAT(sec, tion)(".init_array"), used)) = seed; o[0] = rand(); }\n'
    )
    assert not shares_unit(Kernel(source, "b", "P"))


STATE = r"""
from warmcli import Kernel
DEVICE = "host"
NESTED = ("#define Y static int counter;\n#define X Y\nX\n"
          "void k(int *o) { o[0] = ++counter + 10 * ID; }\n")
KS = [Kernel(NESTED, "k", "P", defines={"ID": i}) for i in range(3)]
BY_OPTION = "#define X DECL\nX\nvoid q(int *o) { o[0] = ++counter + 10 * ID; }\n"
QS = [Kernel(BY_OPTION, "q", "P", defines={"ID": i}, options=["-DDECL=static int counter;"])
      for i in range(3)]
IN_STRUCT = "struct s { DECLF };\nvoid r(int *o) { o[0] = ++counter + 10 * ID; }\n"
RS = [Kernel(IN_STRUCT, "r", "P", defines={"ID": i},
             options=["-DDECLF=int a; }; static int counter; struct { int b;"]) for i in range(3)]
def workload(rt):
    out = {}
    for name, ks in (("k", KS), ("q", QS), ("r", RS)):
        for i, k in enumerate(ks):
            out[f"{name}{i}"] = rt.buffer(1, "int32")
            rt.launch(k, out[f"{name}{i}"])
    return out
"""


def test_file_scope_state_a_macro_declares_indirectly_is_one_per_kernel(
    tmp_path: Path,
    trial: Callable[..., Trial],  # noqa: F811
) -> None:
    """Each kernel counts from its own `counter`, cold and served alike."""
    one = trial(tmp_path / "w", STATE)
    cold = one.cold()
    assert [int(cold[f"k{i}"][0]) for i in range(3)] == [1, 11, 21]
    one.warmed("-j", "1")
    hot, report = one.served()
    served_everything(report)
    same(cold, hot)


_USE = "void k(int *o) { o[0] = ++counter; }\n"


@pytest.mark.parametrize(
    ("source", "options", "defines"),
    [
        ("#define Y static int counter;\n#define X Y\nX\n" + _USE, [], {}),
        ("#define Z static int counter;\n#define Y Z\n#define X Y\nX\n" + _USE, [], {}),
        ("#define X DECL\nX\n" + _USE, ["-DDECL=static int counter;"], {}),
        ("#define X DECL\nX\n" + _USE, [], {"DECL": "static int counter;"}),
        ("struct s { DECLF };\n" + _USE, ["-DDECLF=int a; }; static int counter; struct {"], {}),
        ("union u { DECLF };\n" + _USE, [], {"DECLF": "int a; }; static int counter; union {"}),
        ("static int t[] = { V };\n" + _USE, ["-DV=0 }; static int counter[] = { 0"], {}),
        (
            "#define W(i) i }; static int counter; int z[] = { 0\nstatic int t[] = { W(0) };\n"
            + _USE,
            [],
            {},
        ),
        (
            "#define C };\n#define W(i) i C\nstatic int t[] = { W(0) static int counter;\n" + _USE,
            [],
            {},
        ),
    ],
)
def test_a_macro_that_declares_where_it_is_reached_keeps_a_kernel_alone(
    source: str, options: list[str], defines: dict[str, str]
) -> None:
    assert not shares_unit(Kernel(source, "k", "P", options=options, defines=defines))


@pytest.mark.parametrize(
    "source",
    [
        "#define N 4\n#define M N\nvoid k(int *o) { o[0] = M; }\n",
        "#define F(x) ((x) + 1)\nvoid k(int *o) { o[0] = F(2); }\n",
        "struct s { int a; };\nvoid k(int *o) { struct s v = { 1 }; o[0] = v.a; }\n",
        "#define W(i) ((i) * 2)\nstatic const int t[] = { W(0), W(1) };\n"
        "void k(int *o) { o[0] = t[1]; }\n",
    ],
)
def test_kernels_whose_macros_declare_nothing_at_file_scope_still_share(source: str) -> None:
    assert shares_unit(Kernel(source, "k", "P", options=["-DSCALE=(2)"]))


WRAPPED = r"""
from warmcli import Kernel
DEVICE = "host"
FROM_HEADER = "void k(int *o) { o[0] = ++counter + 10 * ID; }\n"
KS = [Kernel(FROM_HEADER, "k", "P", defines={"ID": i}) for i in range(3)]
FROM_MACRO = "DECL\nvoid q(int *o) { o[0] = ++counted + 10 * ID; }\n"
QS = [Kernel(FROM_MACRO, "q", "P", defines={"ID": i}) for i in range(3)]
def workload(rt):
    out = {}
    for name, ks in (("k", KS), ("q", QS)):
        for i, k in enumerate(ks):
            out[f"{name}{i}"] = rt.buffer(1, "int32")
            rt.launch(k, out[f"{name}{i}"])
    return out
"""


def test_a_wrapper_script_that_reads_a_header_first_keeps_c_kernels_alone(
    tmp_path: Path,
    trial: Callable[..., Trial],  # noqa: F811
) -> None:
    """`WARM_CC` names a script that adds `-include state.h` and a `-D` that declares."""
    one = trial(tmp_path / "w", WRAPPED)
    (one.folder / "state.h").write_text("static int counter;\n")
    wrap = one.folder / "wrap.sh"
    wrap.write_text(
        f"#!/bin/sh\nexec cc -include {one.folder / 'state.h'} "
        "-DDECL='static int counted;' \"$@\"\n"
    )
    wrap.chmod(0o755)
    one.env["WARM_CC"] = str(wrap)
    cold = one.cold()
    assert [int(cold[f"q{i}"][0]) for i in range(3)] == [1, 11, 21]
    one.warmed("-j", "1")
    hot, report = one.served()
    served_everything(report)
    same(cold, hot)


def test_a_wrapper_script_keeps_alone_what_its_flags_could_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its text and the variables it names are read as options: a macro they set keeps a
    kernel that uses it at file scope alone, a header they read first every C kernel."""
    wrap = tmp_path / "wrap.sh"
    wrap.write_text('#!/bin/sh\nexec cc $CFLAGS -O2 -DNDEBUG "$@"\n')
    wrap.chmod(0o755)
    monkeypatch.setenv("WARM_CC", str(wrap))
    monkeypatch.setenv("CFLAGS", "-DDECL=static")
    plain = "void k(int *o) { o[0] = NDEBUG; }\n"
    assert shares_unit(Kernel(plain, "k", "P"))
    assert not shares_unit(Kernel("DECL int n;\n" + _USE, "k", "P"))
    assert not shares_unit(Kernel("NDEBUG\n" + _USE, "k", "P"))
    monkeypatch.setenv("CFLAGS", "-O2 --include=x.h")
    assert not shares_unit(Kernel(plain + " ", "k", "P"))
    monkeypatch.delenv("WARM_CC")
    assert shares_unit(Kernel(plain + "  ", "k", "P"))
    assert os.environ["CFLAGS"]


@pytest.mark.parametrize(
    ("source", "defines"),
    [
        (
            "#define CAT(a, b, c) a##b##c\n" + _SEED + "void b(int *o) { static void (*p)(void) "
            '__attribute__((CAT(se, ct, ion)(".init_array"), used)) = seed; o[0] = rand(); }\n',
            {},
        ),
        (
            "#define CAT(a, b, c) a##b##c\n"
            'void k(int *o) { CAT(_, Prag, ma)("GCC optimize(\\"O0\\")") o[0] = 1; }\n',
            {},
        ),
        (
            "#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\n"
            + _SEED
            + "void b(int *o) { static void (*p)(void) "
            '__attribute__((CAT(A, B)(".init_array"), used)) = seed; o[0] = rand(); }\n',
            {"A": "se", "B": "ction"},
        ),
        (
            "#define CAT(a, b, c) a##b##c\n"
            "void k(char *o) { const char *n = CAT(__, fu, nc__); o[0] = n[0]; }\n",
            {},
        ),
    ],
)
def test_a_word_any_paste_could_spell_keeps_a_kernel_alone(
    source: str, defines: dict[str, str]
) -> None:
    assert not shares_unit(Kernel(source, "k", "P", defines=defines))


def test_a_paste_that_spells_nothing_of_note_still_shares() -> None:
    source = "#define CAT(a, b) a##b\nvoid k(int *o) { int CAT(x, 1) = 2; o[0] = x1; }\n"
    assert shares_unit(Kernel(source, "k", "P"))
