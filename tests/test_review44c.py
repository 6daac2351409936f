"""Review of trial 44b's placeless keys: what a host kernel's build reads that its key missed.

Each case here was a wrong result served from a bundle under `WARM_STRICT=1` (a production
process printed the old value where a cold one printed the new):
- one include folder named as `-I` and as a system folder (`-I x -I y -isystem x`,
  `-iquote x -I y -isystem x`, `-I x -I y -idirafter x`): gcc drops the `-I` (`-iquote`)
  one and finds `y`'s header, warm's key read `x`'s, so an edit to `y`'s was served old;
- `-L A -L B -Wl,-Bstatic -lX` with `A/libX.so` and `B/libX.a`: the linker links
  `B/libX.a`, the key covered `A/libX.so` (the first folder holding either);
- a thin archive (`ar rcsT`, by path or through `-L`): its members, linked from their own
  files, were in no key, so a rebuilt member of the same size was served the old build.
Real CLI, real SQLite bundles, the system C compiler and `ar`; no fakes (`warm run` and the
production processes forked: what they compute is the point, not how they start).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from host_keys import HEADER_SOURCE, LINK_SOURCE, served_and_cold, workload
from host_keys import key as _key


def _helper(folder: Path, value: int, kind: str) -> None:
    """`folder/h.o` returning `value`, and `libX.a` (`ar`, thin for "thin") or `libX.so`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "h.c").write_text(f"float helper(void) {{ return {value}.0f; }}\n")
    run = {"cwd": folder, "check": True}
    subprocess.run(["cc", "-O2", "-fPIC", "-c", "h.c", "-o", "h.o"], **run)  # type: ignore[call-overload]
    if kind == "so":
        subprocess.run(["cc", "-shared", "h.o", "-o", "libX.so"], **run)  # type: ignore[call-overload]
    elif kind in ("a", "thin"):
        (folder / "libX.a").unlink(missing_ok=True)
        flags = "rcsT" if kind == "thin" else "rcs"
        subprocess.run(["ar", flags, "libX.a", "h.o"], **run)  # type: ignore[call-overload]


def test_a_folder_named_as_i_and_as_system_is_searched_where_gcc_keeps_it(
    warm: Warm, tmp_path: Path
) -> None:
    """`-I x -I y -isystem x`: gcc searches y then x (the `-I x` dropped), so `y/val.h` is
    read; it was in no key, and its edit was served the old build. End to end: warm run,
    then a served process under WARM_STRICT=1 against a cold one."""
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "x" / "val.h").write_text("#define VAL 1\n")
    (tmp_path / "y" / "val.h").write_text("#define VAL 2\n")
    options = (f"-I{tmp_path / 'x'}", f"-I{tmp_path / 'y'}", "-isystem", str(tmp_path / "x"))
    script = tmp_path / "w.py"
    script.write_text(workload(HEADER_SOURCE, options))
    bundle = tmp_path / "b.warm"
    made = warm("run", script, "-b", bundle, "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    (tmp_path / "y" / "val.h").write_text("#define VAL 3\n")
    served, cold = served_and_cold(warm, tmp_path, script)  # (each a forked process)
    assert cold == "3.0", cold
    assert served != "2.0", "the old build served for an edited header"
    assert "strict mode" in served  # a miss, refused: never the old build


def test_each_include_chain_drops_what_gcc_drops(tmp_path: Path) -> None:
    """Key logic with real files: the header gcc reads (`y`'s) keys the kernel."""
    for name, text in (("x", "1"), ("y", "2"), ("z", "4")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "val.h").write_text(f"#define VAL {text}\n")
    x, y, z = (str(tmp_path / n) for n in "xyz")
    (tmp_path / "xl").symlink_to(x)  # the same folder by another spelling
    for options in [
        ("-I", x, "-I", y, "-isystem", x),
        ("-iquote", x, "-I", y, "-isystem", x),
        ("-I", x, "-I", y, "-idirafter", x),
        ("-I", x, "-I", y, "-isystem", str(tmp_path / "xl")),
    ]:
        before = _key(HEADER_SOURCE, options)
        (tmp_path / "y" / "val.h").write_text("#define VAL 3\n")
        assert _key(HEADER_SOURCE, options) != before, options
        (tmp_path / "y" / "val.h").write_text("#define VAL 2\n")
    # a folder named once per chain keys as before: `x`'s header found first, `y`'s not read
    before = _key(HEADER_SOURCE, ("-I", x, "-I", y, "-isystem", z))
    (tmp_path / "y" / "val.h").write_text("#define VAL 5\n")
    assert _key(HEADER_SOURCE, ("-I", x, "-I", y, "-isystem", z)) == before


def test_bstatic_keys_the_archive_the_linker_links(tmp_path: Path) -> None:
    """`-L A -L B -Wl,-Bstatic -lX`, `A/libX.so` and `B/libX.a`: the linker takes B's
    archive (no shared library in static mode); the key covers it, not A's `.so`."""
    a, b = tmp_path / "A", tmp_path / "B"
    _helper(a, 1, "so")
    _helper(b, 2, "a")
    for options in [
        (f"-L{a}", f"-L{b}", "-Wl,-Bstatic", "-Wl,-u,helper", "-lX", "-Wl,-Bdynamic"),
        ("-static", f"-L{a}", f"-L{b}", "-lX"),
        (f"-L{a}", f"-L{b}", "-Wl,-Bstatic,-Bdynamic", "-lX"),  # dynamic again: A's .so
    ]:
        before = _key(LINK_SOURCE, options)
        _helper(b, 3, "a")
        changed = _key(LINK_SOURCE, options) != before
        assert changed == ("-Wl,-Bstatic,-Bdynamic" not in options), options
        _helper(b, 2, "a")


def test_a_thin_archive_keys_its_members_content(tmp_path: Path) -> None:
    """A thin archive names its members, which the linker reads from their own files: a
    member rebuilt (same size) was served the old build; now it is a new kernel."""
    lib = tmp_path / "lib"
    _helper(lib, 1, "thin")
    for options in [
        (f"-L{lib}", "-Wl,-u,helper", "-lX"),
        ("-Wl,-u,helper", str(lib / "libX.a")),
    ]:
        before = _key(LINK_SOURCE, options)
        size = (lib / "h.o").stat().st_size
        _helper(lib, 3, "o")  # the member alone rebuilt: the archive unchanged
        assert (lib / "h.o").stat().st_size == size
        assert _key(LINK_SOURCE, options) != before, options
        _helper(lib, 1, "o")


def test_a_linker_script_keys_the_files_it_names(tmp_path: Path) -> None:
    """`libX.a` (or a file by path) that is a linker script, `INPUT(libreal.a)`,
    `GROUP(/abs/libreal.a)`, `GROUP(-lreal)`: the linker links the files it names, which no
    key covered, so a rebuilt `libreal.a` was served the old build."""
    lib, value = tmp_path / "lib", 1
    scripts = ["INPUT(libreal.a)", f"GROUP ( {lib / 'libreal.a'} )", "GROUP(AS_NEEDED(-lreal))"]
    for script in scripts:
        for options in [
            (f"-L{lib}", "-Wl,-u,helper", "-lX"),
            (f"-L{lib}", "-Wl,-u,helper", str(lib / "libX.a")),
        ]:
            keys = []
            for _ in range(2):
                value += 1
                _helper(lib, value, "a")  # libreal.a rebuilt, libX.a the script naming it
                (lib / "libX.a").replace(lib / "libreal.a")
                (lib / "libX.a").write_text(f"/* a linker script */\n{script}\n")
                keys.append(_key(LINK_SOURCE, options))
            assert keys[0] != keys[1], (script, options)


def test_a_library_cc_links_unasked_keys_where_a_folder_holds_it(tmp_path: Path) -> None:
    """`-L A` with `A/libc.a`: cc links `-lc` after the kernel's options, searched in `A`
    first, so `A/libc.a`'s `helper` was linked, in no key: a rebuilt one was served old."""
    lib = tmp_path / "A"
    _helper(lib, 1, "a")
    (lib / "libX.a").replace(lib / "libc.a")
    for options in [(f"-L{lib}",), (f"-L{lib}", "-Wl,-Bstatic")]:
        before = _key(LINK_SOURCE, options)
        _helper(lib, 2, "a")
        (lib / "libX.a").replace(lib / "libc.a")
        assert _key(LINK_SOURCE, options) != before, options
        (lib / "libc.a").unlink()
        _helper(lib, 1, "a")
        (lib / "libX.a").replace(lib / "libc.a")
