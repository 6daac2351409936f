"""Holes hostile54 found in what warm reads beside a bundle (its home, the workload's folder and
headers, its environment, the servers it downloads from), each reproduced for real: the real CLI
(forked, `tests/forked_cli.py`), the real C compiler, real files of every kind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm as forked_warm

WARM = forked_warm  # (its fixture, `warm`, each command forked)

INCLUDING = """
from warmcli import Kernel
import numpy as np

DEVICE = "host"
SRC = ('#include "{header}"\\n'
       "void scale(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] *= 2; }}")
SCALE = Kernel(SRC, "scale", "Pi", options=("-I{folder}", *{linked!r}))

def workload(rt):
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(SCALE, x, 4)
    return x
"""


@pytest.mark.parametrize(
    ("header", "kind", "linked"),
    [
        ("fifo.h", "a FIFO", ()),
        ("zero.h", "a character device", ()),
        ("/dev/zero", "a character device", ()),
        ("/dev/null", "a FIFO", ("-Wl,-T,{folder}/fifo.h",)),  # a linker script: cc waited too
    ],
)
def test_a_header_that_is_a_fifo_or_a_device_is_refused_not_compiled(
    warm, tmp_path: Path, header: str, kind: str, linked: tuple[str, ...]
) -> None:
    """A kernel's `#include` that a search finds as a FIFO or a device: cc waited on the FIFO
    until `--compile-timeout` (600 s by default), and read `/dev/zero` (a header linked to it, or
    named by its path) until memory ran out (cc1 held 9 GB after 10 s; the key skipped both as no
    file); a FIFO named as a linker script (`-Wl,-T,`) held the linker so. Now its compile fails
    at once naming the file and what it is; no compiler starts."""
    folder = tmp_path / "inc"
    folder.mkdir()
    os.mkfifo(folder / "fifo.h")
    (folder / "zero.h").symlink_to("/dev/zero")
    workload = tmp_path / "including.py"
    linked = tuple(option.format(folder=folder) for option in linked)
    workload.write_text(INCLUDING.format(header=header, folder=folder, linked=linked))
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle, "--compile-timeout", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    shown = done.stderr
    named = str(folder / header) if not header.startswith("/") else header
    named = f"{folder}/fifo.h" if linked else named
    said = "not compiled: a file it reads (a header, or one it links) is no regular file"
    assert f"{said}: {named} is {kind}" in shown, shown
    assert "did not finish" not in shown and "Traceback" not in shown, shown


@pytest.mark.parametrize("folder", ["", "/tmp/"])
def test_a_trusted_key_named_past_a_file_name_s_length_is_refused_in_one_short_line(
    warm, tmp_path: Path, folder: str
) -> None:
    """A `WARM_TRUSTED_KEYS` entry of 100,000 characters: `Path.is_dir` raised `File name too
    long` (it ignores only a missing file), and warm printed the system's words with the whole
    name, `warm: error: [Errno 36] File name too long: '9999...'`, 100,047 characters on the
    terminal (a key file named so, its 'cannot read key' alike). Now the key's own error, its
    name cut short; nothing is checked against a key never read."""
    named = folder + "9" * 100_000
    done = warm.with_env(WARM_TRUSTED_KEYS=named)("check", tmp_path / "none.warm")
    assert done.returncode == 2 and not done.stdout, done.stderr[:300]
    line = done.stderr.strip()
    assert "\n" not in line and len(line) < 700 and "Errno" not in line, line[:300]
    assert "cannot read key: File name too long" in line and "100,0" in line, line


def test_a_compiler_silent_on_version_is_waited_for_once_a_process(tmp_path: Path) -> None:
    """A `WARM_CC` (or nvcc) that never answers `--version`: its probe timed out (60 s) but its
    failure was not kept, so each look at the toolchain asked again and waited again (`warm run`
    of the quick start's one kernel: 120.9 s, now 60.8 s). A real script that hangs,
    counting its starts: asked twice it starts once while its file keeps its stamp; once it is
    rewritten it is asked again."""
    import time

    from warmcli.backends.version_line import version_line
    from warmcli.errors import ToolchainError

    starts = tmp_path / "starts"
    cc = tmp_path / "silent-cc"
    cc.write_text(f"#!/bin/sh\necho started >> {starts}\nexec sleep 30\n")
    cc.chmod(0o755)
    for _ in range(2):
        with pytest.raises(ToolchainError, match=r"did not answer --version within 0\.3 s"):
            version_line("cc", str(cc), 0.3)
    assert starts.read_text().count("started") == 1
    time.sleep(0.01)
    cc.write_text(cc.read_text() + "\n")  # another stamp: asked again
    with pytest.raises(ToolchainError, match="did not answer"):
        version_line("cc", str(cc), 0.3)
    assert starts.read_text().count("started") == 2


EDITING = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
SRC = '#include "t.h"\\nvoid scale(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] *= K; }}'
SCALE = Kernel(SRC, "scale", "Pi", options=("-I{folder}",))

def workload(rt):
    runs = {folder!r} + "/runs"
    with open(runs, "a") as fh:
        fh.write("run\\n")
    with open(runs) as fh:
        n = 1 + len(fh.read().splitlines())  # 2, 3, 4: pass 1's, pass 2's, verify's
    with open({folder!r} + "/t.h", "w") as fh:
        fh.write(f"#define K {{n}}\\n")
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(SCALE, x, 4)
    return x
"""

SERVE = """
import json, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
from editing import SCALE
rt = warmcli.runtime("host")
x = rt.upload(np.arange(4, dtype=np.float32))
rt.launch(SCALE, x, 4)
print(json.dumps(rt.read(x).tolist()))
"""


def test_a_header_edited_between_a_kernel_s_key_and_its_compile_is_never_stored(
    warm, tmp_path: Path
) -> None:
    """A header edited while `warm run` ran (a `git checkout`; here the workload itself writes
    `#define K 2`, then 3 in the next pass): pass 1 keyed the kernel by `K 2` and queued it, pass
    2 compiled it reading `K 3`, and the bundle stored that build under `K 2`'s key. A process
    whose header says `K 2` was served it: [0, 3, 6, 9] where its own build computes [0, 2, 4,
    6]. Now a build whose headers, read again once it is built, no longer give its key is never
    stored (the run says why), and such a process builds its own."""
    folder = tmp_path / "inc"
    folder.mkdir()
    workload = tmp_path / "editing.py"
    workload.write_text(EDITING.format(folder=str(folder)))
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert "Traceback" not in done.stderr, done.stderr
    (folder / "t.h").write_text("#define K 2\n")
    served = Warm(warm.env).production(SERVE, tmp_path, bundle=bundle)
    assert served == [0.0, 2.0, 4.0, 6.0]
    assert "changed between its key and its compile" in done.stdout, done.stdout[-2000:]
