"""A precompiled header (`.gch`) is keyed by its content's sha256 alone (gch47).

A real `val.h.gch` (`cc -x c-header`, ~1.8 MB of binary) beside the `val.h` a host kernel
includes first was read through the headers' include scanner (`directives.spliced`,
`computed_includes.macro_includes` over its first 4 MB) though only its sha256 is keyed: ~1.5 s
for each process's first key of such a kernel (6 ms without the `.gch`), paid at every
production start. Now it is hashed only, memoised by its stat stamp once settled; the key is
what it was. Real files and the system C compiler; no fakes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from host_keys import HEADER_SOURCE, settle
from host_keys import key as _key

from warmcli import headers, linked, precompiled
from warmcli.headers import search_orders

_OLD = 1_000_000_000  # an mtime long settled (2001)


def _gch(tmp_path: Path, value: int, gch: Path) -> None:
    """`gch`, a real precompiled `val.h` defining VAL as `value`."""
    (tmp_path / "other").mkdir(exist_ok=True)
    (tmp_path / "other" / "val.h").write_text(f"#define VAL {value}\n")
    made = [str(tmp_path / "other" / "val.h"), "-o", str(gch)]
    subprocess.run(["cc", "-O2", "-fPIC", "-x", "c-header", *made], check=True)


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """`inc/val.h`, `inc/val.h.gch` (real), and `a/val.h.gch/one.gch` (a folder of them),
    all settled (their mtimes long past)."""
    inc, first = tmp_path / "inc", tmp_path / "a"
    inc.mkdir()
    (first / "val.h.gch").mkdir(parents=True)
    (inc / "val.h").write_text("#define VAL 1\n")
    _gch(tmp_path, 2, inc / "val.h.gch")
    _gch(tmp_path, 3, first / "val.h.gch" / "one.gch")
    (first / "val.h.gch" / "two.gch").write_text('#include "x.h"\n#define X 1\n')
    for path in (inc / "val.h", inc / "val.h.gch", *(first / "val.h.gch").iterdir()):
        os.utime(path, (_OLD, _OLD))
    return inc, first


def test_a_gch_is_hashed_not_scanned_and_keyed_as_before(tmp_path: Path) -> None:
    """Each `.gch` gcc may read (a file beside the header, a folder's members) is hashed, never
    scanned for includes (nothing of it in the scanner's memo), and gives the lines the
    scanning reader gave (its sha256): the keys are what they were."""
    inc, first = _tree(tmp_path)
    settle(*tmp_path.rglob("*.gch"))
    options = (f"-I{first}", f"-I{inc}")
    headers._memo.clear()
    key = _key(HEADER_SOURCE, options)
    scanned = [p for p in headers._memo if ".gch" in p]
    assert not scanned, f"scanned as source: {scanned}"
    known = [p for p in precompiled._memo if p.startswith(str(tmp_path))]
    assert len(known) == 3, "each settled .gch remembered by its stamp"
    assert _key(HEADER_SOURCE, options) == key

    includes, scanning = [("val.h", True, None)], lambda p: (r := headers._read(p)) and r[0]
    for orders in (search_orders(options, str(tmp_path)), search_orders(options[1:], "")):
        now = precompiled.precompiled(includes, orders)
        before = precompiled.precompiled(includes, orders, scanning)
        assert now == before and len(now) in (1, 3), (now, before)


def test_a_fresh_gch_is_hashed_again_each_key(tmp_path: Path) -> None:
    """A `.gch` changed in the last 2 s is not remembered: rewritten with its size and mtime
    kept (another VAL), the next key differs; once settled, a changed stamp still does."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define VAL 1\n")
    gch = inc / "val.h.gch"
    _gch(tmp_path, 2, gch)
    options = (f"-I{inc}",)
    first, stamp = _key(HEADER_SOURCE, options), gch.stat()
    data = gch.read_bytes()
    gch.write_bytes(data.replace(b"VAL 2", b"VAL 7") if b"VAL 2" in data else data[::-1])
    os.utime(gch, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert gch.stat().st_size == stamp.st_size
    second = _key(HEADER_SOURCE, options)
    assert second != first, "a fresh .gch edited within its mtime was believed"
    os.utime(gch, (_OLD, _OLD))
    settled = _key(HEADER_SOURCE, options)
    assert settled == second
    _gch(tmp_path, 5, gch)
    assert _key(HEADER_SOURCE, options) != settled


FRESH_KEY = """
import json, sys
sys.path.insert(0, {tests!r})
from host_keys import HEADER_SOURCE, key
from warmcli import headers
made = key(HEADER_SOURCE, ({option!r},))
print(json.dumps([[p for p in headers._memo if ".gch" in p], made]))
"""


def test_a_fresh_process_keys_a_kernel_beside_a_real_gch_hashing_it_alone(tmp_path: Path) -> None:
    """A fresh process's first key of a kernel whose `val.h` has a real 1.8 MB `.gch` beside
    it scanned the `.gch` for includes (~1.5 s before; some ms now): now nothing of it is in
    the scanner's memo, and the key is this process's. What the scan cost is counted as what
    was scanned, not timed."""
    inc, _ = _tree(tmp_path)
    tests = str(Path(__file__).parent)
    code = FRESH_KEY.format(tests=tests, option=f"-I{inc}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tests).parent), tests])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    scanned, made = json.loads(done.stdout)
    assert (inc / "val.h.gch").stat().st_size > 100_000  # (a real one: the point)
    assert scanned == [], f"scanned as source: {scanned}"
    assert made == _key(HEADER_SOURCE, (f"-I{inc}",))


def _linked_files(folder: Path) -> list[Path]:
    """Real and crafted files a kernel's options may link: a shared library and an object
    (cc), a regular and a thin archive (ar), linker scripts (one naming `libX.a`), and texts
    around the 1 MB a script is read to (a NUL in the first 8 bytes, then text: marked cut)."""
    folder.mkdir()
    (folder / "h.c").write_text("float helper(void) { return 4.0f; }\n")
    run = {"cwd": folder, "check": True}
    subprocess.run(["cc", "-fPIC", "-shared", "h.c", "-o", "libso.so"], **run)  # type: ignore[call-overload]
    subprocess.run(["cc", "-fPIC", "-c", "h.c", "-o", "h.o"], **run)  # type: ignore[call-overload]
    subprocess.run(["ar", "rcs", "libX.a", "h.o"], **run)  # type: ignore[call-overload]
    subprocess.run(["ar", "rcsT", "libthin.a", "h.o"], **run)  # type: ignore[call-overload]
    texts = {
        "script.ld": b"INPUT(-lX)\n",
        "short.ld": b"INPUT(a)",
        "empty.ld": b"",
        "nul_head.ld": b"AB\0CDEFG" + b"x" * (1 << 20) + b"y",
        "nul_head_short.ld": b"AB\0CDEFG" + b"x" * 100,
        "long.ld": b"/* */ " + b"x" * (1 << 20) + b"\n",
        "binary_late.ld": b"INPUT(a)" + b"x" * 1000 + b"\0",
        "high.ld": b"INPUT(a) " + "é".encode(),
    }
    for name, data in texts.items():
        (folder / name).write_bytes(data)
    made = [folder / n for n in ("libso.so", "h.o", "libX.a", "libthin.a", *texts)]
    for path in made:
        os.utime(path, (_OLD, _OLD))
    return made


def test_a_linked_binary_is_not_read_as_a_script_each_key(tmp_path: Path) -> None:
    """A linked shared library or object (settled) was read 1 MB each key as a possible
    linker script (~2 ms a 2.6 MB `.so`, never remembered); now known by its stamp once
    (`linked._opaque`). Only files whose full reading names nothing are remembered so: each
    such file names nothing read anew (folders untouched), and every digest is as before."""
    lib = tmp_path / "lib"
    made = _linked_files(lib)
    settle(*made)
    linked._opaque.clear()
    for path in made:
        options = (f"-L{lib}", str(path), "-Wl,-u,helper", "-lX")
        first = linked.linked_digest(options)
        memo_on = linked.linked_digest(options)
        linked._opaque.clear()
        linked._memo.clear()
        assert linked.linked_digest(options) == first == memo_on, path.name
    for path in made:
        linked._named_inputs(str(path), [str(lib)])
    opaque = {Path(stamp[0]).name for stamp, none in linked._opaque.items() if none}
    assert {"libso.so", "h.o", "libX.a", "nul_head_short.ld", "binary_late.ld"} <= opaque
    assert opaque.isdisjoint({"script.ld", "short.ld", "libthin.a", "nul_head.ld", "long.ld"})
    for path in made:  # each told to name nothing: so by the reading before (`_as_before`)
        folders = [str(lib)]
        if linked._by_stamp(str(path), {}, linked._names_none):
            assert _as_before(str(path), folders) == [] and folders == [str(lib)], path.name


def _as_before(path: str, folders: list[str]) -> list[str]:
    """`linked._named_inputs` as it read a file not a thin archive before gch47 (a reference
    copy: its first 8 bytes, then 1 MB as a script where they are ASCII, not `!<arch>`)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        script = head.isascii() and head != b"!<arch>\n"
        assert head != b"!<thin>\n"
        data = fh.read(linked._MAX_SCRIPT if script else 0)
        cut = bool(data) and fh.read(1) != b""
    found = linked._script_inputs(head + data, folders)
    cut = cut and b"\0" not in data and data.isascii()
    return [*found, "cut"] if cut else found


def test_stats_reads_the_counts_of_many_rows_a_query(tmp_path: Path, host_bundle: Any) -> None:
    """`warm stats --json` read each kernel row's two counts (kernels sharing its binary, rows
    its compile made: `HeldCounts`, a temporary SQLite file) by one query each: 72,000
    queries for 24,000 rows. Now `counts.BATCH` rows' at a time, memory still flat (a batch held);
    every row given what a single read gives (its share, its part of the compile's time)."""
    from test_hostile41 import _kernels_of_two_archs

    from warmcli.bundle.compiles import compile_of, shared_compiles
    from warmcli.bundle.counts import HeldCounts
    from warmcli.bundle.store import Bundle
    from warmcli.cli.render.stats import stats_document

    path = host_bundle(tmp_path / "b.warm")
    _kernels_of_two_archs(path, 700, twins=True, blobs=True)
    with Bundle.open(path) as bundle:
        users = HeldCounts((((sha,), n) for sha, n in bundle.blob_users()), of=str(path))
        made = shared_compiles(bundle)
        queries: list[str] = []
        for held in (users, made):
            assert held._conn is not None
            held._conn.set_trace_callback(queries.append)
        kernels = list(bundle.each_kernel_used())
        doc = stats_document({}, [], iter(kernels), [], shared=users, compiles=made)
        rows = list(doc["kernels"])
    assert len(rows) == len(kernels) == 1400
    assert len(queries) <= 2 * 6, len(queries)  # two counts of 256 rows a query (2,800 before)
    per_blob: dict[str, int] = {}
    for row, (k, _) in zip(rows, kernels, strict=True):
        assert row["shared_by"] == users.get((k.sha256,)) == 2
        assert row["seconds"] == k.seconds / made.get(compile_of(k)) == k.seconds / 2
        per_blob[k.sha256] = per_blob.get(k.sha256, 0) + row["bytes"]
    assert per_blob == {k.sha256: k.size for k, _ in kernels}  # the shares add up to each


HANGS = """
import sys
sys.path.insert(0, {tests!r})
from host_keys import HEADER_SOURCE, key
for options in {options!r}:
    print(key(HEADER_SOURCE, options))
"""


def test_a_gch_that_is_no_regular_file_never_hangs_a_key(tmp_path: Path) -> None:
    """`val.h.gch` a FIFO, or a link to `/dev/zero`, or a folder holding a FIFO: a key opened
    and read it (a FIFO: blocked forever, `/dev/zero`: hashed forever), so a production
    process hung at its start; gcc in warm's builds reads no `.gch` (`-include` first). Now
    only a regular file is hashed (as `warmcli.linked` and the headers' own reading)."""
    folders = [tmp_path / n for n in ("fifo", "zero", "member")]
    for folder in folders:
        folder.mkdir()
        (folder / "val.h").write_text("#define VAL 1\n")
    os.mkfifo(folders[0] / "val.h.gch")
    (folders[1] / "val.h.gch").symlink_to("/dev/zero")
    (folders[2] / "val.h.gch").mkdir()
    os.mkfifo(folders[2] / "val.h.gch" / "a.gch")
    tests = str(Path(__file__).parent)
    options = [(f"-I{folder}",) for folder in folders]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tests).parent), tests])}
    code = HANGS.format(tests=tests, options=options)
    try:
        keyed = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("keying hung on a .gch that is no regular file") from None
    assert keyed.returncode == 0 and len(keyed.stdout.split()) == 3, keyed.stderr[-800:]
