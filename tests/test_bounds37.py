"""Stop 37's bounds in the signing paths: no size in a bundle sets warm's memory when
`warm verify` hashes (or lists) its signed rows, nor when `warm sign` or `warm merge` reads
them. A real bundle (`warm run examples/matmul_host.py`), signed or not, with values over
warm's limits planted by sqlite3; each command run under `test_hostile37.MEASURE`, its own
peak memory compared with the same command's on the clean bundle. A row over a limit is
named as corrupt (counted as a row no signature covers), never hashed whole; every sound
row's hash, and so every existing signature, stays what it was.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_hostile37 import MIB, ROOT, cli, one_line_or_ok

WIDE = (  # six kernels, each with three 6 MB values over their limits (not over SQLite's)
    "UPDATE kernels SET symbol = printf('%.*c', 6000000, 'a'), "
    "label = printf('%.*c', 6000000, 'b'), compile_log = printf('%.*c', 6000000, 'c')"
)
HUGE_TUNE = "UPDATE tunes SET candidates = printf('%.*c', 35000000, 'a') WHERE rowid = 1"
SLACK = 8 * MIB // 1024  # KiB: what one run may peak above another, beyond a listing's cost


def growth(warm: Warm, command: str, clean: Path, bad: Path) -> tuple[int, str, str, int]:
    """`command` run on `bad`: its exit status, stdout, stderr, and how much higher its own
    peak memory is than on `clean` (KiB; the clean run's, measured once per test process)."""
    if (command, clean) not in _CLEAN:
        _CLEAN[command, clean] = cli(warm, command, clean)[3]
    code, out, err, peak = cli(warm, command, bad)
    one_line_or_ok(command, code, err)
    return code, out, err, peak - _CLEAN[command, clean]


_CLEAN: dict[tuple[str, Path], int] = {}


def listing_cost(warm: Warm, clean: Path, bad: Path) -> int:
    """What reading `bad`'s rows costs `warm check` above `clean`'s (KiB): SQLite's own
    `length()` of each value over its limit, which every listing pays (never held)."""
    return growth(warm, "check", clean, bad)[3]


def signed(warm: Warm, host_bundle, tmp_path: Path) -> tuple[Path, Path]:
    """The host example's bundle, signed by a new key; (bundle, key)."""
    key = tmp_path / "keys" / "ci.key"
    assert warm("keygen", key).returncode == 0
    bundle = host_bundle(tmp_path / "s.warm")
    done = warm("sign", bundle, "--key", key)
    assert done.returncode == 0, done.stderr
    return bundle, key


def planted(bundle: Path, sql: str) -> Path:
    out = bundle.with_name(f"bad-{abs(hash(sql)) % 10**6}.warm")
    out.write_bytes(bundle.read_bytes())
    with sqlite3.connect(out) as conn:
        conn.execute(sql)
    return out


def test_verify_of_a_signed_bundle_never_hashes_an_oversized_row_whole(
    warm: Warm, host_bundle, tmp_path: Path
) -> None:
    bundle, _ = signed(warm, host_bundle, tmp_path)
    out = warm("verify", bundle).stdout
    assert "covers 17 of 17 row(s)" in out, out
    # a value longer than warm reads at all: its row is left out, as every listing of
    # `warm verify` leaves it out (named by the scan); one within that, over its column's
    # limit: named as corrupt, counted as a row no signature covers
    for sql, entries, covers in ((HUGE_TUNE, 1, "16 of 16"), (WIDE, 6, "11 of 17")):
        bad = planted(bundle, sql)
        code, out, err, grew = growth(warm, "verify", bundle, bad)
        assert grew < listing_cost(warm, bundle, bad) + SLACK, (sql, grew)  # no row hashed whole
        assert code == 1, (out, err)
        assert out.count("corrupt ") >= entries, out
        assert f"covers {covers} row(s)" in out, out


def test_verify_of_an_unsigned_bundle_lists_uncovered_rows_by_key_alone(
    warm: Warm, host_bundle, tmp_path: Path
) -> None:
    bundle = host_bundle(tmp_path / "u.warm")
    bad = planted(bundle, WIDE)
    code, out, err, grew = growth(warm, "verify", bundle, bad)
    assert grew < listing_cost(warm, bundle, bad) + SLACK, grew  # no row loaded whole
    assert code == 1 and "signature: unsigned" in out, (out, err)


def test_sign_and_merge_refuse_an_oversized_row_in_one_line_within_memory(
    warm: Warm, host_bundle, tmp_path: Path
) -> None:
    bundle, key = signed(warm, host_bundle, tmp_path)
    out_file = tmp_path / "o.warm"
    commands = (("sign", "--key", key), ("merge", "-o", out_file))
    clean = {}
    for name, *rest in commands:  # each command's own peak on the clean signed bundle
        code, out, err, clean[name] = cli(warm, name, bundle, *rest)
        assert code == 0, (name, out, err)
    out_file.unlink()
    for sql in (WIDE,):  # (HUGE_TUNE: refused before its rows are read)
        bad = planted(bundle, sql)
        before, cost = bad.read_bytes(), listing_cost(warm, bundle, bad)
        for name, *rest in commands:
            code, out, err, peak = cli(warm, name, bad, *rest)
            assert code == 2 and "corrupt " in err, (name, out, err)
            one_line_or_ok(name, code, err)
            assert peak < clean[name] + cost + SLACK, (name, sql, peak, clean, cost)
        assert bad.read_bytes() == before
        assert not out_file.exists()


def test_a_signing_run_over_a_bundle_with_an_oversized_row_goes_on(
    warm: Warm, host_bundle, tmp_path: Path
) -> None:
    """`warm run --key` under trusted keys, on a bundle no trusted key signed, covers its
    manifest alone: an oversized kernel row is never hashed, nor stops the run."""
    key = tmp_path / "keys" / "ci.key"
    assert warm("keygen", key).returncode == 0
    one = "UPDATE kernels SET symbol = printf('%.*c', 6000000, 'a') WHERE rowid = 1"
    bad = planted(host_bundle(tmp_path / "r.warm"), one)
    warm.env["WARM_TRUSTED_KEYS"] = f"{key}.pub"
    done = warm("run", ROOT / "examples" / "matmul_host.py", "-b", bad, "--key", key)
    assert done.returncode == 0, done.stderr
    assert "signed by key" in done.stdout, done.stdout
