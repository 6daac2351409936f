"""The production side in real subprocesses: a partial bundle, the report of what it lacked,
read-only serving that never writes, and write-back from two processes at once."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

MATMUL = EXAMPLES / "matmul_host.py"
SERVE = SERVE_MATMUL + "print(len(r.kernels), len(r.tunes))\n"


def serve(warm: Warm, bundle: Path, **env: str) -> subprocess.Popen[str]:
    code = SERVE.format(examples=str(EXAMPLES))
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=dict(warm.env, WARM_BUNDLE=str(bundle), **env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out, err


def partial_bundle(path: Path) -> str:
    """The bundle at `path` (the host example's, as `warm run` makes it: conftest's
    `host_bundle`), then missing row_sum and the 64x64 tune; its shape key."""
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM kernels WHERE entry = 'row_sum'")
    shape = conn.execute(
        "SELECT shape_key FROM tunes WHERE shape_key LIKE 'float32[64x64]%'"
    ).fetchone()[0]
    conn.execute("DELETE FROM tunes WHERE shape_key = ?", (shape,))
    conn.commit()
    conn.close()
    return shape


def test_partial_bundle_reports_exactly_what_was_missing(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    shape = partial_bundle(host_bundle(bundle_path))
    before = hashlib.sha256(bundle_path.read_bytes()).hexdigest()
    out, err = finish(serve(warm, bundle_path, WARM_REPORT="1"))
    assert out.split() == ["1", "1"]
    lines = err.strip().splitlines()
    assert "lacked 1 kernel(s) and 1 tune(s)" in lines[0]
    assert "re-warm" in lines[0]
    assert sorted(line.split(" on ")[0].strip() for line in lines[1:]) == [
        "kernel row_sum",
        f"tune matmul {shape}",
    ]
    assert hashlib.sha256(bundle_path.read_bytes()).hexdigest() == before, "read-only"
    assert warm("verify", bundle_path, "--workload", MATMUL).returncode == 1

    quiet_out, quiet_err = finish(serve(warm, bundle_path))
    assert quiet_out.split() == ["1", "1"] and "lacked" not in quiet_err


def test_write_back_from_two_processes_completes_the_bundle(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    partial_bundle(host_bundle(bundle_path))
    procs = [serve(warm, bundle_path, WARM_BUNDLE_WRITE="1", WARM_REPORT="1") for _ in range(2)]
    errs = [finish(proc)[1] for proc in procs]
    # One may start reading after the other wrote back at exit: then it missed nothing.
    assert any("written back" in e for e in errs)
    assert all("written back" in e or "served everything" in e for e in errs)
    assert warm("verify", bundle_path, "--workload", MATMUL).returncode == 0
    _, err = finish(serve(warm, bundle_path, WARM_REPORT="1"))
    assert "served everything" in err


def test_one_runtime_per_device_however_it_is_named(monkeypatch) -> None:
    """`runtime("auto")` and `runtime(<its device id>)` are the same runtime: one kernel cache,
    one default stream, each miss reported once."""
    import warmcli
    from warmcli import Kernel

    for name in ("WARM_BUNDLE", "WARM_STRICT", "WARM_EXPLAIN", "WARM_BUNDLE_WRITE"):
        monkeypatch.delenv(name, raising=False)
    warmcli.production.close()
    try:
        rt = warmcli.runtime("auto")
        assert warmcli.runtime(rt.device.id) is rt
        assert warmcli.runtime("auto") is rt
        if rt.device.id == "host":
            kernel = Kernel("void once_per_device(float *x) { x[0] = 1; }", "once_per_device", "P")
            for named in ("auto", "host"):
                warmcli.runtime(named).launch(kernel, warmcli.runtime(named).buffer(1))
            misses = [m for m in warmcli.report().misses if m.name == "once_per_device"]
            assert len(misses) == 1
    finally:
        warmcli.production.close()


def test_the_report_is_about_the_bundle_in_use(tmp_path: Path, monkeypatch) -> None:
    import warmcli
    from warmcli import Bundle, Kernel

    for name in ("WARM_BUNDLE", "WARM_STRICT", "WARM_EXPLAIN", "WARM_BUNDLE_WRITE"):
        monkeypatch.delenv(name, raising=False)
    first, second = tmp_path / "first.warm", tmp_path / "second.warm"
    for path in (first, second):
        Bundle.create(path).close()
    try:
        warmcli.use_bundle(first)
        kernel = Kernel("void only_first(float *x) { x[0] = 1; }", "only_first", "P")
        rt = warmcli.runtime("host")
        rt.launch(kernel, rt.buffer(1))
        assert [m.name for m in warmcli.report().misses] == ["only_first"]
        warmcli.use_bundle(second)
        assert warmcli.report().misses == []
        assert warmcli.report().bundle == str(second)
    finally:
        warmcli.production.close()


def test_a_write_back_that_fails_at_exit_is_one_line_and_loses_nothing(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """The bundle's write lock cannot be taken when the process exits: one line on stderr,
    no traceback, and the bundle still serves what it held."""
    partial_bundle(host_bundle(bundle_path))
    lock = Path(f"{bundle_path}.lock")
    lock.unlink(missing_ok=True)
    lock.mkdir()  # a lock file that cannot be made
    out, err = finish(serve(warm, bundle_path, WARM_BUNDLE_WRITE="1"))
    assert out.split() == ["1", "1"]
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("warm: could not write back into the bundle: ")
    assert "cannot take the write lock" in line
    lock.rmdir()
    assert len(warm.json("stats", bundle_path)["kernels"]) == 5
