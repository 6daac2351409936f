"""Holes review54a found in stop 54's changes, each reproduced for real: the real CLI (forked,
`tests/forked_cli.py`), the real C compiler, real FIFOs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forked_cli import forked_warm as forked_warm

WARM = forked_warm  # (its fixture, `warm`, each command forked)

INCLUDING = """
from warmcli import Kernel
import numpy as np

DEVICE = "host"
SRC = ('#include <{header}>\\n'
       "void scale(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] *= 2; }}")
SCALE = Kernel(SRC, "scale", "Pi", options={options!r})

def workload(rt):
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(SCALE, x, 4)
    return x
"""


@pytest.mark.parametrize("door", ["include_next", "system header"])
def test_a_fifo_reached_through_include_next_or_a_system_header_is_refused(
    warm, tmp_path: Path, door: str
) -> None:
    """16cb5cf0 refused a FIFO an `#include` finds, but two other doors reach one as cc does:
    an `#include_next <nx.h>` in `-Ia/nx.h` reading `-Ib/nx.h` (a FIFO), and `<stdio.h>`,
    a system header, whose `#include <features.h>` cc reads from the kernel's `-I` folder
    (a FIFO there). Both were keyed as no file (`os.path.isfile`), so cc started and waited
    until `--compile-timeout` (600 s by default; here 2 s: 'did not finish'). Now each is
    refused before cc starts, naming the FIFO."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    if door == "include_next":
        (a / "nx.h").write_text("#include_next <nx.h>\n")
        os.mkfifo(fifo := b / "nx.h")
        header, options = "nx.h", (f"-I{a}", f"-I{b}")
    else:
        os.mkfifo(fifo := a / "features.h")
        header, options = "stdio.h", (f"-I{a}",)
    workload = tmp_path / "including.py"
    workload.write_text(INCLUDING.format(header=header, options=options))
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "--compile-timeout", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    said = "not compiled: a file it reads (a header, or one it links) is no regular file"
    assert f"{said}: {fifo} is a FIFO" in done.stderr, done.stderr
    assert "did not finish" not in done.stderr and "Traceback" not in done.stderr


def test_verify_of_a_virtual_suffixed_arch_gives_no_blank_warning(warm, tmp_path: Path) -> None:
    """12707d2e warned of each `--arch` ending in `a` or `f`; `compute_90a` (no GPU's arch, which
    replay refuses) got `warm: warning: compute_90a: ` with nothing after it, before the error.
    Now only the error, one line."""
    from warmcli.bundle.store import Bundle

    Bundle.create(bundle := tmp_path / "e.warm").close()
    workload = tmp_path / "w.py"
    workload.write_text('DEVICE = "host"\n\ndef workload(rt):\n    return None\n')
    done = warm("verify", bundle, "--workload", workload, "--arch", "compute_90a")
    assert done.returncode == 2 and "warning" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "virtual (PTX) architecture" in done.stderr


def test_check_names_a_driver_version_as_nvidia_smi_prints_it(warm, tmp_path: Path) -> None:
    """946e99d3 told `--driver 550.54` for an NVIDIA driver's version, but the version as
    nvidia-smi prints it, `575.51.03`, was only 'give a CUDA release such as 13.0'. Now told
    alike; a CUDA release with a two-digit minor (12.10) is still one."""
    done = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", "575.51.03")
    assert done.returncode == 2, done.stderr
    assert "575.51.03: that is an NVIDIA driver's version" in done.stderr, done.stderr
    done = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", "12.10")
    assert "driver's version" not in done.stderr and "no such bundle" in done.stderr


def test_a_linked_fifo_is_refused_though_a_header_is_unkeyed_first(warm, tmp_path: Path) -> None:
    """The batch refuses a build whose key's reason starts `NO_FILE`, but a digest kept only its
    first reason: a kernel including a header over 4 MB (unkeyed: 'scanned in part') and
    naming a FIFO as its linker script (`-Wl,-T,`) had the header's reason, so cc started and
    ld waited until `--compile-timeout` ('did not finish'). Now the FIFO's reason is kept."""
    folder = tmp_path / "inc"
    folder.mkdir()
    (folder / "big.h").write_text(("/* " + "x" * 1000 + " */\n") * 4300)  # past 4 MB
    os.mkfifo(fifo := folder / "fifo.ld")
    workload = tmp_path / "including.py"
    options = (f"-I{folder}", f"-Wl,-T,{fifo}")
    workload.write_text(INCLUDING.format(header="big.h", options=options))
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "--compile-timeout", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"is no regular file: {fifo} is a FIFO" in done.stderr, done.stderr
    assert "did not finish" not in done.stderr


@pytest.mark.parametrize("named", ["-lfoo", "-l:libfoo.a", "script"])
def test_a_fifo_library_a_dash_l_finds_is_refused(warm, tmp_path: Path, named: str) -> None:
    """94aa6964 refused a FIFO a kernel links by its path and left one `-l` finds in a `-L`
    folder (the library search kept `os.path.isfile`): `-L lib -lfoo` with `lib/libfoo.a` a
    FIFO started cc and ld waited until `--compile-timeout` ('did not finish'); so did a linker
    script it links whose `INPUT(...)` names a FIFO. Now each is refused before cc starts,
    naming the FIFO."""
    (folder := tmp_path / "lib").mkdir()
    os.mkfifo(fifo := folder / "libfoo.a")
    options = (f"-L{folder}", named)
    if named == "script":  # an implicit linker script, linked by its path
        (script := folder / "extra.ld").write_text(f"INPUT({fifo})\n")
        options = (str(script),)
    workload = tmp_path / "including.py"
    workload.write_text(INCLUDING.format(header="stddef.h", options=options))
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "--compile-timeout", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"is no regular file: {fifo} is a FIFO" in done.stderr, done.stderr
    assert "did not finish" not in done.stderr
