"""The real CLI in a subprocess, end to end on the host example, and its bad-input paths."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.file import FORMAT_VERSION

MATMUL = EXAMPLES / "matmul_host.py"


def test_run_stats_verify_end_to_end(warm: Warm, bundle_path: Path) -> None:
    doc = warm.json("run", MATMUL, "--bundle", bundle_path, "--jobs", "2")  # (as on 2 cores)
    first, second, third = doc["passes"]
    assert first["mode"] == "CompileOnly"
    assert first["compilation"]["queued"] > 0
    assert first["compilation"]["compiled"] == 0
    assert first["execution"]["executed"] == 0
    assert second["mode"] == "CompileAndAutotune"
    c = second["compilation"]
    assert c["batches"] >= 1 and c["compiled"] == first["compilation"]["queued"]
    assert c["compiler_processes"] < c["compiled"], "several kernels per compiler process"
    assert second["autotune"]["measured"] == second["autotune"]["registered"] == 3
    assert second["autotune"]["persisted"] == 3
    assert third["mode"].startswith("Verify")
    assert third["compilation"]["compiled"] == 0
    assert third["autotune"]["measured"] == 0
    assert third["autotune"]["hits"] == 3
    assert doc["verified"] is True and doc["missing"] == []
    assert doc["bundle"] == str(bundle_path)

    stats = warm.json("stats", bundle_path)
    manifest = stats["manifest"]
    assert manifest["format_version"] == FORMAT_VERSION
    assert isinstance(manifest["warm_version"], str)
    assert isinstance(manifest["created"], float) and manifest["updated"] >= manifest["created"]
    assert len(stats["kernels"]) == c["compiled"] == 6
    assert {k["entry"] for k in stats["kernels"]} == {"matmul", "bias_relu", "row_sum"}
    for k in stats["kernels"]:
        assert set(k) >= {"key", "device", "arch", "entry", "bytes", "sha256"}
        assert k["bytes"] > 0 and len(k["sha256"]) == 64
    assert len(stats["tunes"]) == 3
    for t in stats["tunes"]:
        assert t["operation"] == "matmul"
        assert t["pick"] in {c["name"] for c in t["candidates"]}
        assert len(t["candidates"]) == 4
        assert all(c["status"] == "ok" and c["seconds"] > 0 for c in t["candidates"])
        pick = next(c for c in t["candidates"] if c["name"] == t["pick"])
        assert pick["seconds"] == min(c["seconds"] for c in t["candidates"])

    verified = warm.json("verify", bundle_path, "--workload", MATMUL)
    assert verified["verified"] is True
    assert verified["compilation"]["compiled"] == 0
    assert verified["autotune"]["measured"] == 0

    table = warm("stats", bundle_path)
    assert table.returncode == 0 and "matmul" in table.stdout and "vs pick" in table.stdout
    explain = warm.json("stats", bundle_path, "--explain", "matmul")
    assert len(explain["tunes"]) == 3


def test_run_prints_tables_and_default_bundle_lives_in_warm_home(warm: Warm) -> None:
    proc = warm("run", MATMUL)
    assert proc.returncode == 0, proc.stderr
    for title in ("CompileOnly", "CompileAndAutotune", "Verify", "Compilation", "Autotune"):
        assert title in proc.stdout
    assert (Path(warm.env["WARM_HOME"]) / "bundle.warm").is_file()


def test_verify_of_an_incomplete_bundle_exits_1_naming_what_is_missing(
    warm: Warm, bundle_path: Path
) -> None:
    warm.json("run", MATMUL, "--bundle", bundle_path, "--no-verify")
    conn = sqlite3.connect(bundle_path)
    conn.execute("DELETE FROM kernels WHERE entry = 'row_sum'")
    conn.execute("DELETE FROM tunes WHERE rowid = (SELECT min(rowid) FROM tunes)")
    conn.commit()
    conn.close()
    proc = warm("verify", bundle_path, "--workload", MATMUL)
    assert proc.returncode == 1
    assert "1 kernel(s) compiled" in proc.stdout
    assert "1 tune(s) measured" in proc.stdout


def test_bad_input_is_one_line_and_exit_2(warm: Warm, bundle_path: Path, workload_file) -> None:
    cases = {
        "missing": (Path("no/such/workload.py"), "no such workload file"),
        "syntax": (workload_file("def workload(rt)\n    pass\n", "syntax.py"), "syntax error"),
        "no entry": (workload_file("x = 1\n", "noentry.py"), "defines no function workload"),
        "raises": (
            workload_file("def workload(rt):\n    raise ValueError('boom')\n", "raises.py"),
            "raises.py:2: ValueError: boom",
        ),
        "not python": (workload_file("x", "w.txt"), "a workload is a Python file"),
        "directory": (bundle_path.parent, "is a directory, not a workload file"),
    }
    for name, (path, message) in cases.items():
        proc = warm("run", path, "--bundle", bundle_path)
        assert proc.returncode == 2, name
        assert "Traceback" not in proc.stderr, name
        assert message in proc.stderr.splitlines()[0], (name, proc.stderr)
        assert not bundle_path.exists(), f"{name}: a failed first run leaves no empty bundle"
    garbage = bundle_path.parent / "garbage.warm"
    garbage.write_bytes(b"\x00" * 4096)
    proc = warm("stats", garbage)
    assert proc.returncode == 2 and "not a warm bundle" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_usage_error_is_one_line_naming_the_commands_help(warm: Warm, bundle_path: Path) -> None:
    cases = {
        ("merge", str(bundle_path)): ("Missing option '--output'", "warm merge --help"),
        ("nosuch",): ("No such command 'nosuch'", "warm --help"),
        ("stats", "--bogus"): ("No such option: --bogus", "warm stats --help"),
        ("run", "--jobs", "x"): ("'--jobs'", "warm run --help"),
    }
    for args, (what, where) in cases.items():
        proc = warm(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("warm: error: ") and what in line and where in line, line
    proc = warm()  # plain `warm`: the help it asks for, exit 2 as before
    assert proc.returncode == 2 and "Usage: warm [OPTIONS] COMMAND" in proc.stderr


def test_compile_error_shows_the_log_and_keeps_what_was_stored(
    warm: Warm, bundle_path: Path, workload_file, host_bundle: Callable[[Path], Path]
) -> None:
    host_bundle(bundle_path)  # as `warm run MATMUL --bundle bundle_path` makes it
    broken = workload_file(
        "from warmcli import Kernel\n"
        "K = Kernel('void bad(float *x) { x[0] = missing_symbol; }', 'bad', 'P')\n"
        "def workload(rt):\n"
        "    rt.launch(K, rt.buffer(4))\n",
        "broken.py",
    )
    proc = warm("run", broken, "--bundle", bundle_path)
    assert proc.returncode == 2
    assert "broken.py:4" in proc.stderr.splitlines()[0]
    assert "missing_symbol" in proc.stderr
    assert len(warm.json("stats", bundle_path)["kernels"]) == 6


def test_read_under_discard_is_an_error_unless_allowed(
    warm: Warm, bundle_path: Path, workload_file
) -> None:
    reader = workload_file("def workload(rt):\n    b = rt.buffer(4)\n    rt.read(b)\n", "reader.py")
    proc = warm("run", reader, "--bundle", bundle_path)
    assert proc.returncode == 2
    assert "read of Buffer" in proc.stderr and "CompileOnly" in proc.stderr
    doc = warm.json("run", reader, "--bundle", bundle_path, "--allow-discarded-reads")
    assert doc["passes"][0]["execution"]["discarded_reads"] == 1


def test_python_m_warmcli_and_version(warm: Warm) -> None:
    """A started `python -m warmcli` (not a fork of a server that imported the CLI: its
    `--version` path imports nothing before it answers)."""
    proc = Warm(warm.env)("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("warm ")
