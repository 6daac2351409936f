"""perf37: the cheaper checks of a served kernel row accept and refuse what the
field-by-field checks do (`warmcli.bundle.kernel_row`)."""

from __future__ import annotations

import itertools
import json

import pytest

from warmcli.bundle.kernel_row import (
    _NAMES_MATCH,
    _checked_kernel_record,
    _kernel_record,
    _Malformed,
)
from warmcli.bundle.rows import _HEX64, _IDENTIFIER, _SYMBOL, MAX_NAME_CHARS
from warmcli.kernel_parts import key_of

HEX = "0123456789abcdef" * 4
TRICKY = ("", "a", "_", "9a", "a\x00", "\x00", HEX, HEX + "\x00", f"warm_{HEX[:16]}_k", "é")


def test_names_match_the_four_patterns_whatever_the_other_names_hold() -> None:
    for key, sha, entry, symbol in itertools.product(TRICKY, repeat=4):
        each = all(
            p.fullmatch(v)
            for p, v in ((_HEX64, key), (_HEX64, sha), (_IDENTIFIER, entry), (_SYMBOL, symbol))
        )
        for rest in (("host",), ("", "\x00", "a\x00b", HEX)):
            joined = "\x00".join((key, sha, entry, symbol, *rest))
            assert bool(_NAMES_MATCH(joined)) == each, (key, sha, entry, symbol, rest)


def _row(**changed: object) -> tuple[object, ...]:
    """A kernel row as warm writes it (prefetched: its rowid last), with `changed` fields."""
    tool, arch, content = "cc:gcc 12 [warm build recipe 3]", "x86_64", "ab" * 32
    key = key_of(content, arch, "", tool)
    fields: dict[str, object] = {
        "key": key, "device": "host", "backend": "host", "arch": arch, "entry": "touch",
        "label": "touch[V=0]", "symbol": f"warm_{key[:16]}_touch", "sha256": "cd" * 32,
        "toolchain": tool, "compile_log": "", "seconds": 0.5, "size": 100,
    }  # fmt: skip
    components = {"arch": arch, "entry": "touch", "kernel": content, "toolchain": tool}
    fields.update(changed)  # its components as warm wrote them (a changed field differs)
    comps = json.dumps(components, sort_keys=True)
    order = ("key", "device", "backend", "arch", "entry", "label", "symbol", "sha256")
    return (
        *(fields[n] for n in order), fields["toolchain"], comps,
        fields["compile_log"], fields["seconds"], fields["size"], 7,
    )  # fmt: skip


def _outcome(row: tuple[object, ...], keyed: bool) -> object:
    try:
        return _kernel_record(row, keyed)
    except _Malformed as exc:
        return f"refused: {exc}"


def _by_fields(row: tuple[object, ...]) -> object:
    try:
        return _checked_kernel_record(row)
    except _Malformed as exc:
        return f"refused: {exc}"


@pytest.mark.parametrize("keyed", [False, True])
def test_a_row_is_parsed_as_the_field_by_field_checks_parse_it(keyed: bool) -> None:
    near = "t" * (MAX_NAME_CHARS - 40)  # each name within its limit, together over it
    rows = [
        _row(),
        _row(device=near, backend=near),
        _row(device="d" * (MAX_NAME_CHARS + 1)),
        _row(device=b"host"),
        _row(backend=None),
        _row(arch=5),
        _row(toolchain=b"cc"),
        _row(entry="not an identifier"),
        _row(sha256=HEX.upper()),
        _row(label=b"x"),
        _row(device="ho\x00st"),
        _row(label="l" * 3000, compile_log="w" * 3000),
    ]
    for row in rows:
        assert _outcome(row, keyed) == _by_fields(row), row[:9]
    assert not isinstance(_outcome(rows[1], keyed), str)  # long names, each within: served
    assert "device" in str(_outcome(rows[3], keyed))  # the field named, as before


def test_a_dtype_is_named_as_numpy_names_it() -> None:
    import numpy as np

    from warmcli.backends.base import dtype_name

    for code in np.typecodes["All"] + "?":
        for order in ("", "<", ">", "=", "|"):
            try:
                found = np.dtype(order + code)
            except TypeError:
                continue
            assert dtype_name(found) == found.name, order + code
    for given in (np.longlong, np.intc, np.bool_, np.longdouble, np.clongdouble, int, bool):
        assert dtype_name(np.dtype(given)) == np.dtype(given).name


def test_a_prefetched_row_is_counted_as_its_values_hold() -> None:
    from warmcli.bundle.kernel_row import _chars, stepped

    texts = tuple("é" * n for n in range(11))
    for row in (
        (*texts, 0.5, 10, 1),
        (*texts[:10], b"\x00" * 7, 0.5, 10, 1),
        (*texts[:3], None, *texts[4:], 2, None, 1),
        (*texts[:9], 12345, "x", 0.5, 10, 1),
    ):
        got: list[tuple[object, ...]] = []
        texts_only = all(type(v) is str for v in row[:11]) and type(row[11]) is float
        counted = sum(map(len, row[:11])) if texts_only else _chars(row)  # (with the numbers)
        assert stepped([row], 0, 10**9, got) == (counted, False)
        assert got == [row]
