"""A new user's workloads, from the README alone (stop 54): what they met that differed.

Each test is a fault such a user met, failing before its fix: a kernel source that opens with
a UTF-8 byte order mark (a file saved by an editor that writes one, read with `open().read()`
or `Path.read_text()`, which keep it) built alone by `cc k.c`, as gcc skips a BOM at a file's
start, but failed under warm (`unknown type name '\\ufeffvoid'`), NVRTC and nvcc alike, since
warm writes its own lines before the source and the mark then stands mid-file; and `warm stats`
showing a failed candidate's error line of 3,059 characters as 512 of them `(1,011 characters)`,
the length of its own cut, where the README says 1,000 characters; and a kernel including a
header from `-I.` (or `CPATH=.`) launched after the workload changed folder, which `warm run`'s
batch built in the folder of its first load: a hit computed another header's value than a cold start
(the promise broken), its row called corrupt by `warm verify`. Real parts: the real cc builds
what the host compiler writes; the real CLI (forked) warms, lists and verifies the bundle; a
real production process (forked) serves it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_kernel_construction import host_units

from warmcli.backends.compiler import CompileUnit
from warmcli.backends.host.building import translation_unit as host_unit
from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.host.device import HostDevice
from warmcli.cli.render.shown import reason_shown
from warmcli.kernel import Kernel

BOM = "\ufeff"
SCALE = (
    "void scale(float *x, int n) {\r\n  for (int i = 0; i < n; i++) x[i] = x[i] * GAIN;\r\n}\r\n"
)
PLUS = "void plus(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }"


def run_host(kernels: list[Kernel]) -> list[list[float]]:
    """Each kernel built in one batch by the real cc, launched on [1, 2, 3]."""
    units = host_units(kernels)
    built = HostCompiler().compile_group(units)
    device = HostDevice()
    module = device.load_module(built.binary)
    out = []
    for unit in units:
        x = np.array([1, 2, 3], dtype=np.float32)
        device.get_function(module, built.symbols[unit.key], unit.kernel)(x.ctypes.data, 3)
        out.append(x.tolist())
    return out


def test_a_source_opening_with_a_byte_order_mark_builds_as_cc_builds_its_file() -> None:
    marked = Kernel(BOM + SCALE, "scale", "Pi", defines={"GAIN": 3})
    plain = Kernel(SCALE, "scale", "Pi", defines={"GAIN": 3})
    assert marked.source == plain.source and marked == plain  # one program, one key
    (unit,) = host_units([marked])
    assert BOM not in host_unit([unit])
    # beside another kernel in one batch too, where the mark would stand after its neighbour
    assert run_host([Kernel(BOM + PLUS, "plus", "Pi"), marked]) == [[2, 3, 4], [3, 6, 9]]


# A tunable one candidate of which fails to compile with a line of over 3,000 characters (a
# name the compiler quotes in its error: a macro expanded, a generated identifier).
LONG_REASON = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
C = {"good": Kernel("void f(int *y) { y[0] = 1; }", "f", "P"),
     "bad": Kernel("void f(int *y) { y[0] = %s; }" % ("x" * 3000), "f", "P")}
T = Tunable("t", C, lambda rt, k, y, *, stream=None: rt.launch(k, y, stream=stream))
def workload(rt):
    rt.tune(T, rt.buffer(1, "int32"))
"""


def test_stats_shows_a_reason_cut_to_1000_characters_saying_its_length(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """The README: `warm stats` shows a failed candidate's error line cut to 1,000
    characters. It showed 512 (a table cell's cut) and said `(1,011 characters)`, the
    length of its own cut text (`failed: ` and 1,000 characters and `...`), not the line's."""
    bundle = tmp_path / "b.warm"
    assert warm("run", workload_file(LONG_REASON), "-b", bundle, "--quiet").returncode == 0
    shown = re.sub(r"\s+", "", warm("stats", bundle).stdout)  # (however a terminal wraps it)
    said = re.findall(r"\(([\d,]+)characters\)", shown)  # the line's: over its 3,000 x's
    assert len(said) == 1 and 3000 < int(said[0].replace(",", "")) < 3100, said
    assert "error:‘" + "x" * 100 in shown  # (as much as the terminal's width shows)
    line = "f.c:1:25: error: ‘" + "x" * 3000 + "’ undeclared"
    shown_line = reason_shown(f"f.c: In function ‘f’:\n{line}\n")
    assert shown_line == f"{line[:1000]}… ({len(line):,} characters)"


# Two kernels reading `local.h` from `-I.`, the working folder, each launched in a folder of
# its own; production (argv[1]: the workload) prints what each computed.
TWO_FOLDERS = """
import os
from warmcli import Kernel
DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = '#include "local.h"\\nvoid %s(int *y) { y[0] = VAL + %d; }'
K1 = Kernel(SRC % ("one", 1), "one", "P", options=("-I.",))
K2 = Kernel(SRC % ("two", 2), "two", "P", options=("-I.",))
def workload(rt):
    start, ys = os.getcwd(), []
    for folder, kernel in (("a", K1), ("b", K2)):
        os.chdir(os.path.join(HERE, folder))
        ys.append(rt.buffer(1, "int32"))
        rt.launch(kernel, ys[-1])
    os.chdir(start)
    return ys
"""
SERVE = """
import json, runpy, sys, warmcli
rt = warmcli.runtime("host")
print(json.dumps([int(rt.read(y)[0]) for y in runpy.run_path(sys.argv[1])["workload"](rt)]))
"""


def test_a_relative_include_folder_is_the_folder_its_kernel_was_keyed_in(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """A batch compiled every kernel `warm run` queued in the folder the workload was in at
    the first load, reading `-I.`'s header there, so the second kernel, keyed by `b/local.h`
    (VAL 200), was stored built from `a/local.h` (VAL 100): a hit computed 102, a cold
    start 202."""
    for folder, value in (("a", 100), ("b", 200)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "local.h").write_text(f"#define VAL {value}\n")
    path, bundle = workload_file(TWO_FOLDERS), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr
    # served as a cold start computes it, each kernel from its own folder's header
    assert warm.production(SERVE, path, bundle=bundle) == [101, 202]
    # each row's key holds: its headers' digest, kept beside it, read where its key read them
    # (it was read after the pass, in the folder `warm run` started in: `corrupt kernel entry`)
    verified = warm("verify", bundle)
    assert verified.returncode == 0 and "sound" in verified.stdout, verified.stdout


def test_a_relative_cpath_entry_is_the_folder_its_kernel_was_queued_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CPATH=.` likewise: a unit queued in `b` and compiled once the workload is back in `a`
    read `a/local.h` (cc's environment took `.` as the folder of the compile)."""
    for folder, value in (("a", 100), ("b", 200)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "local.h").write_text(f"#define VAL {value}\n")
    monkeypatch.setenv("CPATH", ".")
    kernel = Kernel('#include "local.h"\nvoid v(int *y) { y[0] = VAL; }', "v", "P")
    (unit,) = host_units([kernel])
    monkeypatch.chdir(tmp_path / "b")
    unit = CompileUnit.queued(unit.key, kernel, unit.arch)
    monkeypatch.chdir(tmp_path / "a")
    built = HostCompiler().compile_group([unit])
    device, y = HostDevice(), np.zeros(1, dtype=np.int32)
    device.get_function(device.load_module(built.binary), built.symbols[unit.key], kernel)(
        y.ctypes.data
    )
    assert int(y[0]) == 200


def test_only_the_mark_a_file_opens_with_is_dropped() -> None:
    """A mark elsewhere (a second, one in a comment) is the text's: the compiler reads it."""
    twice = Kernel(BOM + BOM + PLUS, "plus", "Pi")
    assert twice.source == BOM + PLUS
    inside = Kernel("/* " + BOM + " */" + PLUS, "plus", "Pi")
    assert inside.source.startswith("/* " + BOM)
