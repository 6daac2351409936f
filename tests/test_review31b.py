"""Review of session 31's merges: a process not ended by Ctrl-C ends as it would without
warm (keep_sigint_exit), toolchains.json's remembered SMs, CudaBuffer's address, and
bundles warmed before the merges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm, cc_binary, nvcc_or_skip


def _exit(tmp_path: Path, body: str, warm: bool, *flags: str, stdin: str = "") -> int:
    """The exit status of `body` run as a script, with warm's production module imported
    (its exit handler registered) or not."""
    script = tmp_path / "main.py"
    script.write_text(("import warmcli.production\n" if warm else "") + body)
    env = {"PYTHONPATH": str(ROOT), "WARM_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, *flags, str(script)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return done.returncode


HANDLED_IN_A_CONSOLE = (
    "import code\ncode.InteractiveInterpreter().runsource('raise KeyboardInterrupt')\n"
)
A_SUBCLASS = "class Stop(KeyboardInterrupt):\n    pass\nraise Stop\n"
SET_BY_HAND = "import sys\nsys.last_value = KeyboardInterrupt()\n"


@pytest.mark.parametrize(
    ("body", "flags", "stdin"),
    [
        (HANDLED_IN_A_CONSOLE, (), ""),  # a console's shown KeyboardInterrupt: exit 0
        (A_SUBCLASS, (), ""),  # CPython signals only for KeyboardInterrupt itself: exit 1
        (SET_BY_HAND, (), ""),  # sys.last_value set by code, never raised: exit 0
        ("raise KeyboardInterrupt\n", ("-i",), "print(1)\n"),  # -i: the REPL ran after: 0
        ("raise KeyboardInterrupt\n", (), ""),  # Ctrl-C's own: by SIGINT, as without warm
    ],
)
def test_a_process_ends_as_it_would_without_warm(
    tmp_path: Path, body: str, flags: tuple[str, ...], stdin: str
) -> None:
    plain = _exit(tmp_path, body, False, *flags, stdin=stdin)
    assert _exit(tmp_path, body, True, *flags, stdin=stdin) == plain


def test_ctrl_c_in_a_function_of_a_module_run_by_dash_m_still_exits_by_sigint(
    tmp_path: Path,
) -> None:
    """An exit handler after warm's registration executes source (resetting CPython's
    record); warm's sets it again for a KeyboardInterrupt from deep in `python -m`'s run."""
    body = (
        "import atexit\natexit.register(lambda: exec('1'))\n"
        "def f():\n    raise KeyboardInterrupt\nf()\n"
    )
    (tmp_path / "kmod.py").write_text("import warmcli.production\n" + body)
    env = {"PYTHONPATH": f"{ROOT}:{tmp_path}", "WARM_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "kmod"], capture_output=True, env=env, timeout=60, check=False
    )
    assert done.returncode == -2, done.stderr


def test_compilers_in_use_stay_remembered_beside_64_stale_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """toolchains.json full of entries for binaries long gone (other venvs' nvcc, each
    with its `--list-gpu-code` line): the two compilers a process uses are both kept, so
    the next process runs neither (they evicted each other, every process, as the file
    was kept in key order and cut from its front)."""
    from warmcli.backends import toolchain

    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(toolchain, "RACY_SECONDS", 0.0)
    stale = {f"nvrtc|/gone/venv{i}/libnvrtc.so|1|2|{i}|4|5": "12.0" for i in range(64)}
    toolchain.versions_file().parent.mkdir(parents=True)
    toolchain.write_private(
        str(toolchain.versions_file().parent),
        str(toolchain.versions_file()),
        json.dumps(stale).encode(),
    )
    compilers = []
    for name in ("cc1", "cc2"):  # binaries: a script's version is never remembered
        compilers.append(cc_binary(tmp_path / name, f"{name} 1.0"))
    for _ in range(2):  # two processes' probes
        toolchain.probe.cache_clear()
        for cc in compilers:
            toolchain.probe("cc", str(cc))
    assert all(toolchain.is_remembered("cc", str(cc)) for cc in compilers)
    toolchain.probe.cache_clear()


SCALE_CU = """
from warmcli import Kernel
K = Kernel('extern "C" __global__ void scale(float *x, int n) { int i = threadIdx.x; '
           'if (i < n) x[i] *= 2; }', "scale", "Pi", language="cuda")

def workload(rt):
    rt.launch(K, rt.buffer(32), 32, grid=(1, 1, 1), block=(32, 1, 1))
"""


def test_nvcc_builds_where_tmpdir_is_a_relative_folder(warm: Warm, tmp_path: Path) -> None:
    """TMPDIR=tmp, a folder in the working directory (usable: Python's tempfile took it):
    nvcc, run in a scratch folder, read it there and failed every kernel ('nvcc fatal :
    Could not open output file tmp/tmpxft_...'); it is handed the folder as Python found it."""
    nvcc_or_skip()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "scale_cu.py").write_text(SCALE_CU)
    nvcc = ("--arch", "sm_90", "--compiler", "nvcc", "--no-ptx", "-q")
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", "scale_cu.py", *nvcc, "-b", "b.warm"],
        capture_output=True,
        text=True,
        env=dict(warm.env, TMPDIR="tmp"),
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout, proc.stdout


def test_pure_logic_only_a_live_buffer_of_the_device_passes_its_address() -> None:
    """Pure logic, no GPU, no pycuda (a stand-in with the device's id for `CudaDevice`):
    the launch converter a CudaDevice makes takes the fast path for its own live buffers
    only; a freed one (`_freed`, as free and close leave it) and another device object's
    buffer for the same GPU whose memory is freed never pass an address."""
    import functools
    from types import SimpleNamespace

    from warmcli import Kernel
    from warmcli.backends.cuda.device import FINISH, CudaBuffer, CudaDevice, _freed
    from warmcli.backends.launch_args import converter
    from warmcli.errors import LaunchError

    stand_in = SimpleNamespace(id="cuda:0")
    own = type("CudaBuffer", (CudaBuffer,), {})  # as each CudaDevice makes its own
    other = type("CudaBuffer", (CudaBuffer,), {})
    kernel = Kernel('extern "C" __global__ void k(float *x) {}', "k", "P", language="cuda")
    address = functools.partial(CudaDevice._address, stand_in)
    convert = converter(kernel, "cuda:0", address, FINISH, (own, "address"))

    def made(kind: type, at: int) -> CudaBuffer:
        buffer = kind("cuda:0", (4,), "float32")
        buffer.handle, buffer.address = at, at  # (pycuda's allocation: an int's stand-in)
        return buffer

    live = made(own, 4096)
    assert convert([live]) == (4096,)
    _freed(live)
    with pytest.raises(LaunchError):
        convert([live])
    elsewhere = made(other, 8192)
    assert convert([elsewhere]) == (8192,)  # the full check: live memory of this GPU
    _freed(elsewhere)
    with pytest.raises(LaunchError):
        convert([elsewhere])
