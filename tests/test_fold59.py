"""One clock pre-test, and one bound on a bundle's few-row tables for every command (fold59).

`warmcli.build_clock.clock_reason` is the one test of whether a text spells `__TIME__`,
`__DATE__` or `__TIMESTAMP__`: a header's bytes and a kernel's source, option or define value
alike (`build_clock` had a copy of `directives.clock_reason`'s pre-test for text, imported it
where it passed, and `directives` compiled all its patterns at import); keying a kernel that
spells the clock compiles the clock's pattern alone, and imports no `warmcli.directives`.

A bundle of more manifest rows than `MANIFEST_ROWS`, more fingerprints than
`FINGERPRINT_ROWS` or more signatures than `SIGNATURES` was refused by some commands (`warm
stats`, `verify`; `merge` for fingerprints and signatures) and read by others (`check`,
`diff`, `clean`; `stats`, `sign` took 65 signatures): every command that reads a bundle now
refuses it, in one line naming the table, exit 2, the file as it was. The real CLI in
subprocesses, on bundles crafted as tests/test_hostile_files.py crafts them."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, commands forked)

from warmcli.build_clock import clock_reason, reads_clock

SPELLED = [
    "x = __TIME__;",
    "/* __DATE__ */",
    "__TIMESTAMP__",
    "TIME",
    "DATE__x",
    "\udc80 __TIME__",
    "",
]


@pytest.mark.parametrize("text", SPELLED)
def test_a_kernels_text_and_a_headers_bytes_are_judged_by_one_clock_test(text: str) -> None:
    data = text.encode(errors="surrogatepass")
    assert clock_reason(text) == clock_reason(data)
    assert bool(clock_reason(text)) == any(w in text for w in ("__TIME__", "__DATE__", "__TIMES"))
    assert reads_clock("", (), (("STAMP", text),)) == clock_reason(data)  # a define's value
    assert reads_clock("", (f"-DS={text}",), ()) == clock_reason(data)  # an option


KEYED = """
import json, re, sys
from warmcli import Kernel
from warmcli.kernel import kernel_key
before = {key[1] for key in re._cache}
kernel = Kernel("void f(int *x) { x[0] = sizeof(__TIME__); }", "f", "P")
kernel_key(kernel, "host", "cc")
compiled = {key[1] for key in re._cache} - before
imported = "warmcli.directives" in sys.modules
from warmcli import build_clock, directives
print(json.dumps([build_clock._CLOCK.pattern in compiled, imported,
                  directives._LITERAL_OR_COMMENT.pattern in compiled,
                  directives._ASSEMBLER_READS.pattern in compiled]))
"""


def test_keying_a_kernel_that_spells_the_clock_compiles_the_clocks_pattern_alone() -> None:
    out = subprocess.run(
        [sys.executable, "-c", KEYED], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [True, False, False, False]


MANY = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})"
# Each few-row table, the bound every reader holds it to, and rows that add `n` to it.
BOUNDS = {"manifest": 64, "fingerprints": 1024, "signatures": 64}
ADDED = {
    "manifest": "INSERT INTO manifest SELECT 'extra' || i, 'v' FROM n",
    "fingerprints": "INSERT INTO fingerprints SELECT 'f' || i, 'device', '{}' FROM n",
    "signatures": "INSERT INTO signatures SELECT 'k' || i, public_key, signature, rows, "
    "signed_at FROM signatures, n",  # (the one signature `warm sign` stored, copied)
}


def fill(path: Path, table: str, total: int) -> None:
    """Rows added to `table` of the bundle at `path` till it holds `total`."""
    with sqlite3.connect(path) as conn:
        held = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        conn.execute(f"{MANY.format(total - held)} {ADDED[table]}")
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == total
    conn.close()


COMMANDS = {
    "stats": lambda b, good, out: ("stats", b),
    "stats --json": lambda b, good, out: ("stats", b, "--json"),
    "verify": lambda b, good, out: ("verify", b),
    "check": lambda b, good, out: ("check", b),
    "diff A": lambda b, good, out: ("diff", b, good),
    "diff B": lambda b, good, out: ("diff", good, b),
    "merge": lambda b, good, out: ("merge", "-o", out, good, b),
    "clean": lambda b, good, out: ("clean", b),
    "clean --dry-run": lambda b, good, out: ("clean", b, "--dry-run"),
    "sign": lambda b, good, out: ("sign", b, "-k", good.parent / "fold59.key"),
}


@pytest.fixture(scope="module")
def crafted(made: tuple[Warm, Path]) -> tuple[Warm, Path, dict[str, Path]]:
    """The example's bundle, signed, and a copy of it for each table past its bound."""
    warm, good = made
    key = good.parent / "fold59.key"
    signed = good.parent / "fold59_signed.warm"
    shutil.copyfile(good, signed)
    assert warm("keygen", key).returncode == 0
    assert warm("sign", signed, "-k", key).returncode == 0
    paths = {}
    for table, most in BOUNDS.items():
        paths[table] = good.parent / f"fold59_{table}.warm"
        shutil.copyfile(signed, paths[table])
        fill(paths[table], table, most + 1)
    return warm, signed, paths


@pytest.mark.parametrize("table", sorted(BOUNDS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_table_past_its_bound_is_refused_by_every_command_alike(
    crafted: tuple[Warm, Path, dict[str, Path]], tmp_path: Path, table: str, command: str
) -> None:
    warm, signed, paths = crafted
    bundle, out = tmp_path / "hostile.warm", tmp_path / "out.warm"
    shutil.copyfile(paths[table], bundle)
    proc = warm(*COMMANDS[command](bundle, signed, out), timeout=120)
    said = f"corrupt {table} (more than {BOUNDS[table]} rows)"
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    if command.endswith("--json"):
        assert json.loads(proc.stdout) == {"error": f"{bundle}: {said}", "exit": 2}
    else:
        assert proc.stderr.strip().splitlines() == [f"warm: error: {bundle}: {said}"], proc.stderr
    assert bundle.read_bytes() == paths[table].read_bytes()  # nothing changed, nothing lost
    assert not out.exists()


def test_a_bundle_within_every_bound_is_still_read_by_every_command(
    crafted: tuple[Warm, Path, dict[str, Path]], tmp_path: Path
) -> None:
    warm, signed, _ = crafted
    bundle = tmp_path / "within.warm"
    shutil.copyfile(signed, bundle)
    for table, most in BOUNDS.items():  # 64 manifest rows and signatures, 1024 fingerprints
        fill(bundle, table, most)
    for command in ("stats", "verify", "check", "diff A", "merge", "clean --dry-run"):
        proc = warm(*COMMANDS[command](bundle, signed, tmp_path / f"{command}.warm"), timeout=120)
        assert proc.returncode in (0, 1) and "more than" not in proc.stderr, (command, proc.stderr)


# A Ctrl-C while `at_once` waits for its thread (`second` was quicker than `first`): `first`'s
# probe ran on unwaited, and the process ended with its scratch folder left behind.
INTERRUPTED = """
import os, signal, threading
from warmcli.backends.processes import at_once, probe

def second():
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    return 0

try:
    at_once(lambda: probe(["sleep", "30"], 60), second)
except KeyboardInterrupt:
    # (a thread past its gate's release may still be ending: given 5 s, not the probe's 30)
    left = [t for t in threading.enumerate() if t.name == "warm-probe-2"]
    print("interrupted", [t.name for t in left if t.join(5) or t.is_alive()])
"""


def probe_folders_left(script: str, tmp_path: Path) -> tuple[str, list[str]]:
    """What `script`, run by Python with a temporary folder of its own, printed (its stderr
    after a blank line), and the `warm-probe-*` folders it left there."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    said = proc.stdout.strip() + ("\n\n" + proc.stderr if proc.stderr else "")
    return said, [p.name for p in tmp.iterdir() if p.name.startswith("warm-probe-")]


def test_a_ctrl_c_while_at_once_waits_kills_its_threads_probe_and_leaves_no_folder(
    tmp_path: Path,
) -> None:
    assert probe_folders_left(INTERRUPTED, tmp_path) == ("interrupted []", [])


# A Ctrl-C Python drops in an import lock's callback (3.11) leaves this thread holding that
# lock, and the probe thread blocked on it for good: `at_once` waited for it forever (review59:
# 6 of 25 random SIGINTs 4-9 ms into a first run's probes hung). Stand-in (a fake, for the
# wait's logic only): `first` blocks on a lock this thread holds, as the probe thread did.
STUCK = """
import threading
from warmcli.backends.processes import at_once

held, started = threading.Lock(), threading.Event()
held.acquire()

def second():
    started.wait(30)
    raise KeyboardInterrupt

try:
    at_once(lambda: (started.set(), held.acquire()), second)
except KeyboardInterrupt:
    print("interrupted")
"""


def test_a_ctrl_c_in_at_once_ends_even_where_its_thread_never_will() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", STUCK], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stdout.strip() == "interrupted", proc.stdout + proc.stderr
