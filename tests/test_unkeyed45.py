"""An unkeyed kernel (`warmcli.unkeyed`) is never stored nor failed by verify; once-only copies
are told by real directives (unkeyed 45).

- Each `warm run` (and each production process writing its misses back) stored another build
  of a kernel whose key holds its process's token, rows no other process can ever hit: a
  bundle grew without bound. Now it is never stored, and the run and the report say why.
- `warm verify --workload` (and `warm run`'s own verify pass, once nothing unkeyed is stored)
  builds it again, a miss: verify failed (exit 1) for a valid workload. Now it is listed as
  built in each process and never served, not as a miss; any other miss still fails.
- `once_copies` took any header whose text held `once` or `import` ("important",
  "call_once") as once-only, so two identical copies keyed by their files' modification
  seconds: a checkout whose copies fell in other seconds missed at random. Now only a real
  `#pragma once` or `#import` directive (a comment holds none), or a `_Pragma` that may say
  `once` (a macro of another header may give it), counts.
Real CLI (each `warm` command a fork of a process that imported the CLI once,
`tests/forked_cli.py`: an unkeyed kernel's token is made on first use, in the fork), its
production processes forks likewise (`tests/forked_python.py`), real SQLite bundles, the
system C compiler; no fakes.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from forked_python import ForkedPython

from warmcli.kernel import Kernel, kernel_key

WORKLOAD = """
import os
import warmcli
from warmcli import Kernel
DEVICE = "host"
K = Kernel({source!r}, "f", "P", options={options!r})
OTHER = Kernel("void g(float *x) {{ x[0] = 7.0f; }}\\n", "g", "P")
def workload(rt):
    rt.launch(K, rt.buffer(1, "float32"))
    if os.environ.get("OTHER"):
        rt.launch(OTHER, rt.buffer(1, "float32"))
if __name__ == "__main__":
    rt = warmcli.runtime()
    b = rt.buffer(1, "float32")
    rt.launch(K, b)
    print(rt.read(b)[0])
"""
UNKEYED = "#define STR(x) #x\n#define CFG STR(val.h)\n#include CFG\n"
UNKEYED += "void f(float *x) { x[0] = VAL; }\n"
WHY = "an #include of a macro that is no plain header name (CFG)"


def _script(tmp_path: Path, source: str = UNKEYED) -> Path:
    (tmp_path / "inc").mkdir(exist_ok=True)
    (tmp_path / "inc" / "val.h").write_text("#define VAL 1\n")
    script = tmp_path / "w.py"
    script.write_text(WORKLOAD.format(source=source, options=(f"-I{tmp_path / 'inc'}",)))
    return script


def _rows(bundle: Path) -> int:
    with sqlite3.connect(bundle) as conn:
        return int(conn.execute("SELECT count(*) FROM kernels").fetchone()[0])


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The module's production processes (`python w.py`), each a fork of one that imported
    numpy and warmcli (`tests/forked_python.py`; an unkeyed kernel's token is made on first
    use, in the fork): what each computes, reports and writes back is tested."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)  # (conftest's `warm`'s, its home aside)
    yield server
    server.close()


def _production(
    producing: ForkedPython, warm: Warm, tmp_path: Path, script: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = dict(warm.env, WARM_BUNDLE=str(tmp_path / "b.warm"), WARM_REPORT="1", **env)
    return producing.run(script, env=environ, cwd=tmp_path, timeout=120)


def test_an_unkeyed_kernel_is_never_stored(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    """Two `warm run`s and a production process writing back stored 3 builds nobody can hit;
    now none, each run saying why and its verify pass passing."""
    script, bundle = _script(tmp_path), tmp_path / "b.warm"
    for _ in range(2):
        made = Warm(dict(warm.env, OTHER="1"))("run", script, "-b", bundle)
        said = made.stdout + made.stderr
        assert made.returncode == 0, said
        assert f"kernel f: not stored: never served ({WHY})" in said, said
        assert "the bundle is complete" in said, said
    assert "stored 0 new kernel(s)" in said, said  # the second run: `g` stored by the first
    assert _rows(bundle) == 1  # `g` only
    done = _production(producing, warm, tmp_path, script, WARM_BUNDLE_WRITE="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1.0"
    assert _rows(bundle) == 1
    assert f"kernel f (never served: {WHY}: nothing stored)" in done.stderr, done.stderr
    assert "none of them stored: each says why" in done.stderr, done.stderr
    done = _production(producing, warm, tmp_path, script)  # not writing: no re-warm would serve it
    assert "warm never serves them: each says why" in done.stderr, done.stderr
    done = _production(producing, warm, tmp_path, script, WARM_STRICT="1")  # refused: nor here
    assert done.returncode == 1, done.stderr
    assert "(StrictMissError): warm never serves them: each says why" in done.stderr
    stats = warm("stats", bundle)
    assert "Kernels (1)" in stats.stdout, stats.stdout


def test_verify_passes_a_workload_whose_only_misses_are_never_served(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm verify --workload` failed (exit 1) for a kernel warm says it never serves; it is
    listed as such now, and any other miss still fails."""
    script, bundle = _script(tmp_path), tmp_path / "b.warm"
    assert warm("run", script, "-b", bundle, "-q").returncode == 0
    done = warm("verify", bundle, "--workload", script)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"host: kernel f is built in each process, never served ({WHY})" in said, said
    assert "miss:" not in said, said
    other = dict(warm.env, OTHER="1")  # `g`, which the bundle lacks: a miss
    failed = Warm(other)("verify", bundle, "--workload", script)
    said = failed.stdout + failed.stderr
    assert failed.returncode == 1, said
    assert "host: 1 kernel(s) compiled, not in the bundle" in said, said
    assert "miss: kernel g" in said and "miss: kernel f" not in said, said
    as_json = warm("verify", bundle, "--workload", script, "--json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    assert '"never_served"' in as_json.stdout and WHY in as_json.stdout


def _copies(tmp_path: Path, text: str, extra: str = "") -> tuple[str, tuple[str, ...]]:
    """`a/c.h` and `b/c.h` (`text`, one second), a source including both; its options."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "c.h").write_text(text)
        os.utime(tmp_path / folder / "c.h", (1577836800, 1577836800))
    (tmp_path / "o.h").write_text(extra)
    source = 'float v = 0\n#include "o.h"\n#include "a/c.h"\n#include "b/c.h"\n;\n'
    source += "void f(float *x) { x[0] = v; }\n"
    return source, (f"-I{tmp_path}",)


def _expanded(tmp_path: Path, source: str, options: tuple[str, ...]) -> str:
    (tmp_path / "s.c").write_text(source)
    cpp = ["cc", "-E", "-P", *options, str(tmp_path / "s.c")]
    return " ".join(subprocess.run(cpp, capture_output=True, text=True, check=True).stdout.split())


def _key(source: str, options: tuple[str, ...]) -> str:
    return kernel_key(Kernel(source, "f", "P", options=options), "x86_64", "cc:test")


def test_copies_are_once_only_by_real_directives_only(tmp_path: Path) -> None:
    """A word holding `once` or `import`, or a directive in a comment, made the key follow the
    copies' seconds, where cc reads both copies either way; `#pragma once` (spliced too),
    `#import`, `_Pragma("once")` and a macro of another header giving it still do."""
    cases = {
        "+1 /* important: call_once */\n// #pragma once\n/* #import <x.h> */\n": False,
        "#pra\\\ngma once\n+1\n": True,
        "%:pragma once\n+1\n": True,
        '_Pragma("once")\n+1\n': True,
        "ONCE\n+1\n": True,  # `o.h` defines ONCE as `_Pragma("once")`
    }
    for text, once in cases.items():
        extra = '#define ONCE _Pragma("once")\n' if "ONCE" in text else ""
        source, options = _copies(tmp_path, text, extra)
        alike, alike_key = _expanded(tmp_path, source, options), _key(source, options)
        os.utime(tmp_path / "b" / "c.h", (1577836805, 1577836805))
        assert (_expanded(tmp_path, source, options) != alike) is once, text  # what cc does
        assert (_key(source, options) != alike_key) is once, text


def test_copies_in_other_seconds_are_served_end_to_end(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    """Copies of a header that says `important`, warmed, then restored in other seconds (a CI
    cache): a production process under WARM_STRICT=1 was refused; now it is served."""
    source, options = _copies(tmp_path, "+1 /* important */\n")
    script = tmp_path / "w.py"
    script.write_text(WORKLOAD.format(source=source, options=options))
    assert warm("run", script, "-b", tmp_path / "b.warm", "-q").returncode == 0
    os.utime(tmp_path / "b" / "c.h", (1577836805, 1577836805))
    done = _production(producing, warm, tmp_path, script, WARM_STRICT="1")
    said = done.stdout + done.stderr
    assert done.returncode == 0 and done.stdout.strip() == "2.0", said  # both copies read


def test_a_dask_run_stores_and_fails_no_unkeyed_kernel(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    """`warm run --dask`: its shard stored the kernel under the worker's token and its verify,
    in the caller's process, failed on it (exit 1); now neither."""
    pytest.importorskip("distributed")
    script, bundle = _script(tmp_path), tmp_path / "b.warm"
    done = warm("run", script, "-b", bundle, "--dask", dask_scheduler, "-q")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"host: kernel f is built in each process, never served ({WHY})" in said, said
    assert "stored 0 new kernel(s)" in said and _rows(bundle) == 0, said


CUDA = """
import warmcli
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel({source!r}, "f", "P", language="cuda", options={options!r})
def workload(rt):
    rt.launch(K, rt.buffer(1, "float32"), grid=1, block=1)
"""


def test_a_compile_only_verify_lists_a_queued_unkeyed_kernel(warm: Warm, tmp_path: Path) -> None:
    """`--arch sm_90` (no GPU): the verify pass only queues, and an unkeyed NVRTC kernel it
    queued was `1 kernel(s) queued, not in the bundle` (exit 1), once none is stored."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    _script(tmp_path)
    source = UNKEYED.replace("void f", 'extern "C" __global__ void f')
    script = tmp_path / "c.py"
    script.write_text(CUDA.format(source=source, options=(f"-I{tmp_path / 'inc'}",)))
    bundle = tmp_path / "c.warm"
    made = warm("run", script, "-b", bundle, "--arch", "sm_90", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    done = warm("verify", bundle, "-w", script, "--arch", "sm_90", "-q")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"sm_90: kernel f is built in each process, never served ({WHY})" in said, said
    assert _rows(bundle) == 0
