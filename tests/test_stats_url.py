"""`warm stats URL` names the bundle by the URL the user gave, and says where its local
copy is; `--json` too. Real files, a real HTTP store on loopback, the real CLI in
subprocesses."""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from threading import Thread

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_remote import Store, _handler


def test_stats_of_a_url_names_the_url_and_its_copy(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    made = host_bundle(tmp_path / "made.warm")  # as `warm run examples/matmul_host.py` makes it
    store = Store()
    store.files["/b.warm"] = made.read_bytes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    Thread(target=server.serve_forever, daemon=True, args=(0.05,)).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/b.warm"
        proc = warm("stats", url)
        assert proc.returncode == 0, proc.stderr
        head = dict(line.split(None, 1) for line in proc.stdout.splitlines()[:2])
        assert head["bundle"] == url, proc.stdout
        copy = Path(head["copy"])
        assert copy.is_file() and copy.read_bytes() == made.read_bytes()
        doc = warm.json("stats", url)
        assert (doc["bundle"], doc["copy"]) == (url, str(copy))
        assert "copy" not in warm.json("stats", made) and str(made) in warm("stats", made).stdout
    finally:
        server.shutdown()
        server.server_close()
