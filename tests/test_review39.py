"""Review of stop 39's first merges (passover39, serve39, leftovers39), and the one left open.

Real parts only: the CLI in subprocesses, NVRTC for `--arch sm_90` (no GPU), real SQLite
files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)
from test_leftovers39 import cuda_small, signed_small  # noqa: F401  (the fixtures)

# Every cubin (sm_90) row of the CUDA example pointed at its PTX twin's blob (sha256 right).
PTX_AS_CUBIN = (
    "UPDATE kernels SET sha256 = (SELECT c.sha256 FROM kernels c WHERE c.arch = "
    "'compute_90' AND c.symbol = kernels.symbol) WHERE arch = 'sm_90'"
)


# Every sm_90 row of an sm_80 + sm_90 pre-build pointed at its sm_80 twin's cubin.
SM80_AS_SM90 = (
    "UPDATE kernels SET sha256 = (SELECT c.sha256 FROM kernels c WHERE c.arch = 'sm_80' "
    "AND c.label = kernels.label) WHERE arch = 'sm_90'"
)


@pytest.fixture(scope="module")
def two_archs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CUDA example pre-built for sm_80 and sm_90 without a GPU (NVRTC), made once."""
    nvrtc_release_or_skip()
    folder = tmp_path_factory.mktemp("two39")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(folder / "home")))
    bundle = folder / "two.warm"
    run = ("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_80", "--arch", "sm_90", "-b", bundle)
    done = warm(*run, "-q")
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    return bundle


def _edit(bundle: Path, sql: str) -> None:
    with sqlite3.connect(bundle) as conn:
        conn.execute(sql)
    conn.close()


@pytest.mark.parametrize("edit", [PTX_AS_CUBIN, SM80_AS_SM90], ids=["ptx", "sm_80"])
def test_a_rewarm_rebuilds_a_cubin_row_whose_blob_is_not_its_cubin(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    two_archs: Path,
    edit: str,
) -> None:
    """`warm run --arch sm_90` over a bundle whose sm_90 (cubin) rows hold PTX (or sm_80's
    cubins) counted them as hits (under --arch nothing loads; the GPU-less device even takes
    PTX it can JIT) and said "the bundle is complete", though `warm verify` names each as
    corrupt. A re-warm treats such a row as corrupt: it is rebuilt and stored, and the
    bundle is sound after."""
    bundle = tmp_path / "wrong-kind.warm"
    bundle.write_bytes((cuda_small if edit == PTX_AS_CUBIN else two_archs).read_bytes())
    _edit(bundle, edit)
    assert warm("verify", bundle).returncode == 1
    done = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    assert "stored 8 new kernel(s)" in done.stdout, done.stdout
    assert "the bundle is complete" in done.stdout, done.stdout
    checked = warm("verify", bundle)
    assert checked.returncode == 0, checked.stdout[-1500:]


def test_serving_refuses_a_cubin_row_whose_blob_is_ptx(
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
) -> None:
    """Served (Execute, the GPU-less sm_90 device standing in for a GPU, as other tests do),
    a cubin row holding PTX was loaded as a hit: a GPU's driver would JIT it, though `warm
    check --arch sm_90` calls it not servable. It is not served (a `binary` miss, named):
    the kernel's own PTX row is (JIT, as for a GPU newer than its cubins)."""
    import runpy

    from warmcli import ProcessMode, ProcessModeOverride, Runtime
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.bundle.store import Bundle

    bundle = tmp_path / "ptx-as-cubin.warm"
    bundle.write_bytes(cuda_small.read_bytes())
    _edit(bundle, PTX_AS_CUBIN)
    kernels = list(runpy.run_path(str(EXAMPLES / "saxpy_cuda.py"))["SAXPY"].candidates.values())
    with Bundle.open(bundle) as held, ProcessModeOverride(ProcessMode.EXECUTE) as seen:
        rt = Runtime(ArchDevice("sm_90", compiler="nvrtc"), held)
        for k in kernels:
            rt.kernels.get(k)
    counts = seen.reader().compilation
    assert (counts.loaded, counts.ptx_jit, counts.compiled) == (4, 4, 0), counts
    assert counts.misses == {"binary": 4}, counts
    assert any("PTX, not a cubin for sm_90" in n for n in seen.reader().notes())
    # the untouched bundle: every one served
    with Bundle.open(cuda_small) as held, ProcessModeOverride(ProcessMode.EXECUTE) as seen:
        rt = Runtime(ArchDevice("sm_90", compiler="nvrtc"), held)
        for k in kernels:
            rt.kernels.get(k)
    counts = seen.reader().compilation
    assert (counts.loaded, counts.compiled) == (len(kernels), 0), counts


def test_a_key_str_never_shares_a_tune_key_with_a_dict_whose_keys_read_alike() -> None:
    """leftovers39 tags a `key=` str that is another value's JSON text, found by reading it
    and writing it again; a dict whose keys stringify alike (`{1: "a", "1": "b"}`) writes
    an object with a key twice, which reads back as one pair: its text was not tagged, and
    the str and the dict shared one tune key. Every other key is unchanged."""
    from warmcli.runtime.tune_spec import key_text

    for value in ({1: "a", "1": "b"}, {None: 1, "null": 2}, {True: [1], "true": {2: 3, "2": 4}}):
        text = key_text("t", value)
        assert key_text("t", text) == "str:" + text, text
    assert key_text("t", '{"1": "a", "1": "b"}') == 'str:{"1": "a", "1": "b"}'
    for same in ('{"1":"a"}', '{"a": 1, "a" : 2}', "1e5", "[1,2]", "M=64"):  # no value's text
        assert key_text("t", same) == same
    assert key_text("t", {"a": 1}) == '{"a": 1}' and key_text("t", '{"a": 1}') == 'str:{"a": 1}'


def test_check_never_calls_entries_of_a_backend_no_warm_has_unchecked(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
) -> None:
    """leftovers39 made `warm check` skip (never failing) the entries of a backend with no
    device here, meant for CUDA without a GPU; it skipped any backend a row names: a
    bundle from elsewhere whose rows name backends no warm has was "every entry checked is
    servable here" (exit 0), with a line and a JSON member per backend named (200,000 rows
    naming 200,000 backends: 200,002 lines, 54 s; memory grew with them). Such an entry
    is not servable, as before (a `device` row each, listed within the bound); only a
    backend warm serves (CUDA) is not checked."""
    _, _, host = signed_small
    bundle = tmp_path / "others.warm"
    bundle.write_bytes(host.read_bytes())
    with sqlite3.connect(bundle) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(kernels)")]
        row = dict(zip(cols, conn.execute("SELECT * FROM kernels").fetchone(), strict=True))
        for n in range(3):  # an older warm's row (no `kernel` component): any key
            key = f"{n + 1:016x}"
            row.update(key=key + "0" * 48, symbol=f"warm_{key}_{row['entry']}", components="{}")
            row.update(backend=f"tpu{n}", device=f"tpu{n}|x")
            conn.execute(
                f"INSERT INTO kernels VALUES ({', '.join('?' * len(cols))})", [*row.values()]
            )
    conn.close()
    done = warm("check", bundle, "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and not doc["servable"], done.stdout[-1500:]
    assert doc["not_checked"] == {}, doc["not_checked"]
    assert {(m["reason"], m["kind"]) for m in doc["unservable"]} == {("device", "kernel")}
    assert doc["unservable_count"] == 3
    said = warm("check", bundle)
    assert said.returncode == 1 and "not checked" not in said.stdout, said.stdout


# Runs `warm ARGS...` sending itself SIGINT as function WARM_TEST_AT of warm's returns, once
# function WARM_TEST_AFTER (if set) has returned: a precise point.
AT_RETURN = """
import os, signal, sys
at, after, sent = os.environ["WARM_TEST_AT"], os.environ.get("WARM_TEST_AFTER"), []
def trace(frame, event, arg):
    global after
    name = frame.f_code.co_name
    if event == "return" and "warmcli" in frame.f_code.co_filename and not sent:
        if name == at and after is None:
            sent.append(os.kill(os.getpid(), signal.SIGINT))
        after = None if name == after else after
    return trace
sys.argv[0] = "warm"
from warmcli.__main__ import main
sys.settrace(trace)
main()
"""


@pytest.mark.parametrize("at", ["sign_path", "guarded"])
def test_an_interrupt_once_sign_has_committed_says_it_was_signed_at_every_step(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    at: str,
) -> None:
    """`warm sign` says what it signed (kept) for an interrupt once its signature is
    committed, but one landing after the signing returned its result (as `sign_path`
    returns, or the guard around it), before the report, said a bare `warm: interrupted`
    (exit 130) of a bundle that was signed. Every such point says it was signed (kept)."""
    key, _, unsigned = signed_small
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(unsigned.read_bytes())
    env = dict(warm.env, WARM_TEST_AT=at, WARM_TEST_AFTER="sign_path")
    if at == "sign_path":
        del env["WARM_TEST_AFTER"]
    proc = subprocess.run(
        [sys.executable, "-c", AT_RETURN, "sign", str(bundle), "--key", str(key)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM signatures").fetchone() == (1,)
    conn.close()
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted: signed" in proc.stderr and "(kept)" in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_an_interrupt_as_clean_returns_says_what_it_removed(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
) -> None:
    """The same window in `warm clean`: an interrupt landing as its clean returned (the
    removal committed, the report not yet handed to the command) said a bare `warm:
    interrupted` of 8 kernels removed. It says what it removed (kept)."""
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(cuda_small.read_bytes())
    _edit(bundle, PTX_AS_CUBIN)  # 8 corrupt kernels: clean removes them
    env = dict(warm.env, WARM_TEST_AT="clean_bundle")
    proc = subprocess.run(
        [sys.executable, "-c", AT_RETURN, "clean", str(bundle)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (8,)
    conn.close()
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted: removed 8 kernel(s) and 0 tune(s) (kept" in proc.stderr, proc.stderr


def test_an_interrupt_as_merge_returns_says_what_it_merged(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    signed_small: tuple[Path, Path, Path],  # noqa: F811
) -> None:
    """The same window in `warm merge`: an interrupt landing as its merge returned (OUT in
    place, the report not yet handed to the command) said a bare `warm: interrupted` of a
    complete merge, kept. It says what it merged (kept)."""
    out = tmp_path / "out.warm"
    env = dict(warm.env, WARM_TEST_AT="merge_bundles")
    proc = subprocess.run(
        [sys.executable, "-c", AT_RETURN, "merge", str(signed_small[2]), str(cuda_small), "-o",
         str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert warm("verify", out).returncode == 0
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted: merged" in proc.stderr and "(kept)" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["pull", "push"])
def test_an_interrupt_as_pull_or_push_returns_says_it_was_done(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    s3_like: tuple[S3Like, str],  # noqa: F811
    command: str,
) -> None:
    """The same window in `warm pull` and `warm push`: an interrupt landing as the pull's
    copy (PATH in place) or the push (the store holding the bundle) returned said a bare
    `warm: interrupted`. Each says what it did (kept)."""
    held, base = s3_like
    bundle, url = signed_small[1], f"{base}/r39.warm"
    target = tmp_path / "pulled.warm"
    if command == "pull":
        held.files["/r39.warm"] = bundle.read_bytes()
        args, at = ("pull", url, str(target)), "copy_into"
    else:
        args, at = ("push", str(bundle), url), "push"
    env = dict(warm.env, WARM_TEST_AT=at)
    proc = subprocess.run(
        [sys.executable, "-c", AT_RETURN, *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    if command == "pull":
        assert target.read_bytes() == bundle.read_bytes()
    else:
        assert held.files["/r39.warm"] == bundle.read_bytes()
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert f"interrupted: {command}ed" in proc.stderr and "(kept)" in proc.stderr, proc.stderr


def test_the_cache_folder_of_a_set_of_trusted_keys_is_one_however_they_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """leftovers39 keeps a keyed reader's copy in a folder named by its keys, whatever
    their order; a key named twice (its file, and a folder holding it) named another folder:
    a second download and a second copy, the last good one not shared. One set, one folder."""
    from warmcli.bundle.remote import cache_dir

    monkeypatch.setenv("WARM_HOME", str(tmp_path))
    url, a, b = "https://example.test/b.warm", b"a" * 32, b"b" * 32
    one = cache_dir(url, [a, b])
    assert cache_dir(url, [b, a]) == one == cache_dir(url, [a, b, a])
    assert len({cache_dir(url), cache_dir(url, [a]), one}) == 3


@pytest.mark.parametrize("signed", [True, False])
def test_an_upgraded_keyed_reader_keeps_its_last_good_copy_when_the_store_fails(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    s3_like: tuple[S3Like, str],  # noqa: F811
    signed: bool,
) -> None:
    """Before leftovers39 every reader of a URL kept its copy in one folder; a reader under
    trusted keys now keeps its own beside it, so a machine upgraded had none there: its
    first production start with the store failing (here: the object gone, 404) raised
    `RemoteError` where the warm before served the last good copy. The copy in the old
    folder is taken in where the keys trust it (checked as any download is): served, with
    the one warning; one they do not trust is never taken (the start fails, as with none)."""
    from test_leftovers39 import _serve

    held, base = s3_like
    key, bundle, unsigned = signed_small
    url = f"{base}/up39.warm"
    held.files["/up39.warm"] = (bundle if signed else unsigned).read_bytes()
    machine = dict(warm.env, WARM_HOME=str(tmp_path / "machine"))
    assert _serve(machine, url).returncode == 0  # the copy every reader kept before
    del held.files["/up39.warm"]
    keyed = dict(machine, WARM_TRUSTED_KEYS=f"{key}.pub")
    started = _serve(keyed, url)
    if signed:
        assert started.returncode == 0 and started.stdout == "0 0\n", started.stderr
        assert "using the last good copy" in started.stderr, started.stderr
    else:
        assert started.returncode != 0 and "RemoteError" in started.stderr, started.stderr
        kept = [p.name for p in (tmp_path / "machine" / "remote").glob("*-*/*")]
        assert "bundle.warm" not in kept, kept
