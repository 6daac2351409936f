"""A new user's and an operator's trial of README's commands, bundle, misses and trust
sections (readme18): what a user tried that the code did not keep, each through the real
CLI on a real bundle made by `warm run`.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_python import ForkedPython

MATMUL = EXAMPLES / "matmul_host.py"
MANY = EXAMPLES / "many_kernels_host.py"


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The module's production processes, each a fork of one that imported numpy and
    warmcli (`tests/forked_python.py`): what each serves and writes is tested (warm reads
    every setting at call time), not how it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)  # (conftest's `warm`'s, its home aside)
    yield server
    server.close()


def _signed_then_corrupted(warm: Warm, tmp_path: Path, put: Callable[[Path], Path]) -> Path:
    """The host example's bundle (`put` there: conftest's `host_bundle`), signed, its
    signature row then made malformed."""
    bundle = put(tmp_path / "signed.warm")
    assert warm("keygen", tmp_path / "ci.key").returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "ci.key").returncode == 0
    with sqlite3.connect(bundle) as conn:
        conn.execute("UPDATE signatures SET key_id = char(27) || '[31m' || key_id")
    conn.close()
    return bundle


def test_verify_names_a_malformed_signature_row_and_exits_1(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """README: verify exits 1 when it found something corrupt, named on the output (a
    malformed manifest or fingerprint row is); a malformed signature row stopped it with
    exit 2 and no integrity report."""
    bundle = _signed_then_corrupted(warm, tmp_path, host_bundle)
    proc = warm("verify", bundle)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "integrity:" in proc.stdout and "corrupt signature entry" in proc.stdout
    assert "signature: unsigned" not in proc.stdout
    assert "\x1b" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    doc = json.loads(warm("verify", bundle, "--json").stdout)
    assert doc["integrity"]["ok"] is False
    assert any("corrupt signature entry" in p for p in doc["integrity"]["problems"])


def test_run_over_a_malformed_signature_row_says_what_it_stored(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm run` storing into a signed bundle whose signature row is malformed stored
    the kernels, then failed (exit 2) on the row, never saying what it had stored."""
    bundle = _signed_then_corrupted(warm, tmp_path, host_bundle)
    proc = warm.with_env(WARM_EXAMPLE_KERNELS="10")("run", MANY, "-b", bundle, "-q")  # forked
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored 10 new kernel(s)" in proc.stdout
    assert "unsigned" in proc.stdout + proc.stderr


@pytest.mark.parametrize("off", ["false", "no", "off", "FALSE", " 0 "])
def test_a_flag_set_to_a_word_for_off_is_off(
    warm: Warm, tmp_path: Path, workload_file, off: str, producing: ForkedPython
) -> None:
    """WARM_BUNDLE_WRITE=false wrote the misses back into a production bundle, and
    WARM_REPORT=no reported, WARM_EXPLAIN=no logged (WARM_STRICT=no was already off)."""
    bundle = tmp_path / "empty.warm"
    empty = workload_file("def workload(rt):\n    pass\n")
    assert warm("run", empty, "-b", bundle, "-q").returncode == 0
    before = bundle.read_bytes()
    env = dict(
        warm.env,
        WARM_BUNDLE=str(bundle),
        WARM_BUNDLE_WRITE=off,
        WARM_REPORT=off,
        WARM_EXPLAIN=off,
        WARM_STRICT=off,
    )
    code = SERVE_MATMUL.format(examples=str(EXAMPLES)) + "print(len(r.kernels))\n"
    proc = producing.run(code, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "6" and proc.stderr == "", proc.stderr
    assert bundle.read_bytes() == before


def test_arch_given_a_virtual_architecture_names_no_flag_warm_lacks(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run --arch compute_90` said it "cannot go with --cubin", a flag warm has not."""
    proc = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "compute_90", "-b", tmp_path / "b")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--cubin" not in proc.stderr and "use sm_90" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_merge_creates_at_most_out_s_own_directory(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """A mistyped -o grew a tree of directories (`warm run --bundle` creates at most the
    bundle's own one), and `-o ""` said `.: is a directory`."""
    bundle = tmp_path / "a.warm"
    host_bundle(bundle)
    proc = warm("merge", bundle, "-o", tmp_path / "typo" / "sub" / "m.warm")
    assert proc.returncode == 2 and "no directory" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "typo").exists()
    proc = warm("merge", bundle, "-o", "")
    assert proc.returncode == 2 and "empty" in proc.stderr, proc.stderr
    proc = warm("merge", bundle, "-o", bundle / "m.warm")  # said "(File exists)"
    assert proc.returncode == 2 and f"{bundle} is not a directory" in proc.stderr, proc.stderr
    assert warm("merge", bundle, "-o", tmp_path / "new" / "m.warm").returncode == 0


@pytest.mark.parametrize(
    "option", [("--arch", "sm_90"), ("--device", "host"), ("--entry", "main"), ("--nvcc", "x")]
)
def test_verify_refuses_a_replay_option_without_a_workload(
    warm: Warm, tmp_path: Path, option: tuple[str, str], host_bundle: Callable[[Path], Path]
) -> None:
    """`warm verify B --arch sm_90` checked integrity only and said nothing of --arch, as
    if the bundle had been replayed for sm_90 (the usage nests these under --workload)."""
    bundle = tmp_path / "a.warm"
    host_bundle(bundle)
    proc = warm("verify", bundle, *option)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{option[0]} goes with --workload" in proc.stderr, proc.stderr


def test_check_under_trusted_keys_fails_what_production_would_not_serve(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """A signed bundle then warmed again without a key: production under WARM_TRUSTED_KEYS
    serves none of the new entries (an `unsigned` miss each), but `warm check` under the
    same keys said every entry was servable and exited 0."""
    bundle = tmp_path / "b.warm"
    empty = workload_file("def workload(rt):\n    pass\n")
    assert warm("run", empty, "-b", bundle, "-q").returncode == 0
    assert warm("keygen", tmp_path / "ci.key").returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "ci.key").returncode == 0
    assert warm("run", MATMUL, "-b", bundle, "-q").returncode == 0  # 6 kernels, 3 tunes: unsigned
    trusted = warm.with_env(WARM_TRUSTED_KEYS=str(tmp_path / "ci.key.pub"))
    proc = trusted("check", bundle, "--device", "host", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["unservable_count"] == 9
    assert {e["reason"] for e in doc["unservable"]} == {"unsigned"}
    assert warm("check", bundle, "--device", "host").returncode == 0  # no trusted keys: served
    assert warm("sign", bundle, "--key", tmp_path / "ci.key").returncode == 0
    assert trusted("check", bundle, "--device", "host").returncode == 0


def test_an_empty_module_or_entry_name_is_said_so(warm: Warm, tmp_path: Path) -> None:
    """`-m ""` said `.: is a directory, not a workload file`; `--entry ""` said the file
    `defines no function (runtime)`."""
    proc = warm("run", "-m", "", "-b", tmp_path / "b.warm")
    assert proc.returncode == 2 and "module name is empty" in proc.stderr, proc.stderr
    proc = warm("run", MATMUL, "--entry", "", "-b", tmp_path / "b.warm")
    assert proc.returncode == 2 and "entry function's name is empty" in proc.stderr, proc.stderr
    assert not (tmp_path / "b.warm").exists()


def test_a_write_into_a_folder_not_writable_says_so(warm: Warm, tmp_path: Path) -> None:
    """`warm run -b` (sign, merge) on a bundle in a folder the user may not write said
    `cannot take the write lock ...: No such file or directory`, of a file never named."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv is None:
        pytest.skip("root without setpriv: every folder is writable")
    folder = tmp_path / "ro"
    folder.mkdir()
    bundle = folder / "b.warm"
    assert warm("run", MATMUL, "-b", bundle, "-q").returncode == 0
    assert warm("keygen", tmp_path / "k").returncode == 0
    (folder / "b.warm.lock").unlink()  # a bundle copied in: no writer has been there
    folder.chmod(0o555)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root as an ordinary user: no capability to write others' folders
        os.chown(folder, 65534, 65534)
        caps = "-dac_override,-dac_read_search,-fowner"
        prefix = [str(setpriv), f"--bounding-set={caps}", f"--inh-caps={caps}"]
    sign = [sys.executable, "-m", "warmcli", "sign", str(bundle), "-k", str(tmp_path / "k")]
    try:
        proc = subprocess.run(
            [*prefix, *sign],
            capture_output=True,
            text=True,
            env=warm.env,
            cwd=ROOT,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "No such file" not in proc.stderr and "not writable" in proc.stderr, proc.stderr
    finally:
        folder.chmod(0o755)


def test_merge_into_a_link_loop_names_out_in_one_line(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`-o` a symbolic link loop printed `[Errno 40] Too many levels of symbolic links:
    'loop1.warm'`, no context, where every other command names the bundle."""
    bundle = tmp_path / "a.warm"
    host_bundle(bundle)
    (tmp_path / "loop1.warm").symlink_to(tmp_path / "loop2.warm")
    (tmp_path / "loop2.warm").symlink_to(tmp_path / "loop1.warm")
    proc = warm("merge", bundle, "-o", tmp_path / "loop1.warm", "--force")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[Errno" not in proc.stderr and "nothing was merged" in proc.stderr, proc.stderr


@pytest.mark.parametrize("columns", [59, 60, 62, 64, 66])
def test_a_table_a_little_too_wide_is_shown_as_records(
    warm: Warm, tmp_path: Path, columns: int, host_bundle: Callable[[Path], Path]
) -> None:
    """README: in a terminal too narrow for a table's columns (every name whole, a folding
    column at least 12 wide), a table is shown record after record. Between 59 and 66
    columns the Contents table of the host example folded its first column to 6 cells
    (`tunabl` / `e`, `host|A` / `MD`): the room the table's edges and column separators
    take was not counted."""
    bundle = tmp_path / "a.warm"
    host_bundle(bundle)
    proc = Warm(dict(warm.env, COLUMNS=str(columns)))("stats", bundle)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, proc.stdout
    header = [line for line in lines if "arch" in line and "binary bytes" in line]
    if header:  # shown as a table: the folding column (edge, then padding, a separator) >= 12
        assert header[0].index("arch") - 4 >= 12, proc.stdout


def test_a_first_run_the_disk_refuses_leaves_only_its_lock(warm: Warm, tmp_path: Path) -> None:
    """Under a file size limit smaller than an empty bundle, a first run says the write
    failed (exit 2) and leaves no bundle and no temporary file: only its empty `.lock`,
    which warm never removes while another writer may wait on it (README says so)."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, resource.RLIM_INFINITY))

    bundle = tmp_path / "new.warm"
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(MATMUL), "-b", str(bundle), "-q"],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=ROOT,
        preexec_fn=limited,
    )
    assert proc.returncode == 2 and "a write to the disk failed" in proc.stderr, proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if "new" in p.name)
    assert left in ([], ["new.warm.lock"]), left


def test_a_new_compiler_s_note_does_not_say_the_old_builds_are_not_served(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """README: a warm run with a new compiler builds afresh, while production serves any
    toolchain's build that runs here. The run's note said the old builds were `not served
    on host`, as if production would not serve them."""
    bundle = host_bundle(tmp_path / "a.warm")  # as `warm run MATMUL -b a.warm -q` makes it
    cc = tmp_path / "othercc"
    version = '[ "$1" = --version ] && { echo "othercc 9.9"; exit 0; }'
    cc.write_text(f'#!/bin/sh\n{version}\nexec cc "$@"\n')
    cc.chmod(0o755)
    proc = warm.with_env(WARM_CC=str(cc))("run", MATMUL, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "built by" in text and "not served on host" not in text, text
    assert "production" in text, text


def test_a_crashed_candidate_s_line_shows_its_names_inert(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """The stderr line naming a candidate that crashed printed the tunable's name raw (a
    terminal escape in it reached the terminal), while the note after it escaped it."""
    source = (
        "from warmcli import Kernel, Tunable\n"
        "SRC = 'void k(float *x, int n) { if (BAD) { volatile int *p = 0; *p = 1; }"
        " for (int i = 0; i < n; i++) x[i] += 1.0f; }\\n'\n"
        "T = Tunable(name='op\\x1b[31m', candidates={f'c{b}': Kernel(SRC, 'k', 'Pi',"
        " defines={'BAD': b}) for b in (0, 1)},\n"
        "    launch=lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream))\n"
        "def workload(rt):\n"
        "    rt.tune(T, rt.buffer(16, 'float32'), 16)\n"
    )
    proc = warm("run", workload_file(source), "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "crashed (SIGSEGV); it is excluded" in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "op\\x1b[31m" in proc.stderr, proc.stderr


def test_a_format_warm_does_not_read_names_those_it_does(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`bundle format version 99, this warm reads 1 and 2 and 3`: now as merge says it."""
    bundle = tmp_path / "a.warm"
    host_bundle(bundle)
    with sqlite3.connect(bundle) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    proc = warm("stats", bundle)
    assert proc.returncode == 2, proc.stderr
    assert "format version 99, this warm reads formats 1, 2, 3" in proc.stderr, proc.stderr


def test_max_size_evicts_a_batch_s_kernels_together_when_equally_recent(
    warm: Warm, tmp_path: Path
) -> None:
    """Kernels one run wrote are equally recent; `--max-size` broke the tie by key, which
    spreads over every batch's binary, so to free a few binaries it removed nearly every
    kernel (1,072 of 1,100 to go from 369K to 287K): a binary is freed only with its last
    kernel. Now a kept binary keeps every kernel it holds."""
    bundle = tmp_path / "many.warm"
    # (100 kernels under --jobs 8: 8 binaries of 12 or 13 kernels each, measured (stop 49),
    # as 300 made 8 of 37 or 38: a third of the size to free is still whole binaries, and a
    # tie broken by key still takes kernels out of every binary kept)
    ran = warm.with_env(WARM_EXAMPLE_KERNELS="100")("run", MANY, "-b", bundle, "-q", "--jobs", "8")
    assert ran.returncode == 0, ran.stdout + ran.stderr

    def per_blob() -> dict[str, int]:
        with sqlite3.connect(bundle) as conn:
            rows = conn.execute("SELECT sha256, count(*) FROM kernels GROUP BY sha256").fetchall()
        conn.close()
        return dict(rows)

    before = per_blob()
    assert len(before) > 2, before
    with sqlite3.connect(bundle) as conn:
        total = conn.execute("SELECT sum(size) FROM blobs").fetchone()[0]
    conn.close()
    proc = warm("clean", bundle, "--max-size", str(total * 2 // 3))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = per_blob()
    assert after and all(after[sha] == before[sha] for sha in after), (before, after)
