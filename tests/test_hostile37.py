"""Stop 37's hostile bundles: a real bundle (`warm run examples/matmul_host.py`) mutated by
an attacker who ships it, against every command and a production process serving from it
(WARM_BUNDLE). What broke is kept here, with a compact sample of what held: each command
exits 0 or says one line and exits non-zero (no traceback, no signal, no hang), prints no
escape byte, keeps its memory flat, leaves the bundle (and a merge's target) as it was,
and production computes the numbers a cold start computes, or refuses in one line.
"""

from __future__ import annotations

import os
import resource
import selectors
import sqlite3
import sys
import time
from pathlib import Path

from conftest import Warm

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "examples" / "matmul_host.py"
_BUNDLE: list[bytes] = []  # the example's bundle, made once per test process
_COLD: list[str] = []  # what the example computes with no bundle, once per test process
MIB = 1 << 20
PAGE = 16384
BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
ESCAPES = ("\x1b", "\x9b", *map(chr, BIDI))  # none printed as it is

# The example workload served over WARM_BUNDLE: its row sums, one line (a refusal: one line).
SERVE = f"""
import sys
sys.path.insert(0, {str(ROOT / "examples")!r})
import numpy as np
import warmcli
import matmul_host as m
try:
    rt = warmcli.runtime()
except warmcli.WarmError as exc:
    print("refused:", exc)
    raise SystemExit(0)
rng = np.random.default_rng(0)
sums = []
for mm, n, k in m.SHAPES:
    a = rt.upload(rng.standard_normal((mm, k), dtype=np.float32))
    b = rt.upload(rng.standard_normal((k, n), dtype=np.float32))
    bias = rt.upload(rng.standard_normal(n, dtype=np.float32))
    c = rt.buffer((mm, n), "float32")
    out = rt.buffer(mm, "float32")
    rt.tune(m.MATMUL, a, b, c, mm, n, k)
    rt.launch(m.BIAS_RELU, c, bias, mm, n)
    rt.launch(m.ROW_SUM, c, out, mm, n)
    sums.append(rt.read(out))
print(repr(np.concatenate(sums).round(1).tolist()))
"""


def matmul_bundle(warm: Warm, path: Path) -> Path:
    if not _BUNDLE:
        done = warm("run", MATMUL, "-b", path, "-q")
        assert done.returncode == 0, done.stderr
        _BUNDLE.append(path.read_bytes())
    path.write_bytes(_BUNDLE[0])
    return path


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1536 * MIB, 1536 * MIB))


def cli(warm: Warm, *args: object) -> tuple[int, str, str, int]:
    return peak_of([sys.executable, "-m", "warmcli", *map(str, args)], warm.env)


def peak_of(
    argv: list[str], env: dict[str, str], timeout: float = 120
) -> tuple[int, str, str, int]:
    """`argv` run under a 1.5 GiB address-space limit (no hang: `timeout`): its exit status
    (negative: the signal that ended it), stdout, stderr (neither holding an escape byte),
    and its own peak resident memory in KiB (`os.wait4`)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: limited, its output on the pipes, then exec
        try:
            os.close(out_r)
            os.close(err_r)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.chdir(ROOT)
            _limit_memory()
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"hung: {argv}")
        for key, _ in sel.select(left):
            data = os.read(key.fd, 65536)
            if data:
                chunks[key.fd].append(data)
            else:
                sel.unregister(key.fd)
                os.close(key.fd)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    said = b"".join(chunks[out_r]), b"".join(chunks[err_r])
    out, err = (text.decode("utf-8", "surrogateescape") for text in said)
    for bad in ESCAPES:  # a stray byte 0x9b (no UTF-8) is read as the surrogate \udc9b
        assert bad not in out + err and "\udc9b" not in out + err, (argv, bad, out, err)
    return code, out, err, usage.ru_maxrss


def one_line_or_ok(argv: object, code: int, err: str) -> None:
    """Exit 0, or 1 (verify, diff, check found something), or one line and exit 2."""
    assert code in (0, 1, 2), (argv, code, err[-600:])
    assert "Traceback" not in err, (argv, err[-600:])
    if code == 2:
        assert len([line for line in err.splitlines() if line.strip()]) == 1, (argv, err)


# --- signatures: a row's key id, public key and signature are read only within a bound ---


def big_signatures(bundle: Path, rows: int, each: int) -> None:
    """`rows` signature rows, each with a public key and a signature of `each` bytes."""
    with sqlite3.connect(bundle) as conn:
        conn.executemany(
            "INSERT INTO signatures VALUES (?, zeroblob(?), zeroblob(?), x'', 0)",
            [(f"{i:016x}", each, each) for i in range(rows)],
        )
    conn.close()


def test_oversized_signature_fields_are_never_read_whole(warm: Warm, tmp_path: Path) -> None:
    """A `signatures` row's public key and signature (32 and 64 bytes as warm writes them)
    were read whole, whatever their size: 4 rows of 2 x 6 MB made `warm verify` (and `merge`,
    and a trusted-keys reader) hold ~48 MB more, up to ~1 GB over 64 rows. They are bounded
    in SQL now: an oversized one is a corrupt signature entry, named, never loaded."""
    plain = matmul_bundle(warm, tmp_path / "plain.warm")
    hostile = matmul_bundle(warm, tmp_path / "hostile.warm")
    big_signatures(hostile, 4, 6 * MIB)
    before = hostile.read_bytes()
    _, _, _, base = cli(warm, "verify", plain)
    code, out, err, peak = cli(warm, "verify", hostile)
    one_line_or_ok("verify", code, err)
    assert code == 1 and "corrupt signature entry '0000000000000000'" in out, out + err
    assert "public_key" in out
    assert peak < base + 20 * 1024, (base, peak)  # KiB: not the 48 MB of the rows
    target = tmp_path / "out.warm"
    code, out, err, peak = cli(warm, "merge", hostile, "-o", target)
    one_line_or_ok("merge", code, err)
    assert peak < base + 20 * 1024, (base, peak)
    assert hostile.read_bytes() == before
