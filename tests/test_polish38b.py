"""polish38b: five small truths a user trial noticed, each through the real CLI in a
subprocess (real cc, real SQLite bundles; CUDA compiled for real with NVRTC under
`--arch`, no GPU): `warm stats --explain OPERATION`'s Contents row, which gave the whole
shared batch binary's bytes beside the count of that operation's kernels only (not their
shares, as the README says the figure is); `warm run -v`, whose last compiler command
line ran into the next pass's header; the README's `--pycuda --arch` example, whose
notes were wrapped as warm never prints them off a terminal; an option or value meant
for the workload given after it without `--` (`warm run w.py --n 8`, `warm run -m
app.warmup -- 8`), refused without saying a workload takes no arguments; and `warm run
--help` and `warm verify --help`, which said nothing of workload arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

HOST = """from warmcli import Kernel
DEVICE = "host"
K = Kernel("void bump(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }",
           "bump", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(8, "float32"), 8)
"""

HINT = "a workload takes no arguments"


def _contents(stdout: str) -> dict[str, list[str]]:
    """The Contents table's device rows (`host`): each row's cells."""
    rows: dict[str, list[str]] = {}
    for text in stdout.split("Contents", 1)[1].split("Kernels", 1)[0].splitlines():
        cells = text.split()
        if cells and cells[0] == "host":
            rows[cells[0]] = cells[1:]
    return rows


def _kernel_bytes(stdout: str) -> list[int]:
    """The bytes column of the Kernels table (each kernel's share of its binary)."""
    table = stdout.split("Kernels (", 1)[1].split("\n\n", 2)[1]
    return [int(r.split()[3].replace(",", "")) for r in table.splitlines()[2:] if r.strip()]


def test_stats_explain_contents_bytes_are_its_kernels_shares(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm stats --explain matmul` on the host example's bundle said `4 kernels, 21,808
    bytes`: the whole batch binary (six kernels') beside four of them. The Contents row's
    bytes are the shares of the kernels listed (they add up to the binary bytes, as the
    README says), in `warm stats` (the whole binary) and under `--explain` alike."""
    bundle = host_bundle(tmp_path / "m.warm")  # as `warm run examples/matmul_host.py -q` makes it
    for extra in ([], ["--explain", "matmul"]):
        done = warm("stats", bundle, *extra)
        assert done.returncode == 0, done.stderr
        row = _contents(done.stdout)["host"]
        shares = _kernel_bytes(done.stdout)
        assert int(row[1]) == len(shares) == (4 if extra else 6), (row, shares)
        assert int(row[2].replace(",", "")) == sum(shares), (extra, row, shares)
    whole = warm("stats", bundle).stdout
    assert _contents(whole)["host"][2] == f"{sum(_kernel_bytes(whole)):,}"


def test_verbose_compiler_commands_end_with_a_blank_line(warm: Warm, tmp_path: Path) -> None:
    """`warm run -v`: the last compiler command line of a pass was followed at once by the
    next `Pass` header; every other section ends with a blank line, so do the commands."""
    (tmp_path / "w.py").write_text(HOST)
    done = warm("run", tmp_path / "w.py", "-b", tmp_path / "v.warm", "-v")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    commands = [i for i, text in enumerate(lines) if text.startswith("  $ ")]
    assert commands, done.stdout
    last = commands[-1]
    assert lines[last + 1] == "", lines[last : last + 3]
    headers = [i for i, text in enumerate(lines) if text.startswith("Pass ")]
    for i in headers[1:]:
        assert lines[i - 1] == "", lines[i - 2 : i + 1]


def test_readme_pycuda_prebuild_notes_are_one_line_each(warm: Warm, tmp_path: Path) -> None:
    """The README's `--pycuda --arch sm_90` example wrapped each `note:` over two lines;
    piped (as the README's examples are), warm prints each on one: the README's lines are
    warm's lines."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("$ warm run examples/pycuda_style.py --pycuda --arch sm_90", 1)[1]
    block = block.split("```", 1)[0]
    shown = block.splitlines()[1:]
    done = warm(
        "run",
        ROOT / "examples" / "pycuda_style.py",
        "--pycuda",
        "--arch",
        "sm_90",
        "--allow-discarded-reads",
        "--quiet",
        "-b",
        tmp_path / "p.warm",  # (the README's /tmp/wx/p.warm: the notes do not name it)
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert shown[0] in printed, (shown[0], printed[0])
    assert shown[0].startswith("  note: ") and shown[1].lstrip().startswith("..."), shown
    tail = [t.replace(str(tmp_path / "p.warm"), "/tmp/wx/p.warm") for t in printed[-3:]]
    assert shown[2:] == tail, (shown, tail)


def _refused(warm: Warm, tmp_path: Path, *args: str | Path) -> str:
    done = warm(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), done.stderr
    return lines[0]


def test_workload_options_given_after_it_say_a_workload_takes_none(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run w.py -b x.warm --n 8` said only `No such option: --n (Possible options:
    ...)`, and `warm run -m app.warmup -b x.warm -- 8` took `8` as WORKLOAD (`give a
    workload file or -m MODULE (one of them)`): after the workload was given, each also
    says a workload takes no arguments; the same mistakes before it are refused as before,
    and no bundle is made."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "warmup.py").write_text(HOST)
    (tmp_path / "w.py").write_text(HOST)
    bundle = tmp_path / "x.warm"
    for command in (
        ["run", "w.py", "-b", bundle, "--n", "8"],
        ["run", "w.py", "--n=8"],
        ["run", "-m", "app.warmup", "-b", bundle, "--n", "8"],
        ["run", "-m", "app.warmup", "-b", bundle, "--", "8"],
        ["run", "-m", "app.warmup", "8"],
        ["verify", bundle, "--workload", "w.py", "--n", "8"],
        ["verify", bundle, "-m", "app.warmup", "--n", "8"],
    ):
        said = _refused(warm, tmp_path, *command)
        assert HINT in said and "environment variable" in said, (command, said)
        assert said.endswith(f"(see warm {command[0]} --help)"), said
        assert "one of them" not in said, said
        assert not bundle.exists()
    said = _refused(warm, tmp_path, "run", "w.py", "--n", "8")
    assert said.startswith("warm: error: warm run takes no --n, and a workload"), said
    for command, exact in (  # before the workload: as they were
        (
            ["run", "--n", "8", "w.py"],
            "No such option: --n (Possible options: --entry, --json, --nvcc)",
        ),
        (["run", "w.py", "-m", "app.warmup"], "give a workload file or -m MODULE (one of them)"),
        (
            ["verify", "--n", "8", bundle, "--workload", "w.py"],
            "No such option: --n (Possible options: --entry, --json, --nvcc)",
        ),
        (["run", "--bogus"], "No such option: --bogus (Possible options: --jobs, --verbose)"),
    ):
        said = _refused(warm, tmp_path, *command)
        assert HINT not in said, (command, said)
        assert exact in said, (command, said)
        assert not bundle.exists()


def test_run_and_verify_help_say_a_workload_takes_no_arguments(warm: Warm) -> None:
    """A workload's arguments are refused with `(see warm run --help)`, whose help said
    nothing of them: `warm run --help` and `warm verify --help` say, in one sentence, that
    a workload takes none and how to give it settings."""
    for command in ("run", "verify"):
        done = warm(command, "--help")
        assert done.returncode == 0, done.stderr
        text = " ".join(done.stdout.split())
        found = re.search(r"takes no arguments \(.{0,40}\): give it settings in environment", text)
        assert found, (command, text[:600])
