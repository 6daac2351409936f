"""Review 57r: stop 57's scratch-folder refusals, what they refused that no compile reads and
what they let through that a compile does.

`warmcli.backends.scratch_reads` refuses a kernel whose source or options name by a relative
path a file cc (or nvcc), run in a scratch folder inside the temporary folder, reads from there
(`#include "../cfg.h"`: the temporary folder's, whether or not the file is there yet).
Too much: it read every `#include` line written (inside a block comment, an `#if 0` group, an
`#if 1`'s `#else`: never read), took `sub/../../cfg.h` for `../cfg.h` (cc goes through `sub`,
which the scratch folder never holds), and refused nvcc's cubin a `-L` folder it never reads.
Too little: a climbing library folder (`-L..`) with no library there yet, nvcc's variables'
`-include ./../cfg.h`, and a linker script named relatively (`-T x.ld`, then looked for along
the `-L` folders) were built and served after the file changed (or appeared), where a cold
process built anew. Each test failed before its fix. Real parts: the real CLI warms with the
real cc, ld and ar (and nvcc where installed), each command a fork of one process that
imported the CLI (`tests/forked_cli.py`); a production process serves and a cold one builds,
each a fork of one that imported this tree's warmcli (`tests/forked_python.py`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
from warmcli import Kernel
DEVICE = {device!r}
K = Kernel('''{source}''', "k", "P", language={language!r})
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(K, y, **({{"grid": 1, "block": 1}} if DEVICE == "cuda" else {{}}))
    return [y]
"""
SERVE = """
import json, runpy, sys, warmcli
if len(sys.argv) > 2:
    warmcli.use_bundle(sys.argv[2])
rt = warmcli.runtime("host")
print(json.dumps([int(rt.read(y)[0]) for y in runpy.run_path(sys.argv[1])["workload"](rt)]))
"""
BODY = "#ifndef SCALE\n#define SCALE 2\n#endif\nvoid k(int *y) { y[0] = SCALE; }"
NEVER_READ = {  # a climbing quoted include no compile reads, whatever its macros
    "block comment": '/* was:\n#include "../cfg.h"\n*/\n',
    "#if 0": '#if 0\n#include "../cfg.h"\n#endif\n',
    "nested #if 0": '#if 0\n#ifdef X\n#else\n#include "../cfg.h"\n#endif\n#endif\n',
    "#if 1's #else": '#if 1\n#define SCALE 2\n#else\n#include "../cfg.h"\n#endif\n',
    "#if 0, #elif 0": '#if 0\n#include "../a.h"\n#elif 0\n#include "../cfg.h"\n#endif\n',
}
MAY_READ = {  # one a compile reads, or may (its macro set by an option)
    "#ifdef": '#ifdef USE_CFG\n#include "../cfg.h"\n#endif\n',
    "#if 0's #else": '#if 0\n#else\n#include "../cfg.h"\n#endif\n',
    "#if 1": '#if 1\n#include "../cfg.h"\n#endif\n',
    "comment ended": '/* a */ #define A\n#include "../cfg.h"\n',
    "#if false, defined 1": '#define false 1\n#if false\n#include "../cfg.h"\n#endif\n',
}


def _workload(folder: Path, head: str, device: str = "host") -> Path:
    body = BODY.replace("void k(", 'extern "C" __global__ void k(') if device == "cuda" else BODY
    language = "cuda" if device == "cuda" else "c"
    text = WORKLOAD.format(device=device, source=head + body, language=language)
    (path := folder / "w.py").write_text(text)
    return path


def _scratch(tmp_path: Path) -> Path:
    """A temporary folder holding a `cfg.h` a compile of `../cfg.h` would read (SCALE 3)."""
    (scratch := tmp_path / "tmp").mkdir()
    (scratch / "cfg.h").write_text("#define SCALE 3\n")
    return scratch


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`_scratch`'s folder, one a module, for the cases that only read it: the same `TMPDIR`,
    so their commands fork from one server (`forked_warm`'s are one an environment)."""
    return _scratch(tmp_path_factory.mktemp("scratch"))


def _served_as_cold(path: Path, warm: Warm, value: int) -> None:
    """A cold production process and one served `b.warm` beside `path` both compute `value`
    for the workload at `path` (`warm.production`: forks of one process that imported this
    tree's numpy and warmcli, `tests/forked_python.py`)."""
    for bundle in ((), (path.with_name("b.warm"),)):  # cold, then served
        assert warm.production(SERVE, path, *bundle) == [value], bundle


@pytest.mark.parametrize("case", list(NEVER_READ))
def test_a_climbing_include_no_compile_reads_is_built_and_served_as_cold(
    warm: Warm, tmp_path: Path, scratch: Path, case: str
) -> None:
    """Before, exit 2 (`the source's #include "../cfg.h" names by a relative path a file ...`)
    for a line the preprocessor never reads; now built, stored, and served as a cold build (2)."""
    path = _workload(tmp_path, NEVER_READ[case])
    moved = warm.with_env(TMPDIR=str(scratch))
    done = moved("run", path, "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    _served_as_cold(path, moved, 2)


@pytest.mark.parametrize("case", list(MAY_READ))
def test_a_climbing_include_a_compile_may_read_is_still_refused(
    warm: Warm, tmp_path: Path, scratch: Path, case: str
) -> None:
    """The narrowing keeps every line a compile may read: exit 2, one line naming it."""
    path = _workload(tmp_path, MAY_READ[case])
    moved = warm.with_env(TMPDIR=str(scratch))
    done = moved("run", path, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
    assert '#include "../cfg.h"' in line and "no kernel key covers" in line, done.stderr


def test_nvcc_builds_a_climbing_include_inside_if_0(
    warm: Warm, tmp_path: Path, scratch: Path
) -> None:
    """nvcc's check is the same: an `#if 0` group's `#include "../cfg.h"` was refused (exit 2),
    now built; the same include outside it is still refused."""
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc_or_skip())
    moved = warm.with_env(TMPDIR=str(scratch))
    path = _workload(tmp_path, NEVER_READ["#if 0"], "cuda")
    done = moved("run", path, *args, "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    path = _workload(tmp_path, MAY_READ["#if 1"], "cuda")
    done = moved("run", path, *args, "-b", tmp_path / "c.warm")
    assert done.returncode == 2 and "scratch folder" in done.stderr, done.stderr


LINKED = "int helper(void);\nvoid k(int *y) { y[0] = helper(); }"
CLIMBING = {  # a library folder named from cc's scratch folder: the temporary folder, or beside it
    "-L..": (("-L..",), {}),
    "-L../lib": (("-L../lib",), {}),
    "LIBRARY_PATH": ((), {"LIBRARY_PATH": ".."}),
}


@pytest.mark.parametrize("case", list(CLIMBING))
def test_a_climbing_library_folder_is_refused_before_a_library_is_there(
    warm: Warm, tmp_path: Path, case: str
) -> None:
    """`-L..` (or `LIBRARY_PATH=..`) beside an absolute `-L` folder holding `libhelper.a`: the
    refusal asked only whether the temporary folder held a library the link names (`-lhelper`,
    and cc's own, `-lc`), so with none there yet `warm run` built and stored it (exit 0), and a
    `libhelper.a` put there later is what cc links first, under the same key: measured, a cold
    process then refused (`option '-L..' names ...`) where the bundle served the old build (3).
    Now a library folder climbing out of the scratch folder is refused there or not, as a
    climbing include is: exit 2, one line naming it."""
    (lib := tmp_path / "lib").mkdir()
    (lib / "h.c").write_text("int helper(void) { return 3; }\n")
    subprocess.run(["cc", "-O2", "-fPIC", "-c", lib / "h.c", "-o", lib / "h.o"], check=True)
    subprocess.run(["ar", "rcs", lib / "libhelper.a", lib / "h.o"], check=True)
    options, env = CLIMBING[case]
    options += (f"-L{lib}", "-Wl,-u,helper", "-lhelper")
    text = WORKLOAD.format(device="host", source=LINKED, language="c")
    text = text.replace('"P", language', f'"P", options={options!r}, language')
    (path := tmp_path / "w.py").write_text(text)
    (scratch := tmp_path / "tmp").mkdir()  # (holding no library)
    done = warm.with_env(TMPDIR=str(scratch), **env)("run", path, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
    assert ("'..'" if env else f"'{options[0]}'") in line, line


def test_a_name_through_a_folder_the_scratch_folder_lacks_is_built_and_served_as_cold(
    warm: Warm, tmp_path: Path
) -> None:
    """`#include "sub/../../cfg.h"` goes through `sub`, which warm's new scratch folder never
    holds, so cc finds nothing there and reads it from the `-I` folder (`inc/x/sub/../../cfg.h`:
    SCALE 3), as the key does, never the temporary folder's `cfg.h` (9); the check read the
    name as `../cfg.h` (`normpath`) and refused it (exit 2). Now built, served as cold (3)."""
    (tmp_path / "inc" / "x" / "sub").mkdir(parents=True)
    (tmp_path / "inc" / "cfg.h").write_text("#define SCALE 3\n")
    path = _workload(tmp_path, '#include "sub/../../cfg.h"\n')
    given = f'"P", options=("-I{tmp_path}/inc/x",), language'
    path.write_text(path.read_text().replace('"P", language', given))
    scratch = _scratch(tmp_path)
    (scratch / "cfg.h").write_text("#define SCALE 9\n")
    moved = warm.with_env(TMPDIR=str(scratch))
    done = moved("run", path, "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    _served_as_cold(path, moved, 3)


@pytest.mark.parametrize(
    "variable, value",
    [
        ("NVCC_APPEND_FLAGS", "-include ./../cfg.h"),
        ("NVCC_PREPEND_FLAGS", "--pre-include=.//../cfg.h"),
    ],
)
def test_nvcc_refuses_a_climbing_header_read_first_spelled_through_dot(
    warm: Warm, tmp_path: Path, scratch: Path, variable: str, value: str
) -> None:
    """nvcc's variables' header read first was refused where it started with `..` only: `./../cfg.h`
    is the temporary folder's `cfg.h` from nvcc's scratch folder too, which no key reads. Measured:
    `warm run --arch sm_90 --compiler nvcc` stored its cubin (exit 0), and after cfg.h said 9 for
    3 a second run stored 0 while a cold one built anew (`warm diff`: 2 kernels under one key,
    built to other binaries). Now refused in one line naming it, as `../cfg.h` is."""
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc_or_skip())
    path = _workload(tmp_path, "", "cuda")
    moved = warm.with_env(TMPDIR=str(scratch), **{variable: value})
    done = moved("run", path, *args, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
    assert f"{variable}'s option" in line and "../cfg.h" in line, line


SCRIPTED = "extern char helper_value[];\nvoid k(int *y) { y[0] = (int)(long)helper_value; }"


def _script(folder: Path, value: int) -> None:
    """`folder/x.ld`, a linker script added to ld's own (`INSERT`) setting `helper_value`."""
    text = f"SECTIONS {{ .data.hv : {{ }} }} INSERT AFTER .data;\nhelper_value = {value};\n"
    (folder / "x.ld").write_text(text)


@pytest.mark.parametrize("spelling", [("-Tx.ld",), ("-Wl,-T,x.ld",), ("-Wl,--script=x.ld",)])
def test_a_linker_script_named_relatively_is_refused(
    warm: Warm, tmp_path: Path, spelling: tuple[str, ...]
) -> None:
    """ld looks for a `-T` script named relatively in its working folder, cc's scratch one,
    then along the `-L` folders, where no key looks (the key reads a script named by its
    absolute path): with `-L lib` holding x.ld (helper_value = 3), `warm run` stored the build
    (exit 0), and after x.ld said 5 a cold process computed 5 where the bundle served 3. Now
    refused in one line naming it; the same script by its absolute path is built, and an edit
    of it is a miss built anew (served as cold)."""
    (lib := tmp_path / "lib").mkdir()
    _script(lib, 3)
    for options, refused in ((("-L" + str(lib), *spelling), True), ((f"-T{lib}/x.ld",), False)):
        text = WORKLOAD.format(device="host", source=SCRIPTED, language="c")
        text = text.replace('"P", language', f'"P", options={options!r}, language')
        (path := tmp_path / "w.py").write_text(text)
        done = warm("run", path, "-b", tmp_path / "b.warm")
        if refused:
            assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
            assert "Traceback" not in done.stderr
            line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
            assert "x.ld" in line and "no kernel key covers" in line, line
            continue
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        _script(lib, 5)
        _served_as_cold(path, warm, 5)


def test_nvcc_builds_a_cubin_whatever_library_folder_its_options_name(
    warm: Warm, tmp_path: Path, scratch: Path
) -> None:
    """nvcc builds a cubin and links nothing, so no `-L` folder is read: `-L../lib -lfoo` in a
    CUDA kernel's options (a whole program's flags) was refused once a climbing library folder
    was refused there or not (exit 2); now built, as before that (a host kernel's is refused)."""
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc_or_skip())
    path = _workload(tmp_path, "", "cuda")
    given = '"P", options=("-L../lib", "-lfoo"), language'
    path.write_text(path.read_text().replace('"P", language', given))
    moved = warm.with_env(TMPDIR=str(scratch))
    done = moved("run", path, *args, "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
