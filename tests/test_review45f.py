"""Hostile review of unkeyed 45's never-stored kernels and review 45d (review 45f).

- A tunable whose candidate is unkeyed (`warmcli.unkeyed`: `#include` of a macro warm cannot
  tell): its checksum holds the candidate's headers digest, so this process's token, and its
  tune key differs in every process. Each `warm run` stored another pick nobody could hit
  (the bundle grew by one tune row a run), `warm verify --workload` failed (exit 1) on it
  for a valid workload, and production said `re-warm it with warm run`, which serves it
  no better. Now it is never stored, listed as measured in each process, never served, and
  the report says warm never serves it; a miss of another tune still fails verify. (Its
  count was said among the kernels': `compiled 0 kernels a bundle can serve (3 never served),
  measured 0 tunes` for two kernels and the tune.)
Real CLI (each `warm` command a fork of a process that imported the CLI once,
`tests/forked_cli.py`: an unkeyed kernel's token is made on first use, in the fork), real
SQLite bundles, the system C compiler; no fakes.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WHY = "an #include of a macro that is no plain header name (CFG)"
TUNED = """
import os
import warmcli
from warmcli import Kernel, Tunable
SRC = {source!r}
OPTS = ({inc!r},)
def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)
TUNE = Tunable("t", {{f"v{{t}}": Kernel(SRC, "f", "Pi", options=OPTS, defines={{"T": t}})
                     for t in (1, 2)}}, launch)
PLAIN = Tunable("p", {{f"w{{t}}": Kernel("void g(float *x, int n) {{ x[0] = T; }}", "g", "Pi",
                      defines={{"T": t}}) for t in (1, 2)}}, launch)
def workload(rt):
    rt.tune(TUNE, rt.buffer(4, "float32"), 4)
    if os.environ.get("OTHER"):
        rt.tune(PLAIN, rt.buffer(4, "float32"), 4)
if __name__ == "__main__":
    workload(warmcli.runtime())
    print("ok")
"""
UNKEYED = "#define STR(x) #x\n#define CFG STR(val.h)\n#include CFG\n"
UNKEYED += "void f(float *x, int n) { x[0] = VAL * T; }\n"


def _tunes(bundle: Path) -> int:
    with sqlite3.connect(bundle) as conn:
        return int(conn.execute("SELECT count(*) FROM tunes").fetchone()[0])


def test_a_tune_of_unkeyed_candidates_is_never_stored_nor_failed(
    warm: Warm, tmp_path: Path
) -> None:
    """Two runs stored two picks nobody hits; verify failed; production said re-warm."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    script, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    script.write_text(TUNED.format(source=UNKEYED, inc=f"-I{tmp_path / 'inc'}"))
    for _ in range(2):
        made = warm("run", script, "-b", bundle)
        said = made.stdout + made.stderr
        assert made.returncode == 0, said
        assert f"tune t float32[4] 4: not stored: never served ({WHY})" in said, said
    assert _tunes(bundle) == 0, "a pick stored under a key no other process has"
    done = warm("verify", bundle, "--workload", script)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"host: tune t float32[4] 4 is measured in each process, never served ({WHY})" in said
    assert "miss:" not in said, said
    assert "(2 never served), measured 0 tunes a bundle can serve (1 never served)" in said
    failed = Warm(dict(warm.env, OTHER="1"))("verify", bundle, "--workload", script)
    said = failed.stdout + failed.stderr
    assert failed.returncode == 1, said  # another tune's miss still fails
    assert "host: 1 tune(s) measured, not in the bundle" in said, said
    assert "miss: tune p" in said and "miss: tune t" not in said, said
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_REPORT="1")
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr
    assert "warm never serves them: each says why" in ran.stderr, ran.stderr
    assert f"tune t float32[4] 4 (never served: {WHY}: nothing stored)" in ran.stderr
    strict = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        env=dict(env, WARM_STRICT="1"),
    )  # fmt: skip
    assert strict.returncode == 1, strict.stderr
    assert "(StrictMissError): warm never serves them: each says why" in strict.stderr


CUDA = """
import warmcli
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = {source!r}
def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, grid=1, block=1, stream=stream)
TUNE = Tunable("t", {{f"v{{t}}": Kernel(SRC, "f", "Pi", language="cuda", options=({inc!r},),
                     defines={{"T": t}}) for t in (1, 2)}}, launch)
def workload(rt):
    rt.tune(TUNE, rt.buffer(4, "float32"), 4)
"""


def test_a_compile_only_verify_lists_a_reached_unkeyed_tune(warm: Warm, tmp_path: Path) -> None:
    """`--arch sm_90` (no GPU): `warm verify -w` failed on the tune the run had stored as
    pending under its own process's key: `1 tune(s) reached, not recorded in the bundle`."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    source = UNKEYED.replace("void f", 'extern "C" __global__ void f')
    script, bundle = tmp_path / "c.py", tmp_path / "c.warm"
    script.write_text(CUDA.format(source=source, inc=f"-I{tmp_path / 'inc'}"))
    made = warm("run", script, "-b", bundle, "--arch", "sm_90", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    done = warm("verify", bundle, "-w", script, "--arch", "sm_90", "-q")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"sm_90: tune t float32[4] 4 is measured in each process, never served ({WHY})" in said
    assert _tunes(bundle) == 0, "a pending pick stored under a key no other process has"


SHARDED = """
import warmcli
from warmcli import Kernel, Tunable
SRC = {source!r}
ZERO = Kernel("void z(float *x, int n) {{ x[0] = 0; }}\\n", "z", "Pi")
def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(ZERO, x, n, stream=stream)
    rt.launch(kernel, x, n, stream=stream)
TUNE = Tunable("t", {{f"v{{t}}": Kernel(SRC, "f", "Pi", options=({inc!r},), defines={{"T": t}})
                     for t in (1, 2)}}, launch)
def workload(rt):
    rt.tune(TUNE, rt.buffer(4, "float32"), 4)
"""
OWNER = """
import runpy, sys
from warmcli.runtime.shard import Shard, shard_checksum, tune_token
T = runpy.run_path(sys.argv[1])["TUNE"]
token = tune_token("t", "float32[4] 4", shard_checksum(T))
print([Shard(i, 8).owns(token) for i in range(8)])
"""


def test_shards_agree_on_the_shard_of_an_unkeyed_tune(warm: Warm, tmp_path: Path) -> None:
    """Each shard's process told the tune's shard by its checksum, its own (the candidate's
    token): about one run in four of two shards, no shard measured it, so none built `z`,
    the normal kernel its launch function launches: the merged bundle lacked it, its verify
    failed (exit 1) and production built it every time. Now every process tells one shard."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    script = tmp_path / "s.py"
    script.write_text(SHARDED.format(source=UNKEYED, inc=f"-I{tmp_path / 'inc'}"))
    owners = [
        subprocess.run(
            [sys.executable, "-c", OWNER, str(script)],
            capture_output=True,
            text=True,
            env=warm.env,
            timeout=60,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert owners[0] == owners[1] and owners[0].count("True") == 1, owners
    parts = [tmp_path / f"s{i}.warm" for i in range(2)]
    for i, part in enumerate(parts):
        assert warm("run", script, "-b", part, "--shard", f"{i}/2", "-q").returncode == 0
    merged = tmp_path / "m.warm"
    assert warm("merge", "-o", merged, *parts).returncode == 0
    done = warm("verify", merged, "-w", script, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(merged) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1  # `z`


def test_an_include_a_raw_string_hides_from_both_scans_is_keyed(tmp_path: Path) -> None:
    """`R"x(a"/*)x";` then `#/**/include "b.h"`: gcc (GNU C, C++) reads a raw string and then
    the include; the plain scan misses `#/**/include` and the spliced one read `"x(a"` as a
    string and `/*)x"; ... #/**/` as a comment: b.h unkeyed, an edited b.h served the old
    build. Now the spliced scan reads raw strings too (and as C without them reads them)."""
    from warmcli.kernel import Kernel, kernel_key

    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "b.h"
    options = (f"-I{tmp_path / 'inc'}",)
    body = "// */\nvoid f(float *x) { x[0] = VAL; }\n"
    for spelled in ('#/**/include "b.h"\n', '#inc\\\nlude "b.h"\n', '%:/**/include "b.h"\n'):
        for raw in ('R"x(a"/*)x";', 'u8R"(a"/*)";', 'LR"--(")--" "/*)--";'):
            kernel = Kernel(f"const char *s = {raw}\n{spelled}{body}", "f", "P", options=options)
            header.write_text("#define VAL 1\n")
            first = kernel_key(kernel, "x86_64", "cc:test")
            header.write_text("#define VAL 2\n")
            assert kernel_key(kernel, "x86_64", "cc:test") != first, (raw, spelled)
