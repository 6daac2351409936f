"""Review 57s: one hole and two unhelpful messages in the scratch-folder refusals.

cc (and nvcc) compile a kernel's source in a scratch folder of warm's inside the temporary
folder, so a quoted include is searched there first, where no key looks
(`warmcli.backends.scratch_reads`). The hole: `#include CFG` whose macro only a header in an
`-I` folder defines (`#define CFG "../cfg.h"`) was built and stored, and a `cfg.h` put in the
temporary folder later was what a cold build read (the source's own `#define`, or `-DCFG=`, was
refused already). The messages: a user's `#include "base.h"` that warm's own scratch `base.h`
answers was told to name it "within an -I folder", where it already is; and a relative `-Llib`
that names the working folder's `lib` failed with ld's bare "cannot find -lhelper". Each test
failed before its fix. Real parts: the real CLI warms with the real cc, ld and ar (nvcc
compile-only where installed), a real production process serves (each a fork of a process that
imported warm once, `tests/forked_cli.py`, `tests/forked_python.py`: what they refuse, store and
compute is tested, not how they start).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, Warm, nvcc_or_skip
from forked_cli import (
    Servers,
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
)
from test_review57r import BODY, SERVE

WORKLOAD = """
from warmcli import Kernel
DEVICE = {device!r}
K = Kernel('''{source}''', "k", "P", options={options!r}, language={language!r})
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(K, y, **({{"grid": 1, "block": 1}} if DEVICE == "cuda" else {{}}))
    return [y]
"""
NVCC = ("--arch", "sm_90", "--compiler", "nvcc")


def _workload(folder: Path, head: str, options: tuple[str, ...], device: str = "host") -> Path:
    body = BODY.replace("void k(", 'extern "C" __global__ void k(') if device == "cuda" else BODY
    language = "cuda" if device == "cuda" else "c"
    text = WORKLOAD.format(device=device, source=head + body, options=options, language=language)
    (path := folder / "w.py").write_text(text)
    return path


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a compile refused for what it reads from the scratch folder (exit 2)."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    return next(x for x in done.stderr.splitlines() if "scratch folder" in x)


def _served(
    servers: Servers, tmp_path: Path, path: Path, warm: Warm, value: int, cwd: Path = ROOT
) -> None:
    """A cold production process and one served `tmp_path/b.warm` both compute `value` (each
    `python serve.py`, a fork of `servers`' production server of its environment)."""
    (tmp_path / "serve.py").write_text(SERVE)
    env = {**warm.env, "PYTHONPATH": str(ROOT)}
    for bundle in ((), (tmp_path / "b.warm",)):  # cold, then served
        served = servers.pythons(env).run(
            tmp_path / "serve.py", str(path), *map(str, bundle), env=env, cwd=cwd
        )
        assert served.returncode == 0 and served.stdout.strip() == f"[{value}]", served.stderr


def _defined_in_a_header(tmp_path: Path, defines: str) -> tuple[str, ...]:
    """`inc/defs.h` defining CFG as `defines` says, `tmp_path/cfg.h` (SCALE 4: what the key
    reads of `../cfg.h` from `inc`), `inc/cfg2.h` (SCALE 5); the options naming `inc`."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "defs.h").write_text(defines)
    (tmp_path / "inc" / "cfg2.h").write_text("#define SCALE 5\n")
    (tmp_path / "cfg.h").write_text("#define SCALE 4\n")
    (tmp_path / "tmp").mkdir()  # the temporary folder: no cfg.h yet
    return (f"-I{tmp_path}/inc",)


@pytest.mark.parametrize("device", ["host", "cuda"])
def test_a_computed_include_a_header_makes_climb_is_refused(
    warm: Warm, tmp_path: Path, device: str
) -> None:
    """`#include "defs.h"` / `#include CFG`, `inc/defs.h` saying `#define CFG "../cfg.h"`: the
    check read CFG's values in the kernel's options, defines and source only, so `warm run`
    stored the build (exit 0) from `inc/../cfg.h` (4); measured, once `$TMPDIR/cfg.h` said 9 a
    cold process computed 9 where the bundle served 4. Now the values the key's walk gave CFG
    (every header it reached) are checked too: exit 2, one line naming the include."""
    args = (*NVCC, "--nvcc", nvcc_or_skip()) if device == "cuda" else ()
    options = _defined_in_a_header(tmp_path, '#define CFG "../cfg.h"\n')
    path = _workload(tmp_path, '#include "defs.h"\n#include CFG\n', options, device)
    moved = warm.with_env(TMPDIR=str(tmp_path / "tmp"))
    line = _refused(moved("run", path, *args, "-b", tmp_path / "b.warm"))
    assert '#include "../cfg.h"' in line and "no kernel key covers" in line, line


@pytest.mark.parametrize(
    "defines, head, value",
    [  # CFG naming no climbing name; a header's own `#include CFG` (searched from its folder)
        ('#define CFG "cfg2.h"\n', '#include "defs.h"\n#include CFG\n', 5),
        ('#define CFG "../cfg.h"\n#include CFG\n', '#include "defs.h"\n', 4),
    ],
)
def test_a_header_defined_computed_include_that_stays_is_built_and_served(
    warm: Warm, tmp_path: Path, defines: str, head: str, value: int, forking_servers: Servers
) -> None:
    """What the new check leaves alone: CFG naming `cfg2.h` (found in `inc`), and `#include CFG`
    in `inc/defs.h` itself, which cc searches from `inc` first, as the key does: built, stored,
    and served as cold, with a `$TMPDIR/cfg.h` (9) there."""
    options = _defined_in_a_header(tmp_path, defines)
    (tmp_path / "tmp" / "cfg.h").write_text("#define SCALE 9\n")
    path = _workload(tmp_path, head, options)
    moved = warm.with_env(TMPDIR=str(tmp_path / "tmp"))
    done = moved("run", path, "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    _served(forking_servers, tmp_path, path, moved, value)


@pytest.mark.parametrize(
    "name, device", [("base.h", "host"), ("batch.c", "host"), ("tu.cu", "cuda")]
)
def test_a_header_warm_s_scratch_file_answers_is_told_what_to_do(
    warm: Warm, tmp_path: Path, name: str, device: str, forking_servers: Servers
) -> None:
    """A user's `inc/base.h` included as `#include "base.h"` is answered by warm's own
    `base.h` in cc's scratch folder (so `batch.c` by its translation unit, nvcc's `tu.cu` by
    its): refused, as before, but told to name it "within an -I folder", where it is. Now the
    line names warm's file and what to do (another name, or `sub/base.h`), true for each name
    warm writes there; following it, `#include "sub/base.h"` with `-I` above is built and served."""
    args = (*NVCC, "--nvcc", nvcc_or_skip()) if device == "cuda" else ()
    (tmp_path / "inc" / "sub").mkdir(parents=True)
    for header in (tmp_path / "inc" / name, tmp_path / "inc" / "sub" / name):
        header.write_text("#define SCALE 3\n")
    path = _workload(tmp_path, f'#include "{name}"\n', (f"-I{tmp_path}/inc",), device)
    line = _refused(warm("run", path, *args, "-b", tmp_path / "b.warm"))
    assert f"warm's own {name!r}" in line and f"'sub/{name}'" in line, line
    assert "within an -I folder" not in line and "rename the header" in line, line
    if device == "host":
        path = _workload(tmp_path, f'#include "sub/{name}"\n', (f"-I{tmp_path}/inc",))
        done = warm("run", path, "-b", tmp_path / "b.warm")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        _served(forking_servers, tmp_path, path, warm, 3)


LINKED = "int helper(void);\nvoid k(int *y) { y[0] = helper(); }"


@pytest.mark.parametrize("spelling", [("-Llib",), ("-L", "lib"), ("-Wl,-Llib",)])
def test_a_relative_library_folder_of_the_working_folder_is_named_under_ld_s_error(
    warm: Warm, tmp_path: Path, spelling: tuple[str, ...], forking_servers: Servers
) -> None:
    """`-Llib -lhelper`, `lib` in the working folder: cc runs in its scratch folder, where
    `lib` is none, and the compile failed with ld's "cannot find -lhelper" alone. Now a line
    beneath it names the working folder's `lib` and its absolute spelling, which builds."""
    (lib := tmp_path / "lib").mkdir()
    (lib / "h.c").write_text("int helper(void) { return 3; }\n")
    subprocess.run(["cc", "-O2", "-fPIC", "-c", lib / "h.c", "-o", lib / "h.o"], check=True)
    subprocess.run(["ar", "rcs", lib / "libhelper.a", lib / "h.o"], check=True)
    text = WORKLOAD.format(
        device="host", source=LINKED, options=(*spelling, "-lhelper"), language="c"
    )
    (path := tmp_path / "w.py").write_text(text)
    warm = warm.with_env(PYTHONPATH=str(ROOT))  # (this tree's warmcli, run from `tmp_path`)
    done = warm("run", path, "-b", tmp_path / "b.warm", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "cannot find -lhelper" in done.stderr, done.stderr
    hint = "warm: -Llib names no folder from cc's scratch folder"
    assert hint in done.stderr and f"(-L{lib})" in done.stderr, done.stderr
    text = WORKLOAD.format(
        device="host",
        source=LINKED,
        options=(f"-L{lib}", "-Wl,-u,helper", "-lhelper"),
        language="c",
    )
    path.write_text(text)
    done = warm("run", path, "-b", tmp_path / "b.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    _served(forking_servers, tmp_path, path, warm, 3, cwd=tmp_path)
