"""What the reviews of a host kernel's key (review 44c, 45a, 45b, 45c) test with: a workload
launching one host kernel and printing what it computed (`workload`), its key in this process
(`key`), a static library whose `helper` returns a value (`archive`), a workload warmed into
`b.warm` (`warmed`), and what a served (`WARM_STRICT=1`) and a cold process print
(`served_and_cold`, forked from a server of this test process): a stale hit is the served
process printing the old value."""

from __future__ import annotations

import atexit
import subprocess
import time
from pathlib import Path

from conftest import Warm
from forked_python import ForkedPython, _shared

from warmcli.kernel import Kernel, kernel_key

WORKLOAD = """
import warmcli
from warmcli import Kernel
DEVICE = "host"
K = Kernel({source!r}, "f", "P", options={options!r}, defines={defines!r})
def workload(rt):
    rt.launch(K, rt.buffer(1, "float32"))
if __name__ == "__main__":
    rt = warmcli.runtime()
    b = rt.buffer(1, "float32")
    rt.launch(K, b)
    print(rt.read(b)[0])
"""
LINK_SOURCE = "float helper(void);\nvoid f(float *x) { x[0] = helper(); }\n"
HEADER_SOURCE = '#include "val.h"\nvoid f(float *x) { x[0] = VAL; }\n'


def workload(source: str, options: tuple[str, ...], defines: dict[str, str] | None = None) -> str:
    """A workload's text: kernel `f` of `source`, warmed by `warm run`, its value printed when
    run as a script."""
    return WORKLOAD.format(source=source, options=options, defines=defines or {})


def key(source: str, options: tuple[str, ...], defines: dict[str, str] | None = None) -> str:
    kernel = Kernel(source, "f", "P", options=options, defines=defines or {})
    return kernel_key(kernel, "x86_64", "cc:test")


def archive(folder: Path, value: int, name: str = "X") -> None:
    """`folder/lib<name>.a` holding `helper`, which returns `value`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "h.c").write_text(f"float helper(void) {{ return {value}.0f; }}\n")
    run = {"cwd": folder, "check": True}
    subprocess.run(["cc", "-O2", "-fPIC", "-c", "h.c", "-o", "h.o"], **run)  # type: ignore[call-overload]
    (folder / f"lib{name}.a").unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", f"lib{name}.a", "h.o"], **run)  # type: ignore[call-overload]


def settle(*paths: Path) -> None:
    """Waits till each of `paths` last changed (its mtime and its ctime, which no `utime` sets
    back) over 2 s ago: from then on a key's memo believes it by its stamp (`warmcli.stamped`)."""
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in paths)
    time.sleep(max(0.0, (newest + 2_100_000_000 - time.time_ns()) / 1e9))


def warmed(
    warm: Warm,
    tmp_path: Path,
    source: str,
    options: tuple[str, ...],
    defines: dict[str, str] | None = None,
) -> Path:
    """`w.py` launching the kernel, warmed into `b.warm` (exit 0 asserted)."""
    script = tmp_path / "w.py"
    script.write_text(workload(source, options, defines))
    made = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert made.returncode == 0, made.stdout + made.stderr
    return script


def served_and_cold(warm: Warm, tmp_path: Path, script: Path) -> tuple[str, str]:
    """What a production process under WARM_STRICT=1 prints, then what a cold one prints: each
    a fork of a server that imported numpy and warmcli (`tests/forked_python.py`), what they
    compute being the point, not how a process starts."""
    server = _servers.get(key := frozenset(_shared(warm.env).items()))
    if server is None or server.server.poll() is not None:
        server = _servers[key] = ForkedPython(warm.env, tmp_path)
        atexit.register(server.close)

    def value(**env: str) -> str:
        done = server.run(script, env=dict(warm.env, **env), cwd=tmp_path, timeout=120)
        return done.stdout.strip() + done.stderr.strip()[-600:]

    return value(WARM_BUNDLE=str(tmp_path / "b.warm"), WARM_STRICT="1"), value()


_servers: dict[frozenset[tuple[str, str]], ForkedPython] = {}  # one a test process's environment
