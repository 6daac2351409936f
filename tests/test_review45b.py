"""Review of the stale hits review 45a left in a host kernel's key (review 45b).

Each case here was a wrong result served from a bundle (a production process under
`WARM_STRICT=1` printed the old value where a cold one printed the new), or a kernel never
served at all:
- `#include CFG` with `-DCFG="val.h"` (a computed include): the key never followed it, so an
  edited `inc/val.h` was served the old build; now a macro the kernel's own `-D`, defines or
  `#define` lines give a plain `"x"` or `<x>` is followed as that include, and one warm cannot
  resolve makes the kernel unkeyed (built in each process, never served: `warmcli.unkeyed`);
- past a bound of the key's scan (more than 512 headers, a header over 4 MB scanned in part, a
  folder of more than 512 `.gch` files, a thin archive of more than 1,024 members, a linker
  script naming more than 1,024 inputs) the rest was not keyed: an edit there was served the
  old build; now unkeyed, the miss saying which bound;
- `-Wl,-Map=/abs/out.map` (a file the linker writes; cc's `-fopt-info-all=/abs/opt.txt` alike)
  was keyed by its content as an input, so the file each build wrote made the kernel miss in
  every later process (warm run's own verify pass failed);
- `-Wl,-static` (the linker's, from its place) was taken as cc's whole-link `-static`: the key
  covered `libX.a` where the linker took `libX.so` (a library named before it; a linker script
  naming `libreal.a`), whose rebuilt archive was then served the old build.
Real CLI (each `warm` command a fork of a process that imported the CLI once,
`tests/forked_cli.py`: an unkeyed kernel's token is made on first use, in the fork), real
SQLite bundles, the system C compiler and `ar`; no fakes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from host_keys import LINK_SOURCE
from host_keys import archive as _archive
from host_keys import key as _key
from host_keys import served_and_cold as _served_and_cold
from host_keys import warmed as _warmed

from warmcli.kernel import Kernel, included_headers
from warmcli.unkeyed import reason_of


def _unkeyed(source: str, options: tuple[str, ...]) -> str:
    """Why this process keys the kernel unkeyed (its key its own: never served), or ""."""
    return reason_of(included_headers(Kernel(source, "f", "P", options=options), "cc:test"))


COMPUTED = "#include CFG\nvoid f(float *x) { x[0] = VAL; }\n"


def test_a_computed_include_given_by_a_define_is_followed_end_to_end(
    warm: Warm, tmp_path: Path
) -> None:
    """`#include CFG`, `-DCFG="val.h" -I inc`: an edited `inc/val.h` was served the old build."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    options = ('-DCFG="val.h"', f"-I{tmp_path / 'inc'}")
    script = _warmed(warm, tmp_path, COMPUTED, options)
    (tmp_path / "inc" / "val.h").write_text("#define VAL 2\n")
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "2.0", cold
    assert served != "1.0", "the old build served for an edited header a macro names"
    assert "strict mode" in served, served


def test_a_computed_include_keys_what_its_macro_names(tmp_path: Path) -> None:
    """Key logic with real files: the macro's value from a `-D` option (quoted or angled, joined
    or next), the kernel's defines, or a `#define` line of its source; its header's content."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define VAL 1\n")
    cases: list[tuple[str, tuple[str, ...], dict[str, str]]] = [
        (COMPUTED, ('-DCFG="val.h"', f"-I{inc}"), {}),
        (COMPUTED, ("-D", "CFG=<val.h>", f"-I{inc}"), {}),
        (COMPUTED, (f"-I{inc}",), {"CFG": '"val.h"'}),
        ('#define CFG "val.h"\n' + COMPUTED, (f"-I{inc}",), {}),
        ("#if __has_include(CFG)\n#include CFG\n#endif\n", ('-DCFG="val.h"', f"-I{inc}"), {}),
    ]
    before = [_key(s, o, d) for s, o, d in cases]
    (inc / "val.h").write_text("#define VAL 2\n")
    after = [_key(s, o, d) for s, o, d in cases]
    assert all(b != a for b, a in zip(before, after, strict=True)), (before, after)
    # a kernel naming no include folder, its macro an absolute path: keyed all the same
    absolute = (f'-DCFG="{inc / "val.h"}"',)
    first = _key(COMPUTED, absolute)
    (inc / "val.h").write_text("#define VAL 3\n")
    assert _key(COMPUTED, absolute) != first


def test_an_unresolved_computed_include_is_never_served(warm: Warm, tmp_path: Path) -> None:
    """`#include CFG` where CFG is made by another macro (`STR(val.h)`): warm cannot tell the
    header; the kernel is built in each process (never served), the miss says why."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    source = "#define STR(x) #x\n#define CFG STR(val.h)\n" + COMPUTED
    script = _warmed(warm, tmp_path, source, (f"-I{tmp_path / 'inc'}",))
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "1.0", cold
    assert "strict mode" in served, served
    assert "an #include of a macro" in served, served
    assert "no plain header name (CFG)" in _unkeyed(source, (f"-I{tmp_path / 'inc'}",))
    assert "no option" in _unkeyed(COMPUTED, (f"-I{tmp_path / 'inc'}",))


def test_past_the_header_bound_the_kernel_is_never_served(warm: Warm, tmp_path: Path) -> None:
    """`all.h` includes h0.h...h599.h: an edit to h599.h kept the key (only 512 scanned) and
    was served the old build; now the kernel is unkeyed, the miss naming the bound."""
    inc = tmp_path / "inc"
    inc.mkdir()
    for i in range(600):
        (inc / f"h{i}.h").write_text(f"#define H{i} {i}\n")
    (inc / "h599.h").write_text("#define VAL 1\n")
    (inc / "all.h").write_text("".join(f'#include "h{i}.h"\n' for i in range(600)))
    source = '#include "all.h"\nvoid f(float *x) { x[0] = VAL; }\n'
    script = _warmed(warm, tmp_path, source, (f"-I{inc}",))
    (inc / "h599.h").write_text("#define VAL 2\n")
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "2.0", cold
    assert served != "1.0", "the old build served past the header bound"
    assert "strict mode" in served and "more than 512 headers" in served, served


def test_a_header_over_the_scanned_size_is_never_served(tmp_path: Path) -> None:
    """A header over 4 MB: its includes past the first 4 MB were not read (an edit to the
    header one names kept the key); the kernel is now unkeyed."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "late.h").write_text("#define VAL 1\n")
    (inc / "big.h").write_text("/*" + "x" * (4 << 20) + '*/\n#include "late.h"\n')
    source = '#include "big.h"\nvoid f(float *x) { x[0] = VAL; }\n'
    assert "over 4 MB" in _unkeyed(source, (f"-I{inc}",))
    (inc / "big.h").write_text('#include "late.h"\n')  # a small one keys as ever
    assert _unkeyed(source, (f"-I{inc}",)) == ""


def test_past_a_linked_bound_the_kernel_is_never_served(tmp_path: Path) -> None:
    """A thin archive of more than 1,024 members, a linker script naming more than 1,024
    inputs: the rest were not keyed; now unkeyed; fewer key as ever."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "m.c").write_text("int one(void) { return 1; }\n")
    subprocess.run(["cc", "-c", "m.c", "-o", "m.o"], cwd=lib, check=True)
    names = []
    for i in range(1030):
        (lib / f"m{i}.o").write_bytes((lib / "m.o").read_bytes())
        names.append(f"m{i}.o")
    subprocess.run(["ar", "rcsT", "libthin.a", *names], cwd=lib, check=True)
    thin = (f"{lib / 'libthin.a'}",)
    assert "1,024 members" in _unkeyed(LINK_SOURCE, thin)
    (lib / "big.ld").write_text("INPUT(" + " ".join(f"{lib}/m{i}.o" for i in range(1030)) + ")\n")
    script = (f"-Wl,-T,{lib / 'big.ld'}",)
    assert "1,024 inputs" in _unkeyed(LINK_SOURCE, script)
    (lib / "small.ld").write_text(f"INPUT({lib}/m1.o)\n")
    small = (f"-Wl,-T,{lib / 'small.ld'}",)
    assert _unkeyed(LINK_SOURCE, small) == ""


def test_a_linker_map_is_an_output_not_an_input(warm: Warm, tmp_path: Path) -> None:
    """`-Wl,-Map=/abs/out.map`: the map the build wrote was keyed as an input, so the kernel
    missed in every later process (a fresh map each build); now served."""
    source = "void f(float *x) { x[0] = 1.0f; }\n"
    for spelling in (
        f"-Wl,-Map={tmp_path / 'out.map'}",
        f"-Wl,--Map,{tmp_path / 'out.map'}",
        f"-Wl,--dependency-file={tmp_path / 'deps.d'}",
        f"-fopt-info-all={tmp_path / 'opt.txt'}",  # cc's own report
    ):
        script = _warmed(warm, tmp_path, source, (spelling,))
        served, cold = _served_and_cold(warm, tmp_path, script)
        assert served == cold == "1.0", (spelling, served)


def test_wl_static_applies_from_its_place(warm: Warm, tmp_path: Path) -> None:
    """`-L A -lX -Wl,-static ... -Wl,-Bdynamic`: the linker takes `A/libX.so` (named before
    `-static`; here a linker script naming `A/libreal.a`), the key took `A/libX.a`: a rebuilt
    `libreal.a` was served the old build. End to end: warm run, rebuild, a served
    WARM_STRICT=1 process against a cold one."""
    lib = tmp_path / "A"
    _archive(lib, 9)
    _archive(lib, 1, "real")
    (lib / "libX.so").write_text(f"INPUT({lib / 'libreal.a'})\n")
    options = ("-Wl,-u,helper", f"-L{lib}", "-lX", "-Wl,-static", "-Wl,-Bdynamic")
    script = _warmed(warm, tmp_path, LINK_SOURCE, options)
    _archive(lib, 2, "real")
    served, cold = _served_and_cold(warm, tmp_path, script)
    assert cold == "2.0", cold
    assert served != "1.0", "the old build served for a rebuilt libreal.a"
    assert "strict mode" in served, served


def test_has_include_keys_a_header_appearing_in_an_earlier_folder(tmp_path: Path) -> None:
    """`__has_include("extra.h")` (and the `#include` it guards), `-I a -I b`: a header that
    appears in `a` (before `b`'s), or where none was, changes the answer and the key: covered."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    source = (
        '#if __has_include("extra.h")\n#include "extra.h"\n#else\n#define VAL 0\n#endif\n'
        "#if __has_include(<opt.h>)\n#define OPT 1\n#endif\nvoid f(float *x) { x[0] = VAL; }\n"
    )
    options = (f"-I{a}", f"-I{b}")
    (b / "extra.h").write_text("#define VAL 1\n")
    first = _key(source, options)
    (a / "extra.h").write_text("#define VAL 2\n")
    second = _key(source, options)
    (b / "opt.h").write_text("\n")
    assert len({first, second, _key(source, options)}) == 3


def test_a_folder_of_too_many_precompiled_headers_is_never_served(tmp_path: Path) -> None:
    """`inc/val.h.gch/` holding more than 512 files: only the first 512 were keyed (gcc may
    read any valid one); now unkeyed, the reason named; 512 key as ever."""
    inc = tmp_path / "inc"
    (inc / "val.h.gch").mkdir(parents=True)
    (inc / "val.h").write_text("#define VAL 1\n")
    for i in range(512):
        (inc / "val.h.gch" / f"{i:04}.gch").write_bytes(b"x")
    source = '#include "val.h"\nvoid f(float *x) { x[0] = VAL; }\n'
    assert _unkeyed(source, (f"-I{inc}",)) == ""
    (inc / "val.h.gch" / "9999.gch").write_bytes(b"y")
    assert "more than 512 .gch files" in _unkeyed(source, (f"-I{inc}",))
