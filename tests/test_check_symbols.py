"""`warm check` finds a host kernel whose symbol its binary does not export.

A row naming a symbol its shared object lacks was found only when a production process
served it (`dlsym` failed, the kernel was rebuilt): `warm check` reads the binary's
dynamic symbol table (`warmcli.backends.host.binary.exported_symbols`) and reports it as
an entry that would miss, with the reason. The bundle is made by the real `warm run`
and its row tampered in the real SQLite file.
"""

from __future__ import annotations

import json
import sqlite3
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.host.binary import exported_symbols

GONE = "row_sum_gone"  # an entry no binary defines: the row's symbol, warm's form for its key


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


def test_a_symbol_the_binary_lacks_is_not_servable(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "sym.warm"
    proc = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert warm("check", bundle).returncode == 0
    with sqlite3.connect(bundle) as conn:
        kernels = conn.execute("SELECT count(*), count(DISTINCT sha256) FROM kernels").fetchone()
        assert kernels[0] > kernels[1]  # kernels share binaries: each is judged by its own symbol
        key, label = conn.execute(
            "SELECT key, label FROM kernels WHERE entry = 'row_sum'"
        ).fetchone()
        missing = f"warm_{key[:16]}_{GONE}"
        conn.execute(  # its components name its entry as the row does (else corrupt)
            "UPDATE kernels SET entry = ?, symbol = ?, "
            "components = json_set(components, '$.entry', ?) WHERE key = ?",
            (GONE, missing, GONE, key),
        )
    proc = warm("check", bundle, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (miss,) = json.loads(proc.stdout)["unservable"]
    assert (miss["kind"], miss["key"], miss["reason"]) == ("kernel", key, "binary")
    assert f"does not export {missing}" in miss["detail"]
    text = warm("check", bundle)
    assert text.returncode == 1
    assert "1 not servable here" in text.stdout and missing in text.stdout
    assert label in text.stdout


def test_the_symbol_reader_is_bounded_by_the_binary(tmp_path: Path) -> None:
    """A real shared object's exported names; cut short or overwritten anywhere, the reader
    answers None or names, never an exception."""
    source, library = tmp_path / "k.c", tmp_path / "k.so"
    source.write_text(
        "void warm_k(void) {}\nstatic void hidden(void) {}\nvoid (*keep)(void) = hidden;\n"
    )
    subprocess.run(["cc", "-shared", "-fPIC", "-s", "-o", library, source], check=True)
    data = library.read_bytes()
    names = exported_symbols(data)
    assert names is not None and "warm_k" in names and "hidden" not in names
    for cut in range(0, len(data), 97):
        exported_symbols(data[:cut])
    for at in range(0, len(data), 61):
        exported_symbols(data[:at] + b"\xff" * 8 + data[at + 8 :])


def _elf_with_names(offsets: list[int], names: bytes) -> bytes:
    """A 64-bit little-endian shared object's header and sections only: a dynamic symbol
    table of global functions named from `offsets` into the string table `names`."""
    symbol = struct.Struct("<IBBHQQ")
    symbols = bytes(24) + b"".join(symbol.pack(at, 0x12, 0, 1, 0, 0) for at in offsets)
    at_names = 64 + len(symbols)

    def section(kind: int, offset: int, size: int, link: int, entsize: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", 0, kind, 0, 0, offset, size, link, 0, 8, entsize)

    sections = bytes(64) + section(11, 64, len(symbols), 2, 24)
    sections += section(3, at_names, len(names), 0, 0)
    at_sections = at_names + len(names)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, at_sections, 0, 64, 56, 0, 64, 3, 2)
    return header + symbols + names + sections


def test_overlapping_names_cost_no_more_than_the_binary() -> None:
    """A hostile bundle's binary whose symbols all name long overlapping runs of its string
    table (a 1 MB binary read 3 GB of names in 10 s): the reader gives up (None) once the
    names it read outgrow the table, so its time and memory stay bounded by the binary."""
    assert exported_symbols(_elf_with_names(list(range(300)), b"A" * 100_000 + b"\0")) is None
    shared = _elf_with_names([1, 6, 8, 10], b"\0warm_k\0g\0unterminated")  # k: warm_k's tail
    assert exported_symbols(shared) == frozenset({"warm_k", "k", "g"})
