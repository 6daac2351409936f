"""review38c: what today's later merges key, refuse and explain, tried as a user and an attacker.

A host kernel's options `-MD` or `-MMD` (no value: cc names the dependency file itself)
followed by an object it links: the object was read as `-MD`'s value, so it was not keyed
and a rebuilt object was served the old build. An assembler reading a file spelled
`.INCBIN` (the assembler reads directives in any case) or with an escaped tab before its
name (`.incbin\\t\\"file\\"`) was not refused: an edited file was served the old build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_keyprop38 import (
    INCBIN_WORKLOAD,
    WORKLOAD,
    _forking,  # noqa: F401  (`_serve`'s servers, ended with this module too)
    _object,
    _serve,
)


@pytest.mark.parametrize("flag", ["-MD", "-MMD"])
def test_an_object_after_a_dependency_flag_without_value_is_keyed(
    warm: Warm, tmp_path: Path, flag: str
) -> None:
    """`-MD /opt/lib/helper.o`: cc's `-MD` takes no value (`-Wp,-MD,file` does), so the
    object is linked and its content is in the key: rebuilt, it is a miss."""
    obj = _object(tmp_path / "lib", 2)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr((flag, str(obj)))))
    bundle = tmp_path / "b.warm"
    run = warm("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _serve(warm, workload, bundle) == {"values": [0.0, 2.0, 4.0, 6.0], "compiled": 0}
    _object(tmp_path / "lib", 3)  # the same path, other code
    served = _serve(warm, workload, bundle)
    assert served["values"] == [0.0, 3.0, 6.0, 9.0], served


@pytest.mark.parametrize("directive", ['.INCBIN \\\\"', '.incbin\\\\t\\\\"', '.IncBin  \\\\"'])
def test_a_file_read_by_an_assembler_directive_in_any_spelling_is_refused(
    warm: Warm, tmp_path: Path, directive: str
) -> None:
    table = tmp_path / "table.bin"
    table.write_bytes(bytes([2] * 8))
    workload = tmp_path / "w.py"
    text = INCBIN_WORKLOAD.replace('.incbin \\\\"', directive).replace("TABLE", str(table))
    assert directive in text
    workload.write_text(text)
    run = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "its assembly reads a file (.incbin, .include)" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "spelling",
    ["-Wl,-L{d}|-Wl,-u,helper|-lhelper", "-Xlinker|-L{d}|-Wl,-u,helper|-lhelper",
     "-L{d}|-Wl,-u,helper|-Wl,-lhelper", "-L{d}|-Wl,-u,helper|-Xlinker|-lhelper",
     "-Wl,--library-path={d},-u,helper,--library=helper"],
)  # fmt: skip
def test_a_library_found_through_a_folder_or_name_given_to_the_linker_is_keyed(
    warm: Warm, tmp_path: Path, spelling: str
) -> None:
    """`-Wl,-L/opt/lib -lhelper` (or `-Wl,-lhelper`): the linker searches that folder as it
    does `-L`'s, so the archive it finds there is keyed by content: rebuilt, it is a miss."""
    obj = _object(tmp_path / "lib", 2)
    workload = tmp_path / "w.py"
    options = tuple(spelling.format(d=obj.parent).split("|"))
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(options)))
    bundle = tmp_path / "b.warm"
    run = warm("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _serve(warm, workload, bundle) == {"values": [0.0, 2.0, 4.0, 6.0], "compiled": 0}
    _object(tmp_path / "lib", 3)
    served = _serve(warm, workload, bundle)
    assert served["values"] == [0.0, 3.0, 6.0, 9.0], served


COMMENTED = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel(
    "/* the table is inlined: never read with .incbin \\"table.bin\\" */\\n"
    "// nor .include \\"table.s\\"\\n"
    'void f(float *o, int n) { const char *s = "/*"; for (int i = 0; i < n; i++) o[i] = s[0]; }\\n',
    "f", "Pi",
)

def workload(rt):
    rt.launch(K, rt.buffer(4, "float32"), 4)
"""


def test_a_comment_naming_an_assembler_directive_is_no_refusal(warm: Warm, tmp_path: Path) -> None:
    """A C comment that mentions `.incbin "file"` reads no file: the kernel is warmed."""
    workload = tmp_path / "w.py"
    workload.write_text(COMMENTED)
    run = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_directive_after_a_comment_opener_in_a_string_is_still_refused(
    warm: Warm, tmp_path: Path
) -> None:
    """`"/*"` in a string literal opens no comment: an `.incbin` after it is refused."""
    table = tmp_path / "table.bin"
    table.write_bytes(bytes([2] * 8))
    workload = tmp_path / "w.py"
    text = INCBIN_WORKLOAD.replace("__asm__(", 'static const char *o = "/*";\\n__asm__(', 1)
    text = text.replace("TABLE", str(table)).replace("o[i] = tbl[i]; }", "o[i] = tbl[i]; } /* */")
    workload.write_text(text)
    run = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "its assembly reads a file (.incbin, .include)" in run.stderr, run.stderr
