"""README passages a new user trips on, run as written (docs48b).

The workload contract's only code example used names it never defined (`MATMUL_SOURCE`,
`numpy_array_a`, `m`, `n`, `k`); "The bundle"'s production snippet asked `warmcli.runtime()`
for a runtime, a CUDA one on a GPU machine whatever the workload's device; Trust's example
made its key in `~/.warm` and trusted it from `/etc/warm` with nothing copying it there. These
tests take the README's blocks as written and run them in a fresh folder: the real CLI, the
real C compiler (the host backend), real keys through the `sign` extra. No fakes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

README = ROOT / "README.md"


def _section(title: str) -> str:
    """The README's `## title` section, up to the next `## ` heading."""
    text = README.read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list[str]:
    """The bodies of `text`'s fenced blocks of `language`."""
    found = re.findall(r"^ *```(\w*)\n(.*?)^ *```", text, flags=re.MULTILINE | re.DOTALL)
    return [body for lang, body in found if lang == language]


def _env(tmp_path: Path) -> dict[str, str]:
    """A user's environment: `warm` and `python` on `PATH` (this checkout's), a home and a
    warm home of their own, no `WARM_*` variable of the caller's."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, run in (("warm", f'"{sys.executable}" -m warmcli'), ("python", sys.executable)):
        (bin_ / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_ / name).chmod(0o755)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(PATH=f"{bin_}:{env['PATH']}", PYTHONPATH=str(ROOT), COLUMNS="200")
    env.update(HOME=str(tmp_path / "home"), WARM_HOME=str(tmp_path / "warmhome"))
    return env


def _run(
    args: list[str], cwd: Path, env: dict[str, str], **more: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=dict(env, **more), capture_output=True, text=True, timeout=120
    )


def _contract_example() -> str:
    """The workload contract's example: the block defining `workload`, which tunes `MATMUL`."""
    (body,) = [
        b for b in _blocks(_section("The workload contract"), "python") if "rt.tune(MATMUL" in b
    ]
    return body


def _production_snippet() -> str:
    (body,) = [b for b in _blocks(_section("The bundle"), "python") if "use_bundle(" in b]
    return body


def test_the_contract_example_runs_and_its_bundle_serves_the_production_snippet(
    tmp_path: Path,
) -> None:
    """The contract's example, saved as `app.py`, warms under `warm run` as written (it used
    undefined names: a NameError, exit 2); "The bundle"'s production snippet then serves it
    from the bundle as written (its path moved to this folder): nothing compiled, nothing
    tuned, and on its host runtime (`runtime()` alone is a GPU's where there is one)."""
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(_contract_example())
    bundle = work / "warm.bundle"
    run = _run(["warm", "run", "app.py", "--bundle", str(bundle)], work, env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stored 5 new kernel(s) and 1 new tune(s)" in run.stdout, run.stdout
    assert "the bundle is complete" in run.stdout, run.stdout
    snippet = _production_snippet()
    assert 'warmcli.runtime("host")' in snippet and "from app import workload" in snippet
    (work / "serve.py").write_text(snippet.replace("/opt/app/warm.bundle", str(bundle)))
    served = _run([sys.executable, "serve.py"], work, env, WARM_REPORT="1")
    assert served.returncode == 0, served.stderr
    assert "served everything: compiled 0 kernels, tuned 0 operations" in served.stderr
    prose = " ".join(_section("The bundle").split())
    assert "on a GPU machine a host workload given `warmcli.runtime()` gets a CUDA runtime" in prose


def _quick_start_files(work: Path) -> None:
    """The quick start's `scale.py` and `serve.py`, written to `work` as the README has them."""
    for body in _blocks(_section("Quick start"), "python"):
        first = body.split("\n", 1)[0]
        if re.fullmatch(r"# \w+\.py", first):
            (work / first[2:]).write_text(body)
    assert (work / "serve.py").is_file() and (work / "scale.py").is_file()


def test_the_trust_example_signs_and_serves_end_to_end(tmp_path: Path) -> None:
    """Trust's block, as written but for `/etc/warm` (moved under this folder) and its
    `pip install` line, run by bash -e beside the quick start's files: the key is made, the
    bundle warmed and signed, the public key copied where production trusts it, and
    `serve.py` served by the signed bundle. The same `serve.py` refuses a bundle another key
    signed, and one nobody signed, exit 1 with the line the README quotes, never cold."""
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    _quick_start_files(work)
    (block,) = [b for b in _blocks(_section("Trust: a bundle is native code"), "sh")]
    etc = tmp_path / "etc" / "warm"
    lines = [x for x in block.splitlines() if not x.startswith("pip install")]
    script = "\n".join(lines).replace("/etc/warm", str(etc))
    done = _run(["bash", "-e", "-c", script], work, env, WARM_REPORT="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (etc / "ci.key.pub").is_file() and not (etc / "ci.key").exists()
    assert done.stdout.rstrip().endswith("[0. 2. 4. 6.]"), done.stdout
    assert "served everything: compiled 0 kernels" in done.stderr, done.stderr
    prose = " ".join(_section("Trust: a bundle is native code").split())
    quoted = prose.split("exit 1, with `warmcli.errors.SignatureError: /srv/app.warm: ", 1)[1]
    quoted = quoted.split("`", 1)[0].replace("c2e8439da0e85f45", "KEY")
    trusted = {"WARM_TRUSTED_KEYS": str(etc / "ci.key.pub")}
    other = _run(["warm", "keygen", "other.key"], work, env)
    assert other.returncode == 0, other.stderr
    for key in (["--key", "other.key"], []):
        (work / "app.warm").unlink()
        warmed = _run(["warm", "run", "scale.py", "--bundle", "app.warm", *key], work, env)
        assert warmed.returncode == 0, warmed.stderr
        refused = _run(["python", "serve.py"], work, env, WARM_REPORT="1", **trusted)
        assert refused.returncode == 1 and refused.stdout == "", refused.stdout
        last = refused.stderr.splitlines()[-2]
        assert last.startswith("warmcli.errors.SignatureError: "), refused.stderr
        said = re.sub(r"key\(s\) [0-9a-f]{16}", "key(s) KEY", last.split(": ", 2)[2])
        assert said == quoted if key else said.startswith("bundle refused: unsigned, "), said


def test_the_tunable_bullets_example_shares_picks_as_its_comments_say(tmp_path: Path) -> None:
    """The Tunable bullet leads with an example of `bucket=` and `key=` on the contract's
    `MATMUL` (a 752-character line defined them, deep in the bullet). Its lines, added to the
    contract's example and tuned at (m, n) = (60, 48), (64, 48) and (64, 40): POW2 stores one
    pick (60 rounds up to 64, as 40 and 48 do), BY_M one per m, two."""
    section = _section("The workload contract")
    (block,) = [b for b in _blocks(section, "python") if "bucket=" in b]  # a bullet's: indented
    lines = [x.strip() for x in block.splitlines() if x.strip()]
    made = [x for x in lines if not x.startswith("rt.tune(")]
    tuned = [x for x in lines if x.startswith("rt.tune(")]
    assert len(made) == len(tuned) == 2, lines
    loop = "".join(f"        {x}\n" for x in tuned)
    source = (
        _contract_example()
        + "\n".join(made)
        + (
            "\n\ndef shapes(rt):\n"
            "    for m, n, k in ((60, 48, 32), (64, 48, 32), (64, 40, 32)):\n"
            "        a = rt.upload(np.ones((m, k), dtype=np.float32))\n"
            "        b = rt.upload(np.ones((k, n), dtype=np.float32))\n"
            '        c = rt.buffer((m, n), "float32")\n' + loop
        )
    )
    env = _env(tmp_path)
    (tmp_path / "w.py").write_text(source)
    run = _run(
        ["warm", "run", "w.py", "--entry", "shapes", "-b", "t.warm", "--json"], tmp_path, env
    )
    assert run.returncode == 0, run.stdout + run.stderr
    stats = _run(["warm", "stats", "t.warm", "--json"], tmp_path, env)
    assert stats.returncode == 0, stats.stderr
    tunes = json.loads(stats.stdout)["tunes"]
    counts = {
        name: sum(t["operation"] == name for t in tunes) for name in ("matmul_pow2", "matmul_m")
    }
    assert counts == {"matmul_pow2": 1, "matmul_m": 2}, counts
