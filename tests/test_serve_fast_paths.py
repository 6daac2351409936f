"""The per-kernel serving path's fast forms give what their plain forms give (issue 16).

Keys are stored in bundles, so a kernel's content hash written directly must be the
digest the JSON encoder writes, byte for byte, whatever the kernel holds.
"""

from __future__ import annotations

import contextlib

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.kernel import Kernel, _digest, kernel_key

KERNELS = [
    Kernel("void f(int *p) { p[0] = 1; }", "f", "P"),
    Kernel('void g(){ "é\\n\t\x01" }', "g", "Pi", options=["-O2", '-DX="y"']),
    Kernel("s", "h", defines={"A": 1, "B": 'x"y', "C": True, "D": "ü"}, name="n"),
    Kernel("s", "h", language="cuda", options=("-lineinfo",)),
    Kernel("x" * 20000 + 'é"', "big", "Pi", defines={"V": 'q"ü'}),  # one define; a long source
]


@pytest.mark.parametrize("kernel", KERNELS, ids=range(len(KERNELS)))
def test_content_hash_is_the_json_digest(kernel: Kernel) -> None:
    assert kernel.content_hash == _digest(kernel._content())


@pytest.mark.parametrize("kernel", KERNELS, ids=range(len(KERNELS)))
def test_kernel_key_is_the_json_digest_twice_over(kernel: Kernel) -> None:
    """Keyed twice (the second time from the texts quoted once), as the JSON encoder keys."""
    for _ in range(2):
        for arch, toolchain in (("x86_64", "cc:gcc 12"), ("sm_90", 'nvcc:"é" 13.0')):
            wanted = _digest({"arch": arch, "kernel": kernel.content_hash, "toolchain": toolchain})
            assert kernel_key(kernel, arch, toolchain) == wanted


def _row(**changes: object) -> tuple[object, ...]:
    fields = {
        "key": "a" * 64,
        "device": "host",
        "backend": "host",
        "arch": "x86_64",
        "entry": "touch",
        "label": "touch[V=1]",
        "symbol": "warm_aaaaaaaaaaaaaaaa_touch",  # warm's symbol of its entry under its key
        "sha256": "b" * 64,
        "toolchain": "cc:gcc 12",
        "components": '{"arch": "x86_64", "defines": "[[\\"V\\", \\"1\\"]]", "toolchain": "cc"}',
        "compile_log": "",
        "seconds": 0.25,
        "size": 100,
    }
    fields.update(changes)
    return (*fields.values(), None)


@pytest.mark.parametrize(
    "components",
    [
        '{"a": "b"}',
        ' {"a": "b"} ',  # what json.loads accepts, the long way
        '{"a": 1, "b": null, "c": [1]}',  # values become text
        "{}",
    ],
)
def test_kernel_record_fast_path_is_the_checked_one(components: str) -> None:
    from dataclasses import fields

    from warmcli.bundle.kernel_row import _checked_kernel_record, _kernel_record

    row = _row(components=components)
    fast, checked = _kernel_record(row), _checked_kernel_record(row)
    assert fast == checked
    assert list(vars(fast)) == [f.name for f in fields(fast)]  # every field, in order
    assert all(type(v) is str for v in fast.components.values())


@pytest.mark.parametrize(
    "changes",
    [
        {"key": b"a" * 64}, {"sha256": 7}, {"device": None}, {"label": 1.5}, {"label": b"x"},
        {"components": b"{}"}, {"compile_log": 0}, {"seconds": 1}, {"seconds": float("nan")},
        {"seconds": -1.0}, {"size": True}, {"size": 1.0}, {"size": -1}, {"size": None},
        {"symbol": "warm_aaaaaaaaaaaaaaaa_t\n"}, {"entry": "1x"},
        {"symbol": "warm_0123456789abcdef_touch"}, {"entry": "other"},
        {"arch": "compute_90", "symbol": "warm_0123456789abcdef_touch"}, {"arch": "x" * 5000},
        {"label": "x" * ((4 << 20) + 1)}, {"components": '{"a": 1.5, "b": "c"}'},
    ],
)  # fmt: skip
def test_kernel_record_fast_path_checks_every_field_as_the_checked_one(
    changes: dict[str, object],
) -> None:
    """A row off the form warm writes (a field of another type, out of its bounds, another
    form) gives what the field-by-field path gives: the same record, or the same refusal;
    prefetched (its rowid where the over-limit column is) or read by its key alike."""
    from warmcli.bundle.kernel_row import _checked_kernel_record, _kernel_record
    from warmcli.bundle.rows import _Malformed

    by_key = _row(**changes)
    for row in (by_key, (*by_key[:-1], 7)):
        outcomes = []
        for parse in (_kernel_record, _checked_kernel_record):
            try:
                outcomes.append(parse(row))
            except _Malformed as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], changes


@pytest.mark.parametrize("components", ["[]", '{"a": "b"} x', "{", "", '"a"', "{'a': 1}"])
def test_kernel_record_refuses_components_that_are_no_json_object(components: str) -> None:
    from warmcli.bundle.kernel_row import _kernel_record
    from warmcli.bundle.rows import _Malformed

    with pytest.raises(_Malformed):
        _kernel_record(_row(components=components))


def _set_column(path, column: str, value: object, key: str) -> None:
    """Set one column of the kernel row under `key` in the bundle file at `path`."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"UPDATE kernels SET {column} = ? WHERE key = ?", (value, key))


def _stored(path, arches: list[str]) -> list:
    """A new bundle at `path` of one host kernel row for each of `arches`; their records."""
    from warmcli.bundle.store import Bundle
    from warmcli.records import KernelRecord

    records = [
        KernelRecord(f"{i:064x}", "host", "host", arch, "touch", f"touch[{i}]",
                     f"warm_{i:064x}"[:21] + "_touch", f"{i:064x}", "cc:gcc",
                     {"toolchain": "cc:gcc"})
        for i, arch in enumerate(arches, 1)
    ]  # fmt: skip
    with Bundle.create(path) as bundle:
        bundle.put([(r, b"\0" * i) for i, r in enumerate(records, 1)])
    return records


def test_a_prefetched_row_is_the_row_read_by_key(tmp_path) -> None:
    """`kernel_rows` reads values as they are (its rows' values are bounded): what it hands
    `Bundle.kernel` is what `KERNEL_SELECT` reads by key (less its rowid and the over-limit
    column), an oversized name included, which both refuse alike, in the same words."""

    from warmcli.bundle.rows import KERNEL_SELECT, MAX_NAME_CHARS
    from warmcli.bundle.store import Bundle
    from warmcli.errors import BundleError

    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 3)
    _set_column(path, "toolchain", "t" * (MAX_NAME_CHARS + 1), records[1].key)
    with Bundle.open(path) as bundle:
        rows = bundle.kernel_rows("host", "x86_64")
        assert len(rows) == 3
        for record in records:
            by_key = bundle._one(f"{KERNEL_SELECT} WHERE key = ?", (record.key,))
            assert by_key is not None
            if by_key[-1] is None:  # the over-limit column: prefetched rows have their rowid
                assert rows[record.key][:-1] == by_key[:-1]
                assert bundle.kernel(record.key, rows) == bundle.kernel(record.key)
            else:
                refusals = []
                for fetched in (rows, None):
                    with pytest.raises(BundleError, match="toolchain") as refused:
                        bundle.kernel(record.key, fetched)
                    refusals.append(str(refused.value))
                assert refusals[0] == refusals[1]  # named alike, prefetched or read by key


def test_prefetch_chunks_resumed_by_rowid_are_those_by_offset(tmp_path) -> None:
    """A chunk that starts where the last one ended starts after its rowid: the rows are
    those the same chunk by offset reads (another open bundle, which has no last chunk)."""
    from warmcli.bundle.store import Bundle

    path = tmp_path / "b.warm"
    _stored(path, ["x86_64" if i % 3 else "other" for i in range(1, 40)])
    with Bundle.open(path) as chunked:
        start = 0
        for count in (8, 9, 18, 36):
            got = chunked.kernel_rows("host", "x86_64", start, count)
            with Bundle.open(path) as other:
                assert got == other.kernel_rows("host", "x86_64", start, count)
            start += count
        assert chunked._resume  # the chunks after the first were resumed


def test_no_prefetched_value_is_long_whatever_its_column(tmp_path) -> None:
    """A prefetched row holds no long value, in any column (`seconds` too, which no text
    bound counted): a row holding one is left out of the chunk and read by its key when
    asked for (refused there, as malformed); the rows before it are prefetched."""
    import sqlite3

    from warmcli.bundle.kernel_row import PREFETCH_VALUE_BYTES
    from warmcli.bundle.store import Bundle
    from warmcli.errors import BundleError

    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 4)
    conn = sqlite3.connect(path)
    with conn:  # a blob a hundred times the bound where a number belongs
        conn.execute(
            "UPDATE kernels SET seconds = zeroblob(?) WHERE key = ?",
            (100 * PREFETCH_VALUE_BYTES, records[2].key),
        )
    conn.close()
    with Bundle.open(path) as bundle:
        rows = bundle.kernel_rows("host", "x86_64")
        assert records[2].key not in rows
        assert records[0].key in rows  # (the row before it is stepped with it: by key too)
        assert all(len(v) <= PREFETCH_VALUE_BYTES for r in rows.values() for v in r[:12]
                   if isinstance(v, str | bytes))  # fmt: skip
        with pytest.raises(BundleError, match="seconds"):
            bundle.kernel(records[2].key, rows)


def test_a_chunk_naming_many_blobs_has_every_size(tmp_path) -> None:
    """A chunk naming more blobs than one JSON array of their sha256s could hold under the
    prefetch's value limit (a CUDA bundle: a blob a kernel) has each row's blob size, as
    `Bundle.kernel` reads it by key."""
    from warmcli.bundle.kernel_row import PREFETCH_VALUE_BYTES
    from warmcli.bundle.store import Bundle

    many = PREFETCH_VALUE_BYTES // 64 + 1  # their sha256s alone are longer than the limit
    records = _stored(tmp_path / "b.warm", ["x86_64"] * many)
    with Bundle.open(tmp_path / "b.warm") as bundle:
        rows = bundle.kernel_rows("host", "x86_64")
        assert len(rows) == many
        assert all(rows[r.key][12] == i for i, r in enumerate(records, 1))  # its blob's size
        assert all(bundle.kernel(r.key, rows) == bundle.kernel(r.key) for r in records[::97])


# Python frames a served kernel's first launch runs, at most, launch included (issue 16):
# 39.8 at 53a714c, 33.8 since (a few prefetches shared over the 63 counted), 34.9 since the
# hit table holds its kernel weakly (`warmcli.runtime.hits.put_hit`, one call: a script re-run
# in one process no longer keeps every kernel object it ever launched), 35.06 since each read
# judges a `-wal` or `-journal` planted beside the bundle after its open (`RowReader._settle`,
# one frame a read, a few reads shared over the 63: a link's file was written, a FIFO hung).
SERVED_FRAMES = 35.5


def test_a_served_first_launch_runs_few_python_frames(warm, tmp_path) -> None:
    """A kernel served from a bundle (`warm run` made it) costs its first launch at most
    `SERVED_FRAMES` Python frames, launch included: no frame made for a statistics
    registration nobody asks for, a ledger's lock, a kernel's options it has none of."""
    from bench.generated import write

    workload, bundle = write(tmp_path / "gen.py", 64), tmp_path / "b.warm"
    # One job: one shared object for the 64 (loaded at the first launch), on any machine.
    assert warm("run", workload, "--bundle", bundle, "-q", "-j", "1").returncode == 0
    code = """if True:
        import json, runpy, sys
        from warmcli import production
        kernels = runpy.run_path(sys.argv[1])["KERNELS"]
        production.use_bundle(sys.argv[2])
        rt = production.runtime("host")
        buffer = rt.buffer(4, "int32")
        rt.launch(kernels[0], buffer, 1)  # once per process: a blob, a prototype, a query
        frames = [0]
        def count(frame, event, arg):
            frames[0] += event == "call"
        sys.setprofile(count)
        for kernel in kernels[1:]:
            rt.launch(kernel, buffer, 1)
        sys.setprofile(None)
        from warmcli.execution.process_mode import default_collector
        stats = default_collector().reader().compilation
        print(json.dumps({"frames": frames[0] / (len(kernels) - 1), "loaded": stats.loaded}))
    """
    got = warm.production(code, workload, bundle)
    assert got["loaded"] == 64
    assert got["frames"] <= SERVED_FRAMES, got


def test_variants_of_one_source_scan_it_for_absolute_includes_once(monkeypatch) -> None:
    """A kernel's first key asks whether its source includes a header by its absolute path
    (`Kernel.reads_headers`); the answer is its source's, so the served variants of one
    source (3,200 of a 9 kB one: 45 us each, measured) scan that text once, not each."""
    import warmcli.kernel as kernel_module

    scans = []
    pattern = kernel_module._ABSOLUTE_INCLUDE

    class Counting:
        def search(self, text: str) -> object:
            scans.append(len(text))
            return pattern.search(text)

    monkeypatch.setattr(kernel_module, "_ABSOLUTE_INCLUDE", Counting())
    monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {"nvrtc": ("", "")})
    for name in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):  # whatever CPATH here
        monkeypatch.delenv(name, raising=False)
    body = "\n".join(f"float h{i}(float x) {{ return x * {i}.0f; }}" for i in range(99))
    for language, toolchain, head in (
        ("cuda", "nvrtc:12.8", '#include <cuda_fp16.h>\nextern "C" __global__ '),
        ("c", "cc:gcc 12", "#include <math.h>\n"),
    ):
        source = f"{body}\n{head}void f(float *a) {{ a[0] = V; }}\n"
        scans.clear()
        for v in range(64):
            kernel = Kernel(source, "f", "P", language=language, defines={"V": v})
            wanted = {"arch": "sm_90", "kernel": kernel.content_hash, "toolchain": toolchain}
            assert kernel_key(kernel, "sm_90", toolchain) == _digest(wanted)
        assert len(scans) <= 1, (language, len(scans))


def test_a_long_compile_log_leaves_its_row_out_and_the_prefetch_goes_on(tmp_path) -> None:
    """A row SQLite will not hand back whole (a warm-written compile log may run to 4 MB, past
    what a prefetched value may be) is read by its key when asked for; the chunk still holds
    as many rows as asked for, from the rows after it, so the prefetch goes on."""

    from warmcli.bundle.kernel_row import PREFETCH_VALUE_BYTES
    from warmcli.bundle.store import Bundle

    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 10)
    _set_column(path, "compile_log", "warning: w\n" * (PREFETCH_VALUE_BYTES // 5), records[4].key)
    with Bundle.open(path) as bundle:
        first = bundle.kernel_rows("host", "x86_64", 0, 5)
        second = bundle.kernel_rows("host", "x86_64", 5, 5)
        assert len(first) == 5 and records[4].key not in first  # full: more may follow
        fetched = {**first, **second}
        assert records[4].key not in fetched and records[9].key in fetched
        assert len(fetched) >= 8  # every row but the long one (and the one stepped with it)
        long = bundle.kernel(records[4].key, fetched)  # by its key, whole
        assert long is not None and long.compile_log.startswith("warning: w")


def test_the_row_stepped_before_a_long_one_is_prefetched(tmp_path) -> None:
    """SQLite's refusal of a row too long to hand back comes as the row before it is handed
    out (Python's cursor steps one ahead): that row, a good one, is still prefetched (read
    alone), so only the long row is read by its key."""
    import sqlite3

    from warmcli.bundle.kernel_row import PREFETCH_VALUE_BYTES
    from warmcli.bundle.store import Bundle

    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 10)
    conn = sqlite3.connect(path)
    with conn:  # long compile logs: the first row's and the fifth's
        for bad in (0, 4):
            conn.execute(
                "UPDATE kernels SET compile_log = ? WHERE key = ?",
                ("warning: w\n" * (PREFETCH_VALUE_BYTES // 5), records[bad].key),
            )
    conn.close()
    good = {r.key for i, r in enumerate(records) if i not in (0, 4)}
    with Bundle.open(path) as bundle:
        first = bundle.kernel_rows("host", "x86_64", 0, 5)
        second = bundle.kernel_rows("host", "x86_64", 5, 5)
        assert len(first) == 5 and set(first) | set(second) == good
        assert all(bundle.kernel(k, first) for k in first)


def test_another_devices_row_holding_a_long_name_leaves_the_prefetch_going(tmp_path) -> None:
    """A row of another device whose architecture is past what a prefetched value may be
    (a hostile or damaged bundle) is passed over by the prefetch, as a row of this device
    is: the rows after it are prefetched; the chunk was a `BundleError`, so a serving
    process missed every kernel, each explained as corrupt."""

    from warmcli.bundle.kernel_row import PREFETCH_VALUE_BYTES
    from warmcli.bundle.store import Bundle

    path = tmp_path / "b.warm"
    records = _stored(path, ["x86_64"] * 6)
    _set_column(path, "arch", "a" * (PREFETCH_VALUE_BYTES + 1), records[2].key)
    good = {r.key for r in records} - {records[2].key}
    with Bundle.open(path) as bundle:
        assert set(bundle.kernel_rows("host", "x86_64", 0, 6)) == good
