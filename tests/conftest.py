"""Shared fixtures: the real CLI in a subprocess, temporary bundles, and the marks (the
session-wide builds are `tests/shared_builds.py`'s).

`gpu` tests skip cleanly when no CUDA device is visible; `slow` tests (full-size
stress trials) run only with `--run-slow` (`make stress`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dask_cluster import dask_scheduler, shared_cluster  # noqa: F401  (the shared cluster)
from shared_builds import (  # noqa: F401  (the session-wide builds)
    big_bundles,
    built_once,
    cuda_small_once,
    signed_small_once,
)

# numpy's OpenBLAS starts a thread a core, and each spins a while after every matrix product:
# in the pytest workers and in every process a test starts (all inherit this), on CI's two
# cores the spinning was ~2% of the suite's CPU and 11% of a `warm run` of the host example
# (`perf record`, stop 49). One thread computes the same products.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
# Run by `Warm.production(TUNED_READ, workload_file, i)`: the workload served on the host
# runtime, its returned buffer's element i read back, and how many tunes the process made.
TUNED_READ = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
y = rt.read(module["workload"](rt))
print(json.dumps({"y": float(y[int(sys.argv[2])]), "tunes": len(warmcli.report().tunes)}))
"""
# A production process serving the host example (append what it should print).
SERVE_MATMUL = (
    "import sys; sys.path.insert(0, {examples!r})\n"
    "import warmcli, matmul_host\n"
    "matmul_host.workload(warmcli.runtime('host'))\n"
    "r = warmcli.report()\n"
)


def gpu_selected(config: pytest.Config) -> bool:
    """Whether this run selects the `gpu` tests (`-m gpu`, as `scripts/gpu-check` runs them)."""
    expr = config.getoption("markexpr") or ""
    return "gpu" in expr.replace("not gpu", "")


def pytest_configure(config: pytest.Config) -> None:
    """In-process tests get warm's home in a temporary directory, never the user's cache
    (the remembered compiler versions and the host library cache live there). Unless the
    run selects the `gpu` tests, the GPUs are hidden (`CUDA_VISIBLE_DEVICES` empty, before
    anything starts CUDA, and so in every process the tests start): every other test
    states what warm does on a machine with no GPU, as CI is, and `--device auto` there
    is the host. warm's modules are compiled to bytecode first (`compile_warm`), and, in a
    run of pytest-xdist's workers, the test modules' assert-rewritten code before the
    workers start (`rewritten.write_once`). A suite started with SIGINT or SIGHUP ignored
    (`nohup`, a background job of a script) has them back as a terminal gives them: the
    processes the tests start inherit an ignored one, and the tests of warm's Ctrl-C and
    hangup would time out."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if not gpu_selected(config):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    compile_warm(ROOT)
    from rewritten import write_once

    write_once(config, ROOT / "tests")
    if "WARM_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="warm-test-home-")
        os.environ["WARM_HOME"] = home
        config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


def compile_warm(root: Path) -> None:
    """The modules of the warm checked out at `root` compiled to bytecode (each missing or
    out of date: this warm's at every test process's start, an earlier release's where
    `upgrades.release` checks it out), as an installed package's are (`make bench` does the
    same): with PYTHONDONTWRITEBYTECODE set, as where the suite runs, each of the thousands
    of processes the tests start (`python -m warmcli`, a production script) compiled every
    module it imports again (~35% of a `warm stats`). Each file is checked against its
    source's hash at every import (never its mtime), so an edited module never runs from a
    stale one."""
    import contextlib
    import importlib.util
    import py_compile

    for source in sorted((root / "warmcli").rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(source)))
        header = importlib.util.MAGIC_NUMBER + b"\x03\0\0\0"  # checked against its hash
        header += importlib.util.source_hash(source.read_bytes())
        try:
            with cached.open("rb") as file:
                if file.read(16) == header:
                    continue  # compiled from this very source: left as it is
        except OSError:
            pass
        # (written whole or not at all: another process may be reading it; one that fails
        # is imported from its source, as before)
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(
                str(source),
                cfile=str(cached),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run full-size stress tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--run-slow"):
        skip = pytest.mark.skip(reason="full-size stress trial: make stress")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
    if any("gpu" in item.keywords for item in items):
        from warmcli.backends.opening import cuda_available

        if not gpu_selected(config):
            skip = pytest.mark.skip(reason="gpu tests run alone: pytest -m gpu (scripts/gpu-check)")
        elif not cuda_available():
            skip = pytest.mark.skip(reason="no CUDA device (pycuda or a GPU is missing)")
        else:
            skip = None
        if skip is not None:
            for item in items:
                if "gpu" in item.keywords:
                    item.add_marker(skip)


class Warm:
    """Runs `python -m warmcli` in a subprocess, as a user would."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(
        self, *args: str | Path, timeout: float = 300, cwd: Path = ROOT
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "warmcli", *map(str, args)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            cwd=cwd,
        )

    def popen(self, *args: str | Path, **options: Any) -> subprocess.Popen[Any]:
        """`python -m warmcli *args` started, not waited for (its output piped, as text,
        unless `options` say otherwise)."""
        piped = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        return subprocess.Popen(
            [sys.executable, "-m", "warmcli", *map(str, args)],
            env=self.env,
            cwd=ROOT,
            **{**piped, **options},
        )

    def production(self, code: str, *args: str | Path, bundle: Path | None = None) -> Any:
        """Run `code` in a fresh Python process, as a production process would (over
        `bundle` through WARM_BUNDLE, if given); returns the JSON it prints."""
        env = dict(self.env, **({"WARM_BUNDLE": str(bundle)} if bundle is not None else {}))
        proc = subprocess.run(
            [sys.executable, "-c", code, *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def json(self, *args: str | Path) -> Any:
        proc = self(*args, "--json")
        assert proc.returncode == 0, proc.stderr + proc.stdout
        return json.loads(proc.stdout)

    def with_env(self, **env: str) -> Warm:
        """This warm with `env` over its environment (a `ForkedWarm`'s stays forked)."""
        return Warm(dict(self.env, **env))


def this_warms(identity: str) -> str:
    """A toolchain `identity` as this warm's builds name it: with its build recipe's mark
    (`warmcli.backends.toolchain.BUILD_RECIPE`, named from 2 on), as hand-made rows need to
    be served."""
    from warmcli.backends.toolchain import BUILD_RECIPE, RECIPE_MARK

    return identity + (f"{RECIPE_MARK}{BUILD_RECIPE}]" if BUILD_RECIPE != 1 else "")


def cc_binary(path: Path, version: str) -> Path:
    """A C compiler binary at `path` answering `--version` with the line `version` and
    building as `cc` does (it runs cc): a stand-in for another compiler. A binary, not a
    script: a wrapper script's version is its own (it may add options) and never
    remembered."""
    source = path.with_name(path.name + ".c")
    line = json.dumps(version)  # a C string literal, for the ASCII lines tests give
    source.write_text(
        "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n"
        "int main(int argc, char **argv) {\n"
        f'  if (argc > 1 && !strcmp(argv[1], "--version")) {{ puts({line}); return 0; }}\n'
        '  argv[0] = "cc";\n  execvp("cc", argv);\n  return 127;\n}\n'
    )
    temporary = path.with_name(path.name + ".new")  # moved over `path`: a new file each time
    subprocess.run(["cc", "-o", str(temporary), str(source)], check=True)
    source.unlink()
    os.replace(temporary, path)
    return path


def nvcc_or_skip() -> str:
    """The nvcc warm would use, or skip the test (a machine without the nvcc extra)."""
    from warmcli.backends.cuda.nvcc import find_nvcc
    from warmcli.backends.toolchain import ToolchainError

    try:
        return find_nvcc()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc: {exc}")


def nvrtc_release_or_skip(older_minor: bool = False) -> tuple[int, int]:
    """The installed NVRTC's CUDA release (13.5 from the pip wheel here, 13.0 on a GPU
    machine's toolkit), or skip (no NVRTC; with `older_minor`, a release X.0, below which no
    driver of its major release is)."""
    import re

    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    found = re.search(r"release (\d+)\.(\d+)", NvrtcCompiler().toolchain.version)
    assert found is not None
    release = int(found.group(1)), int(found.group(2))
    if older_minor and release[1] == 0:
        pytest.skip(f"NVRTC {release[0]}.0: no older driver of its major release")
    return release


def gpu_arch_or_skip() -> str:
    """The first GPU's architecture (`sm_90`), or skip the test (no CUDA device)."""
    from warmcli.backends.cuda.device import list_cuda_devices

    devices = list_cuda_devices()
    if not devices:
        pytest.skip("no CUDA GPU")
    return str(devices[0]["arch"])


@pytest.fixture
def warm(tmp_path: Path) -> Warm:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(tmp_path / "home")
    env["COLUMNS"] = "200"
    return Warm(env)


@pytest.fixture(scope="session")
def served_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `svc.py` (the production trials' service,
    `test_production_trial30.SERVICE`), `b.warm`, its bundle, and `home`, the warm home that
    warmed it (once per test process): what `served` copies for each test."""
    from test_production_trial30 import SERVICE

    base = tmp_path_factory.mktemp("served-once")
    (base / "svc.py").write_text(SERVICE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200"))
    done = warm("run", base / "svc.py", "--bundle", base / "b.warm")
    assert done.returncode == 0, done.stderr
    return base


@pytest.fixture
def served(warm: Warm, tmp_path: Path, served_once: Path) -> Path:
    """`svc.py` (the production trials' service, `test_production_trial30.SERVICE`) in
    `tmp_path`, warmed into the bundle returned (`served_once`'s copied, with the warm home
    that warmed it as `warm`'s home, as a run there would leave them)."""
    return as_run_in(served_once, warm, tmp_path) / "b.warm"


def as_run_in(once: Path, warm: Warm, tmp_path: Path) -> Path:
    """`tmp_path`, holding a copy of `once` (a session's folder of a bundle and `home`, the
    warm home that warmed it), whose home is `warm`'s: as a run there would leave them."""
    shutil.copytree(once, tmp_path, dirs_exist_ok=True, symlinks=True)
    assert warm.env["WARM_HOME"] == str(tmp_path / "home")
    return tmp_path


@pytest.fixture(scope="session")
def forking_servers() -> Iterator[Any]:
    """`tests/forked_cli.Servers`: the forking servers of this test process."""
    from forked_cli import Servers

    servers = Servers(ROOT)
    yield servers
    servers.close()


@pytest.fixture
def forked(forking_servers: Any) -> Callable[[Warm], Any]:
    """`forked(warm)`: a `ForkedWarm` (`tests/forked_cli.py`), called as `warm` is, each
    command a fork of a process that imported the CLI once: for tests of many commands."""
    from forked_cli import ForkedWarm

    return lambda warm: ForkedWarm(warm, forking_servers)


@pytest.fixture
def bundle_path(tmp_path: Path) -> Path:
    return tmp_path / "bundle.warm"


@pytest.fixture(scope="session")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `good.warm`, the example workload's bundle, and `home`, the warm home
    that made it (once per test process): what `made` copies for each module."""
    base = tmp_path_factory.mktemp("made-once")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200"))
    assert warm("run", EXAMPLES / "matmul_host.py", "-b", base / "good.warm", "-q").returncode == 0
    return base


@pytest.fixture(scope="module")
def made(made_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Warm, Path]:
    """warm with a home of its own, and the example workload's bundle it made (a module's
    own copy of `made_once`'s folder, as a run there would leave it): what the
    hostile-input tests copy and attack."""
    base = tmp_path_factory.mktemp("hostile")
    shutil.copytree(made_once, base, dirs_exist_ok=True, symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200"))
    return warm, base / "good.warm"


@pytest.fixture
def made_here(warm: Warm, tmp_path: Path, made_once: Path) -> Path:
    """The host example's bundle, `tmp_path / "good.warm"`, with the warm home that made it
    as `warm`'s (`made_once`'s folder copied): as `warm run examples/matmul_host.py -b PATH
    -q` in `warm`'s home leaves them, for tests that serve what such a run stored."""
    return as_run_in(made_once, warm, tmp_path) / "good.warm"


@pytest.fixture
def host_bundle(made_once: Path) -> Callable[[Path], Path]:
    """Puts at a path the host example's bundle, as `warm run examples/matmul_host.py -b
    PATH -q` makes it (a copy of `made_once`'s, no lock file beside it), and returns the
    path: for tests that only read or attack such a bundle."""

    def put(path: Path) -> Path:
        shutil.copyfile(made_once / "good.warm", path)
        return path

    return put


@pytest.fixture
def workload_file(tmp_path: Path):
    """Write a workload file from source text and return its path."""

    def write(source: str, name: str = "workload.py") -> Path:
        path = tmp_path / name
        path.write_text(source)
        return path

    return write


# A service module's body (import numpy, Kernel and Tunable first): N distinct `scale`
# kernels KS, a tunable T of three candidates, and `one(rt, i)`, which launches KS[i] and
# tunes T on a shape of its own, returning what both wrote (`scaled(n)` makes it).
SCALED = """
SRC = ("void scale(const float *x, float *y, int n) "
       "{ for (int i = 0; i < n; i++) y[i] = x[i] * SC + 1.0f/3.0f; }")
KS = [Kernel(SRC, "scale", "PPi", defines={"SC": f"{i}.5f"}, name="scale") for i in range(N)]
def launch_t(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)
def cand(i):
    return Kernel(SRC, "scale", "PPi", defines={"SC": "2.0f", "U": i}, name="scale")
T = Tunable(name="t", candidates={f"c{i}": cand(i) for i in range(3)}, launch=launch_t)
def one(rt, i, read=True):
    x = rt.upload(np.arange(50 + i, dtype=np.float32) / 7)
    y, z = rt.buffer(50 + i, "float32"), rt.buffer(50 + i, "float32")
    rt.launch(KS[i], x, y, 50 + i)
    rt.tune(T, x, z, 50 + i)
    return rt.read(y).tobytes() + rt.read(z).tobytes() if read else b""
"""


def scaled(n: int) -> str:
    """`SCALED` with `n` kernels."""
    return SCALED.replace("range(N)", f"range({n})")


# A good candidate and a fast wrong one (0.5 high), and how each is launched.
# A tunable whose wrong candidate must win on speed under a loose check: GOOD repeats its
# work 4,000 times, so no noise on a loaded machine measures it faster.
SQUARES = """
import numpy as np
from warmcli import Kernel, Tunable

GOOD = Kernel("void sq(const float *x, float *y, int n) { for (int r = 0; r < 4000; r++) "
              "for (int i = 0; i < n; i++) y[i] = x[i] * x[i]; }", "sq", "PPi")
FAST_WRONG = Kernel("void sq(const float *x, float *y, int n) { "
                    "for (int i = 0; i < n; i++) y[i] = x[i] * x[i] + 0.5f; }", "sq", "PPi")


def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)
"""
