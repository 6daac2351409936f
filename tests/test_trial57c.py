"""trial57c: an operator's trial of a bundle a fleet shares and CI warms, then an attacker's:
concurrency, interruption and a full disk never lose what a bundle holds, and what warm says
of a bundle's path reaches the terminal escaped. Real parts only: the real CLI in a
subprocess, the host example's real bundle, test_remote's HTTP store on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import Warm
from test_remote import Store, http_store  # noqa: F401  (the fixture)


def test_push_and_pull_say_a_path_holding_a_newline_or_escape_code_escaped(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """`warm push`'s and `warm pull`'s success lines named the path as given: a newline in it
    split the line, an escape code in it reached the terminal (every other command's line,
    `warm run`'s, `merge`'s, `verify`'s, escapes it)."""
    store, base, _ = http_store
    folder = tmp_path / "new\nline"
    folder.mkdir()
    bundle = host_bundle(folder / "b\x1b[31m.warm")
    for _ in range(2):  # sent, then unchanged: the store holds these very bytes
        pushed = warm("push", bundle, f"{base}/b.warm")
        assert pushed.returncode == 0, pushed.stderr
        assert "\x1b" not in pushed.stdout and len(pushed.stdout.splitlines()) == 1, pushed.stdout
        assert "new\\x0aline/b\\x1b[31m.warm" in pushed.stdout
    assert store.files["/b.warm"] == bundle.read_bytes()
    other = host_bundle(folder / "other\x1b[0m.warm")
    (tmp_path / "w.py").write_text(_ONE_MORE)
    assert warm("run", tmp_path / "w.py", "--bundle", other, "-q").returncode == 0
    pulled = warm("pull", f"{base}/b.warm", other)  # it held a kernel the pulled one lacks
    assert pulled.returncode == 0, pulled.stderr
    lines = pulled.stdout.splitlines()  # (the second one wrapped to the terminal's width)
    assert "\x1b" not in pulled.stdout, pulled.stdout
    assert lines[0].endswith("new\\x0aline/other\\x1b[0m.warm"), lines
    assert lines[1].startswith("replaced: ") and "held 1 kernel(s)" in lines[1], lines
    assert other.read_bytes() == bundle.read_bytes()


_ONE_MORE = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void trial57c_one(float *x, int n) { x[0] += n; }", "trial57c_one", "Pi")
def workload(rt):
    rt.launch(K, rt.upload(np.zeros(1, dtype=np.float32)), 1)
"""
