"""Hostile and foreign bundles: fuzzed with hypothesis, then a handful through the real CLI.

The library must answer every file with a typed `BundleError` (one line) or with
records that hold what warm writes, and it must never serve a binary that does
not match its sha256: random bytes, an SQLite header over junk, a real bundle
truncated or with bytes flipped, the wrong schema or version, rows whose fields
have the wrong type, size or format. A bundle built by another toolchain, on
another device, or with a binary for another architecture is not served: the
entries are skipped and reported, and the kernels rebuilt. The CLI gives one
line and exit 2 for the corrupt ones, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Warm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_explain import fake_cc

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.bundle import core as bundle_module
from warmcli.bundle import rows as rows_module
from warmcli.bundle.file import PAGE_BYTES, SQLITE_MAGIC
from warmcli.bundle.rows import MAX_NAME_CHARS, MAX_TEXT_CHARS
from warmcli.bundle.store import Bundle, BundleError
from warmcli.records import tune_key

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PER_MILLE = 1000  # positions in a file, in thousandths of its length
CASES: Counter[str] = Counter()  # examples tried, per test (printed at the end with -s)

K = Kernel("void inc(float *x) { x[0] += 1.0f; }", "inc", "P")
OP = Tunable(
    "fz",
    {f"r{r}": Kernel(f"void fz(float *x) {{ x[0] += {r}.0f; }}", "fz", "P") for r in (1, 2)},
    lambda rt, k, x, stream=None: rt.launch(k, x, stream=stream),
    repeats=1,
)
WORKLOAD = """\
from test_fuzz_bundle import K, OP
def workload(rt):
    x = rt.buffer(1)
    rt.launch(K, x)
    rt.tune(OP, x)
"""


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


@functools.cache
def scratch_root() -> Path:
    """One folder for every file this module writes (a copy of the template per example,
    ~300 KiB each), removed when its tests end: runs never pile them up in the temp folder."""
    return Path(tempfile.mkdtemp(prefix="warm-fuzz-"))


@pytest.fixture(scope="module", autouse=True)
def report_cases() -> Iterator[None]:
    yield
    print(f"\nfuzz cases tried: {sum(CASES.values())} {dict(CASES)}")
    if scratch_root.cache_info().currsize:
        shutil.rmtree(scratch_root(), ignore_errors=True)
        scratch_root.cache_clear()


def build(path: Path) -> None:
    """A real bundle: the kernel `K` and one tune of `OP`, on the host."""
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        x = rt.buffer(1)
        rt.launch(K, x)
        rt.tune(OP, x)
    with Bundle.open(path, write=True) as bundle:
        rt.persist(bundle)
    rt.close()


@functools.cache
def template() -> bytes:
    """The bytes of one real bundle, built once (a plain function: hypothesis shows no fixture)."""
    path = Path(tempfile.mkdtemp(dir=scratch_root())) / "b.warm"
    build(path)
    return path.read_bytes()


def scratch(data: bytes) -> Path:
    path = Path(tempfile.mkdtemp(dir=scratch_root())) / "b.warm"
    path.write_bytes(data)
    return path


def read_everything(path: Path) -> str:
    """Every read the library offers; "read" or "refused" (a one-line BundleError), else raise."""
    try:
        with Bundle.open(path) as bundle:
            bundle.manifest()
            bundle.fingerprints()
            bundle.counts()
            bundle.usage()
            bundle.tune_keys()
            list(bundle.blob_digests())
            for t in bundle.tunes():
                assert bundle.tune(t.key) == t
            for k in bundle.kernels():
                assert len(k.sha256) == 64 and len(k.entry) <= MAX_NAME_CHARS
                assert bundle.kernel(k.key) == k
                data = bundle.blob(k.sha256)
                assert hashlib.sha256(data).hexdigest() == k.sha256
    except BundleError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return "refused"
    return "read"


def serve(path: Path) -> str:
    """Run the kernel and the tune over the bundle: served right, rebuilt, or refused."""
    try:
        with Bundle.open(path) as bundle:
            rt = Runtime(HostDevice(), bundle)
            with ProcessModeOverride(ProcessMode.EXECUTE):
                x = rt.upload(np.zeros(1, dtype=np.float32))
                rt.launch(K, x)
                assert rt.read(x).tolist() == [1.0], "a wrong binary was served"
                assert rt.tune(OP, x) in ("r1", "r2")
            rt.close()
    except BundleError as exc:
        assert "\n" not in str(exc)
        return "refused"
    return "served"


@FUZZ
@given(st.one_of(st.binary(max_size=4096), st.binary(max_size=4096).map(SQLITE_MAGIC.__add__)))
def test_random_bytes_are_refused(data: bytes) -> None:
    CASES["random bytes"] += 1
    assert read_everything(scratch(data)) == "refused"


@FUZZ
@given(
    cut=st.integers(1, PER_MILLE),
    flips=st.lists(st.tuples(st.integers(0, PER_MILLE), st.integers(0, 255)), max_size=6),
)
def test_truncated_or_flipped_bundles_are_read_right_or_refused(
    cut: int, flips: list[tuple[int, int]]
) -> None:
    CASES["truncated or flipped"] += 1
    data = bytearray(template()[: max(1, len(template()) * cut // PER_MILLE)])
    for where, value in flips:
        data[min(len(data) - 1, len(data) * where // PER_MILLE)] = value
    path = scratch(bytes(data))
    read_everything(path)
    serve(path)


def schema_name_not_utf8(data: bytes) -> bytes:
    """`data` with one byte of a table's name in `sqlite_master` (page 1) made no UTF-8:
    SQLite's error then quotes the name, bytes Python cannot decode as its message."""
    flipped = bytearray(data)
    at = flipped.index(b"fingerprints", 0, PAGE_BYTES) + 5
    flipped[at] = 0x99
    return bytes(flipped)


def test_a_schema_name_that_is_no_utf8_is_refused_in_one_line() -> None:
    CASES["schema not UTF-8"] += 1  # once a flaky failure of the fuzz test above
    path = scratch(schema_name_not_utf8(template()))
    assert read_everything(path) == "refused"
    assert serve(path) == "refused"


SCHEMA_CHANGES = [
    "PRAGMA user_version = 4",
    "PRAGMA user_version = 0",
    "PRAGMA application_id = 0",
    "PRAGMA application_id = 1",
    "DROP TABLE tunes",
    "DROP TABLE blobs",
    "DROP TABLE manifest",
    "ALTER TABLE kernels RENAME COLUMN symbol TO sym",
    "ALTER TABLE tunes RENAME COLUMN candidates TO c",
    "ALTER TABLE blobs RENAME COLUMN data TO d",
    "ALTER TABLE kernels ADD COLUMN extra TEXT",
    "DROP TABLE kernels",
    "CREATE TABLE kernels (key TEXT)",
    "DROP TABLE fingerprints",
    "CREATE TABLE fingerprints (identity INTEGER)",
    "CREATE VIEW tunes2 AS SELECT 1",
]
HARMLESS = {  # no-ops (the table exists): any other change of the schema is refused
    "CREATE TABLE kernels (key TEXT)",
    "CREATE TABLE fingerprints (identity INTEGER)",
}


@FUZZ
@given(st.lists(st.sampled_from(SCHEMA_CHANGES), min_size=1, max_size=4, unique=True))
def test_wrong_schema_or_version_is_refused_or_read_right(changes: list[str]) -> None:
    CASES["wrong schema or version"] += 1
    path = scratch(template())
    conn = sqlite3.connect(path)
    for change in changes:
        with contextlib.suppress(sqlite3.Error):  # one an earlier change made moot
            conn.execute(change)
    conn.commit()
    conn.close()
    outcome = read_everything(path)
    if set(changes) - HARMLESS:
        assert outcome == "refused", changes
    serve(path)


COLUMNS = {
    "kernels": ["key", "device", "backend", "arch", "entry", "label", "symbol", "sha256",
                "toolchain", "components", "compile_log", "seconds"],
    "tunes": ["key", "operation", "shape_key", "device", "checksum", "status", "pick",
              "candidates", "seconds", "measured_at"],
    "blobs": ["sha256", "size", "data"],
    "manifest": ["key", "value"],
    "fingerprints": ["identity", "kind", "data"],
}  # fmt: skip
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.sampled_from(
        [
            "",
            "[" * 50_000,
            '{"a": ',
            "[]",
            "{}",
            '[{"name": 1}]',
            '[{"name": "r1", "status": "ok", "seconds": "nan"}]',
            '[{"name": "r1", "status": "boom"}]',
            '[{"name": "r1", "status": "ok", "samples": 5}]',
            '[{"name": "r1", "status": "ok", "seconds": 1e999}]',
            "_handle",
            "__class__",
            "warm_0000000000000000_inc",
            "A" * 64,
            "0" * 64,
            "x" * (MAX_NAME_CHARS + 1),
            "measured",
            "pending",
        ]
    ),
)


@FUZZ
@given(
    table=st.sampled_from(sorted(COLUMNS)),
    data=st.data(),
)
def test_malformed_fields_are_refused_or_never_served_wrong(
    table: str, data: st.DataObject
) -> None:
    CASES["malformed fields"] += 1
    column = data.draw(st.sampled_from(COLUMNS[table]), label="column")
    value = data.draw(HOSTILE, label="value")
    path = scratch(template())
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
        conn.commit()
    except sqlite3.Error:
        return  # the schema itself refused it (NOT NULL, a unique key)
    finally:
        conn.close()
    read_everything(path)
    serve(path)


def mutate(path: Path, *statements: tuple[str, tuple[object, ...]]) -> Path:
    conn = sqlite3.connect(path)
    for sql, params in statements:
        conn.execute(sql, params)
    conn.commit()
    conn.close()
    return path


def test_oversized_fields_and_blobs_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    CASES["oversized"] += 3
    big_log = mutate(
        scratch(template()), ("UPDATE kernels SET compile_log = ?", ("x" * (MAX_TEXT_CHARS + 1),))
    )
    assert read_everything(big_log) == "refused"
    big_name = mutate(scratch(template()), ("UPDATE tunes SET operation = ?", ("o" * 5000,)))
    assert read_everything(big_name) == "refused"
    monkeypatch.setattr(bundle_module, "MAX_LOADED_BYTES", 1000)  # a blob read (to load)
    monkeypatch.setattr(rows_module, "MAX_BLOB_BYTES", 1000)  # a row's size field
    path = scratch(template())
    [(sha,)] = sqlite3.connect(path).execute("SELECT sha256 FROM kernels WHERE entry = 'inc'")
    with Bundle.open(path) as bundle:
        with pytest.raises(BundleError, match="not a blob size"):
            bundle.kernels()
        with pytest.raises(BundleError, match="over the limit"):
            bundle.blob(sha)


def foreign_copy(**changes: object) -> Path:
    """The template with its kernel row changed and, for `machine`, its blob's ELF machine."""
    path = scratch(template())
    conn = sqlite3.connect(path)
    if "machine" in changes:
        [(sha, blob)] = conn.execute(
            "SELECT sha256, data FROM blobs WHERE sha256 IN "
            "(SELECT sha256 FROM kernels WHERE entry = 'inc')"
        ).fetchall()
        other = bytearray(blob)
        other[18:20] = int(changes.pop("machine")).to_bytes(2, "little")  # ELF e_machine
        new = hashlib.sha256(other).hexdigest()
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (new, len(other), bytes(other)))
        conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (new, sha))
    for column, value in changes.items():
        conn.execute(f"UPDATE kernels SET {column} = ? WHERE entry = 'inc'", (value,))
    if {"arch", "toolchain"} & set(changes):  # a made-up build: its key recomputes from no
        conn.execute(  # content hash (else a corrupt row: integrity35), as an older warm's
            "UPDATE kernels SET components = json_remove(components, '$.kernel') "
            "WHERE entry = 'inc'"
        )
        for column in {"arch", "toolchain"} & set(changes):  # named by its components too, as
            conn.execute(  # another machine's build names them (else corrupt: env59)
                "UPDATE kernels SET components = json_set(components, ?, ?) WHERE entry = 'inc'",
                (f"$.{column}", changes[column]),
            )
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"machine": 183}, "binary"),  # an AArch64 shared object on this x86-64 host
        ({"arch": "riscv64"}, "arch"),
        ({"toolchain": "cc:/opt/other-cc:other 1.0"}, "toolchain"),
        ({"backend": "cuda"}, "backend"),
    ],
)
def test_a_build_for_another_machine_is_skipped_reported_and_rebuilt(
    changes: dict[str, object], reason: str
) -> None:
    CASES["foreign build"] += 1
    path = foreign_copy(**changes)
    with Bundle.open(path) as bundle:
        rt = Runtime(HostDevice(), bundle)
        with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
            x = rt.upload(np.zeros(1, dtype=np.float32))
            rt.launch(K, x)
            assert rt.read(x).tolist() == [1.0]
        rt.close()
    reader = collector.reader()
    c = reader.compilation
    assert (c.loaded, c.compiled) == (0, 1), "the foreign build was served"
    assert c.misses.get(reason) == 1, c.misses
    assert any("kernel inc is rebuilt" in n for n in reader.notes()), reader.notes()


def test_a_bundle_from_another_toolchain_and_device_is_reported_and_rebuilt(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    CASES["foreign bundle"] += 1
    path = tmp_path / "foreign.warm"
    workload = workload_file(WORKLOAD, "fz_workload.py")
    other = {
        **warm.env,
        "WARM_CC": str(fake_cc(tmp_path)),
        "PYTHONPATH": str(Path(__file__).parent),
    }
    warm.env["PYTHONPATH"] = other["PYTHONPATH"]
    made = warm.with_env(WARM_CC=other["WARM_CC"]).json("run", workload, "--bundle", path)
    assert made["verified"] is True
    conn = sqlite3.connect(path)  # the tune was measured on another machine's CPU
    for key, op, shape, device, checksum in conn.execute(
        "SELECT key, operation, shape_key, device, lower(hex(checksum)) FROM tunes"
    ).fetchall():  # format 3 stores a key and a checksum as their bytes
        elsewhere = device.replace("host|", "host|Another CPU ", 1)
        conn.execute(
            "UPDATE tunes SET device = ?, key = ? WHERE key = ?",
            (elsewhere, bytes.fromhex(tune_key(op, shape, elsewhere, checksum)), key),
        )
    conn.commit()
    conn.close()
    doc = warm.json("run", workload, "--bundle", path)
    second = doc["passes"][1]
    assert second["compilation"]["compiled"] == 3 and second["compilation"]["loaded"] == 0
    assert second["autotune"]["measured"] == 1
    notes = " ".join(doc["passes"][0]["notes"])
    assert "(and maybe more of this run's kernels) for" in notes  # its own, rebuilt
    assert "(warm test wrapper) 99.1" in notes
    assert "1 tune(s) measured on 'host|Another CPU" in notes
    assert doc["verified"] is True


CLI_CASES = {
    "random bytes": lambda t: bytes(range(256)) * 8,
    "sqlite header over junk": lambda t: SQLITE_MAGIC + b"\x01" * 4000,
    "truncated": lambda t: t[: len(t) // 2],
    "schema name not UTF-8": schema_name_not_utf8,
}
ROW_CASES = {
    "another version": "PRAGMA user_version = 99",
    "another application": "PRAGMA application_id = 7",
    "wrong schema": "DROP TABLE tunes",
    "seconds not a number": "UPDATE kernels SET seconds = 'abc'",
    "deeply nested candidates": "UPDATE tunes SET candidates = '" + "[" * 100_000 + "'",
    "symbol not warm's": "UPDATE kernels SET symbol = '_handle'",
    "sha256 not hex": "UPDATE kernels SET sha256 = 'ZZ'",
    "tune key not its fields": "UPDATE tunes SET device = 'host|elsewhere'",
}

RUN_TOO = {"truncated", "another version"}
# A malformed row is a miss (reason `corrupt`) for `warm run`: rebuilt, and written over.
RUN_REPAIRS = {"seconds not a number", "tune key not its fields"}


def test_the_cli_gives_one_line_and_exit_2_for_hostile_bundles(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    files = {name: make(template()) for name, make in CLI_CASES.items()}
    for name, sql in ROW_CASES.items():
        files[name] = mutate(scratch(template()), (sql, ())).read_bytes()
    warm.env["PYTHONPATH"] = str(Path(__file__).parent)
    workload = workload_file(WORKLOAD, "fz_workload.py")
    for name, data in files.items():
        path = tmp_path / f"{name.replace(' ', '_')}.warm"
        commands = [("stats", path)]
        if name in RUN_TOO:
            commands.append(("run", workload, "--bundle", path))
        for command in commands:
            CASES["cli"] += 1
            path.write_bytes(data)
            proc = warm(*command)
            assert proc.returncode == 2, (name, command[0], proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr, (name, proc.stderr)
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("warm: error: "), (name, lines)
        if name in RUN_REPAIRS:
            ran = warm("run", workload, "--bundle", path)
            assert ran.returncode == 0, (name, ran.stdout, ran.stderr)
            assert "the bundle is complete" in ran.stdout, (name, ran.stdout)
