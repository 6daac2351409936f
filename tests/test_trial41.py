"""A new user's trial (stop 41): workloads warm had not seen, run the README's way. The
real CLI in a subprocess, the real cc."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm


def _package(tmp_path: Path) -> Path:
    app = tmp_path / "svc" / "app"
    app.mkdir(parents=True)
    (tmp_path / "svc" / "__init__.py").write_text("")
    (app / "__init__.py").write_text("")
    (app / "warmup.py").write_text("def workload(rt):\n    pass\n")
    return app


def test_a_package_folder_given_as_the_workload_is_told_its_dash_m_name(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run svc/app/` (a package, as `python -m` runs it) said only `is a directory, not
    a workload file`: no word of `-m`, the README's way to run a package."""
    _package(tmp_path)
    made = warm("run", "-m", "svc.app.warmup", "-b", "b.warm", "-q", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    for given in ("svc/app/", "svc/app"):
        for command in (("run", given), ("verify", "b.warm", "--workload", given)):
            done = warm(*command, cwd=tmp_path)
            assert done.returncode == 2, done.stderr
            line = done.stderr.strip()
            assert "\n" not in line, line
            assert "is a directory, not a workload file" in line, line
            assert f"(a package: give -m svc.app, from {tmp_path})" in line, line
    (tmp_path / "plain").mkdir()
    done = warm("run", "plain", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "warm: error: plain: is a directory, not a workload file"
