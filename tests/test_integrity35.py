"""integrity35: every reader of a bundle gives a malformed or inconsistent row one verdict.

Real bundles made by `warm run` (host cc; CUDA by NVRTC for `--arch`, no GPU) or by
`big_bundle`'s SQL, edited with plain SQL (an index taken out of the schema while rows
change, then put back as it was: stale), read by the real CLI in subprocesses (forked) and
by production processes (forks of one that imported numpy and warmcli, `producing`).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm, nvrtc_release_or_skip
from forked_python import ForkedPython, produced
from test_keys_exact import keys_producing  # noqa: F401  (`producing`)
from test_review34b import TWO_FACTORS, _swap_ptx_keys

# -- 1. PTX rows moved under another build's key --------------------------------------------

# A production process's replay of a workload over a bundle, on a GPU-less sm_90 (PTX is
# JIT-compiled there): what it loaded by PTX JIT and what it queued to compile.
REPLAY = """
import json, sys
from pathlib import Path
from warmcli.cli.verify import replay
from warmcli.warming.workload import load_workload
report, _ = replay(Path(sys.argv[1]), load_workload(sys.argv[2], gpu_less=True), "auto",
                   ["sm_90"], None, None)
c = report.total.compilation
print(json.dumps({"ptx_jit": c.ptx_jit, "queued": c.queued, "loaded": c.loaded}))
"""


def _replay(producing: ForkedPython, warm: Warm, bundle: Path, workload: Path) -> dict[str, int]:
    """`REPLAY` of `workload` over `bundle`, a fork of `producing` (one that imported numpy
    and warmcli) in `warm`'s environment."""
    done = producing.run(REPLAY, str(bundle), str(workload), env=warm.env, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _swap_ptx_builds(bundle: Path) -> None:
    """Two PTX rows' blobs and symbols swapped (each row's key and components kept)."""
    conn = sqlite3.connect(bundle)
    query = "SELECT key, sha256, symbol FROM kernels WHERE arch LIKE 'compute_%' ORDER BY label"
    (a, sha_a, sym_a), (b, sha_b, sym_b) = conn.execute(query).fetchall()
    conn.execute("UPDATE kernels SET sha256 = ?, symbol = ? WHERE key = ?", (sha_b, sym_b, a))
    conn.execute("UPDATE kernels SET sha256 = ?, symbol = ? WHERE key = ?", (sha_a, sym_a, b))
    conn.commit()
    conn.close()


def test_ptx_rows_swapped_are_unsound_to_every_reader_and_never_served(
    warm: Warm, workload_file, tmp_path: Path, producing: ForkedPython, forked: Any
) -> None:
    """A cubin row's symbol ties its key, a PTX row's symbol is its cubin's: two PTX rows
    with their keys swapped (each keeping its blob) passed `warm check --arch sm_90`
    ('2 kernel(s) served by PTX JIT here', exit 0) and `warm verify` ('sound'), while
    production refused them (a miss). A row keeps its kernel's content hash now, its key
    recomputed by every reader: such a row is corrupt to check, verify and stats alike, and
    production compiles the kernel (never JITs the other's PTX)."""
    nvrtc_release_or_skip()
    warm = forked(warm)  # each command a fork of one process that imported the CLI once
    workload = workload_file(TWO_FACTORS)
    sound = tmp_path / "sound.warm"
    built = warm("run", workload, "--arch", "sm_80", "-b", sound, "-q")
    assert built.returncode == 0, built.stderr
    assert warm("verify", sound).returncode == 0
    assert warm("check", sound, "--arch", "sm_90").returncode == 0
    assert _replay(producing, warm, sound, workload)["ptx_jit"] == 2
    for name, spoil, problem in (
        ("keys", lambda p: _swap_ptx_keys(p, "scale[FACTOR=2]", "scale[FACTOR=3]"), "key: not"),
        ("builds", _swap_ptx_builds, "is the symbol of no cubin"),
    ):
        bundle = tmp_path / f"{name}.warm"
        bundle.write_bytes(sound.read_bytes())
        spoil(bundle)
        verified = warm("verify", bundle)
        assert verified.returncode == 1 and verified.stdout.count(problem) == 2, verified.stdout
        done = warm("check", bundle, "--arch", "sm_90", "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        corrupt = [m for m in doc["unservable"] if m["reason"] == "corrupt"]
        assert len(corrupt) == 2 and not doc["ptx_jit"], doc
        listed = warm("stats", bundle)
        assert listed.returncode == 2 and problem in listed.stderr, listed.stderr
        assert "Traceback" not in verified.stderr + done.stderr + listed.stderr
        replayed = _replay(producing, warm, bundle, workload)
        assert replayed["ptx_jit"] == 0 and replayed["queued"] == 2, replayed


# -- 2. an index out of step with its rows ----------------------------------------------------


def _behind_index(path: Path, index: str, loosen: tuple[str, str], *edits: str) -> None:
    """Run `edits` with `index` out of the schema (its table's constraint `loosen`ed, as
    (text, replacement)), then put both back as they were: the index is stale."""
    conn = sqlite3.connect(path, isolation_level=None)
    table, root, sql = conn.execute(
        "SELECT tbl_name, rootpage, sql FROM sqlite_master WHERE name = ?", (index,)
    ).fetchone()
    (table_sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = ? WHERE name = ?", (table_sql.replace(*loosen), table)
    )
    conn.execute("DELETE FROM sqlite_master WHERE name = ?", (index,))
    conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    for edit in edits:
        conn.execute(edit)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (table_sql, table))
    conn.execute(
        "INSERT INTO sqlite_master VALUES ('index', ?, ?, ?, ?)", (index, table, root, sql)
    )
    conn.close()


STALE = {
    "duplicate kernel row": (
        "sqlite_autoindex_kernels_1",
        ("key TEXT PRIMARY KEY", "key TEXT"),
        "INSERT INTO kernels SELECT * FROM kernels ORDER BY rowid LIMIT 1",
    ),
    "stale entry index": (  # the row stays well-formed: its symbol renamed with its entry
        "kernels_entry",
        ("", ""),
        "UPDATE kernels SET entry = 'moved', symbol = substr(symbol, 1, 22) || 'moved', "
        "components = json_set(components, '$.entry', 'moved') WHERE rowid = 1",
    ),
}


@pytest.fixture(scope="module")
def host_bundle(made: tuple[Warm, Path]) -> tuple[Path, dict[str, str]]:
    """The host example's bundle (six kernels, three tunes) as `warm run` made it, and the
    environment it was made in (conftest's `made`: one run shared by every module)."""
    warm, bundle = made
    return bundle, warm.env


@pytest.mark.parametrize("case", sorted(STALE))
def test_an_index_out_of_step_with_its_rows_is_one_verdict(
    host_bundle: tuple[Path, dict[str, str]], tmp_path: Path, case: str, forked: Any
) -> None:
    """A kernel row copied in beside its key's unique index (or a blob's), or a row
    changed under a stale `kernels_entry`: `warm verify` called it unsound (SQLite's check),
    but `warm stats` listed 4 kernels of 3 keys (exit 0), `warm diff` against the sound
    bundle said 'the bundles hold the same kernels and tunes', `warm check` 'every entry is
    servable here' (a blob's row copied in beside its index: likewise), and `warm run`
    wrote into it ('the bundle is complete', still inconsistent). Every reader now names
    it inconsistent in one line (exit 2), and those that write (clean, sign, merge, run)
    leave the file and OUT as they were."""
    from conftest import EXAMPLES

    sound, env = host_bundle
    warm = forked(Warm(env))  # each command a fork of one process that imported the CLI once
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(sound.read_bytes())
    index, loosen, edit = STALE[case]
    _behind_index(bundle, index, loosen, edit)
    key = tmp_path / "key"
    assert warm("keygen", key).returncode == 0
    before = bundle.read_bytes()
    out = tmp_path / "out.warm"
    for args in (
        ("stats", bundle),
        ("stats", bundle, "--json"),
        ("check", bundle),
        ("diff", sound, bundle),
        ("diff", bundle, sound),
        ("merge", sound, bundle, "-o", out),
        ("clean", bundle, "--dry-run"),
        ("clean", bundle),
        ("sign", bundle, "--key", key),
        ("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q"),
    ):
        done = warm(*args)
        said = done.stderr if "--json" not in args else json.loads(done.stdout)["error"]
        assert done.returncode == 2, (args, done.stdout[-1500:], done.stderr[-1500:])
        assert "inconsistent bundle" in said and str(bundle) in said, (args, said)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 1
    verified = warm("verify", bundle)
    assert verified.returncode == 1 and "sqlite: " in verified.stdout, verified.stdout
    assert bundle.read_bytes() == before and not out.exists()
    assert warm("stats", sound).returncode == 0  # the sound one is as it was


# -- 3. a large bundle's summary checks every row ---------------------------------------------


@pytest.mark.parametrize(
    ("kernels", "tunes", "spoil", "named"),
    [
        (1001, 0, "UPDATE kernels SET seconds = -1 WHERE rowid = 7", "seconds: -1.0"),
        (1001, 0, "UPDATE kernels SET last_used = 'x' WHERE rowid = 900", "last_used"),
        (0, 201, "UPDATE tunes SET pick = 'c9' WHERE rowid = 150", "corrupt tune entry"),
    ],
)
def test_stats_of_a_large_bundle_names_a_malformed_row_as_a_small_ones_does(
    warm: Warm, tmp_path: Path, kernels: int, tunes: int, spoil: str, named: str, forked: Any
) -> None:
    """Text `warm stats` of a bundle of more than 1,000 kernels (200 tunes) is a summary by
    SQL aggregates: a malformed row, named by a smaller bundle's listing (exit 2), by
    `stats --json` and `verify`, was never read (exit 0). Every kernel row is read and
    checked; the tunes of a summary are counted (each judged by --json and --explain)."""
    from big_bundle import build_big

    warm = forked(warm)  # each command a fork of one process that imported the CLI once
    small = (1000 if kernels else 0, 200 if tunes else 0)  # listed entry by entry
    for size in (small, (kernels, tunes)):
        bundle = build_big(tmp_path / f"b{size[0]}-{size[1]}.warm", *size)
        assert warm("stats", bundle).returncode == 0
        conn = sqlite3.connect(bundle)
        conn.execute(spoil)
        conn.commit()
        conn.close()
        for args in (("stats", bundle), ("stats", bundle, "--json")):
            if tunes and size != small and len(args) == 2:  # a summary counts its tunes
                assert warm(*args).returncode == 0
                continue
            done = warm(*args)
            said = done.stderr if len(args) == 2 else json.loads(done.stdout)["error"]
            assert done.returncode == 2 and named in said, (size, args, said)
        if tunes:
            explained = warm("stats", bundle, "--explain", "op49")  # rowid 150's
            assert explained.returncode == 2, (size, explained.stdout[-500:])


# -- 4. the same verdict from every reader: a deterministic mutation loop -----------------------

# One field of one row made what warm never writes; each is a malformed row to every reader.
ROW_SUM = "WHERE entry = 'row_sum'"
MALFORMED = {
    "a kernel's last use no time": f"UPDATE kernels SET last_used = 'x' {ROW_SUM}",
    "a kernel's arch changed": f"UPDATE kernels SET arch = 'aarch64' {ROW_SUM}",
    "its components' toolchain another": "UPDATE kernels SET components = "
    f"json_set(components, '$.toolchain', 'cc:another') {ROW_SUM}",
    "a tune's kernel id gone": "DELETE FROM tune_kernels WHERE id = 1",
}
TIMES = ("a kernel's last use no time",)
SERVED = (
    "import json, sys; sys.path.insert(0, sys.argv[1])\n"
    "import warmcli, matmul_host\n"
    "matmul_host.workload(warmcli.runtime('host'))\n"
    "r = warmcli.report()\n"
    "print(json.dumps({'kernels': len(r.kernels), 'tunes': len(r.tunes)}))\n"
)


def test_every_reader_gives_a_malformed_row_one_verdict(
    host_bundle: tuple[Path, dict[str, str]], tmp_path: Path, forked: Any, producing: ForkedPython
) -> None:
    """Each mutation is one malformed row: stats (exit 2), verify (1), check (1, `corrupt`),
    diff against the sound bundle (1, listed corrupt), merge (2), sign (2) and clean
    (removed as corrupt) each say so, and production serves the rest, compiling (or
    measuring) that one. Before: a kernel's last use not a time passed check and diff
    ('the bundles hold the same kernels'), sign vouched for any malformed row (exit 0), and
    a row whose components name another arch or toolchain than its own passed verify and
    stats while production never served it."""
    from conftest import EXAMPLES

    sound, env = host_bundle
    warm = Warm(env)
    cli = forked(warm)  # each command a fork of one process that imported the CLI once
    assert produced(producing, warm, SERVED, EXAMPLES, bundle=sound) == {"kernels": 0, "tunes": 0}
    key = tmp_path / "key"
    assert cli("keygen", key).returncode == 0
    for i, (case, spoil) in enumerate(sorted(MALFORMED.items())):
        bundle = tmp_path / f"b{i}.warm"
        bundle.write_bytes(sound.read_bytes())
        conn = sqlite3.connect(bundle)
        conn.execute(spoil)
        conn.commit()
        conn.close()
        copy = tmp_path / f"c{i}.warm"
        copy.write_bytes(bundle.read_bytes())
        verdicts = {
            "stats": cli("stats", bundle),
            "verify": cli("verify", bundle),
            "check": cli("check", bundle),
            "diff": cli("diff", sound, bundle),
            "merge": cli("merge", sound, bundle, "-o", tmp_path / f"m{i}.warm"),
            "sign": cli("sign", copy, "--key", key),
            "clean": cli("clean", copy, "--dry-run"),
        }
        # A kernel's times are no part of what production serves (it never reads them):
        # check, which judges what production would serve, finds it servable.
        timed = case in TIMES
        codes = {name: done.returncode for name, done in verdicts.items()}
        assert codes == {
            "stats": 2, "verify": 1, "check": 0 if timed else 1, "diff": 1, "merge": 2,
            "sign": 2, "clean": 0,
        }, (case, {n: d.stdout[-300:] + d.stderr[-300:] for n, d in verdicts.items()})  # fmt: skip
        for name, done in verdicts.items():
            said = done.stdout + done.stderr
            assert "Traceback" not in said, (case, name, said[-600:])
            assert "corrupt" in said or (timed and name == "check"), (case, name, said[-600:])
        assert not (tmp_path / f"m{i}.warm").exists()
        assert copy.read_bytes() == bundle.read_bytes(), case  # sign refused, wrote nothing
        served = produced(producing, warm, SERVED, EXAMPLES, bundle=bundle)
        assert served["kernels"] + served["tunes"] >= (0 if timed else 1), (case, served)


def _spoiled(
    host_bundle: tuple[Path, dict[str, str]], tmp_path: Path, edit: str, forked: Any
) -> tuple[Warm, Path]:
    """A copy of the host bundle with the SQL `edit` made, and a `warm` in its environment
    (each command a fork of one process that imported the CLI once)."""
    sound, env = host_bundle
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(sound.read_bytes())
    conn = sqlite3.connect(bundle)
    conn.execute(edit)
    conn.commit()
    conn.close()
    return forked(Warm(env)), bundle


def test_clean_removes_kernels_whose_blob_size_lies(
    host_bundle: tuple[Path, dict[str, str]], tmp_path: Path, forked: Any
) -> None:
    """A blob whose size column is not its length is never served (`warm check`: binary,
    verify names it) but `warm clean` kept its kernels ('would remove 0 kernel(s)'), so no
    command repaired the bundle. They are removed as corrupt, and verify passes after."""
    warm, bundle = _spoiled(
        host_bundle,
        tmp_path,
        f"UPDATE blobs SET size = size + 1 WHERE sha256 = (SELECT sha256 FROM kernels {ROW_SUM})",
        forked,
    )
    assert warm("verify", bundle).returncode == 1
    cleaned = warm("clean", bundle, "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    doc = json.loads(cleaned.stdout)
    assert doc["removed_count"]["kernels"] == 3, doc  # the three kernels of that blob
    assert all(r.startswith("corrupt: its blob is") for r in doc["removed_by_reason"]), doc
    assert warm("verify", bundle).returncode == 0


def test_a_host_kernel_whose_binary_lacks_its_symbol_is_unsound_and_cleaned(
    host_bundle: tuple[Path, dict[str, str]], tmp_path: Path, forked: Any, producing: ForkedPython
) -> None:
    """A host kernel row pointed at another kernel's blob (sound, of the right size): its
    symbol is not in that binary, so production never serves it (`dlsym`: a miss, compiled)
    and `warm check` says `binary`; but `warm verify` called the bundle sound and `warm
    clean` kept the kernel ('would remove 0'). Verify names it; clean removes it, corrupt."""
    from conftest import EXAMPLES

    warm, bundle = _spoiled(
        host_bundle,
        tmp_path,
        f"UPDATE kernels SET sha256 = (SELECT sha256 FROM kernels WHERE entry = 'bias_relu') "
        f"{ROW_SUM}",
        forked,
    )
    checked = warm("check", bundle, "--json")
    assert checked.returncode == 1 and '"binary"' in checked.stdout, checked.stdout[-800:]
    verified = warm("verify", bundle)
    said = " ".join(verified.stdout.split())  # (lines wrap at the terminal's width)
    assert verified.returncode == 1 and "does not export warm_" in said, verified.stdout
    served = produced(producing, warm, SERVED, EXAMPLES, bundle=bundle)
    assert served == {"kernels": 1, "tunes": 0}, served
    cleaned = warm("clean", bundle, "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    doc = json.loads(cleaned.stdout)
    assert doc["removed_by_reason"] == {"corrupt: its binary does not export its symbol": 1}
    assert warm("verify", bundle).returncode == 0
