"""trial57c: an operator's trial of a bundle a fleet shares and CI warms, then an attacker's:
concurrency, interruption and a full disk never lose what a bundle holds, and what warm says
of a bundle's path reaches the terminal escaped. Real parts only: the real CLI in a
subprocess, the host example's real bundle, test_remote's HTTP store on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_remote import Store, http_store  # noqa: F401  (the fixture)
from test_trial41b import _as_another_user


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
        assert "\x1b" not in pushed.stdout and "new\nline" not in pushed.stdout, pushed.stdout
        assert "new\\x0aline/b\\x1b[31m.warm to " in pushed.stdout
    assert store.files["/b.warm"] == bundle.read_bytes()
    other = host_bundle(folder / "other\x1b[0m.warm")
    (tmp_path / "w.py").write_text(_ONE_MORE)
    assert warm("run", tmp_path / "w.py", "--bundle", other, "-q").returncode == 0
    pulled = warm("pull", f"{base}/b.warm", other)  # it held a kernel the pulled one lacks
    assert pulled.returncode == 0, pulled.stderr
    assert "\x1b" not in pulled.stdout and "new\nline" not in pulled.stdout, pulled.stdout
    said = " ".join(pulled.stdout.split())  # (as wrapped to the terminal's width, at spaces)
    assert f"into {other.parent.parent}/new\\x0aline/other\\x1b[0m.warm replaced: " in said
    assert "held 1 kernel(s)" in said
    assert other.read_bytes() == bundle.read_bytes()


_ONE_MORE = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void trial57c_one(float *x, int n) { x[0] += n; }", "trial57c_one", "Pi")
def workload(rt):
    rt.launch(K, rt.upload(np.zeros(1, dtype=np.float32)), 1)
"""


def _as_a_user(warm: Warm, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`warm *args` as a user's process (root's capabilities dropped: its own 0444 file is
    one it may not write, as anyone else's process finds it)."""
    command = [*_as_another_user(), sys.executable, "-m", "warmcli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=warm.env, timeout=300)


def test_a_pull_over_your_own_bundle_you_may_not_write_keeps_it(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """`warm pull URL PATH` over a 0444 bundle of one's own replaced it (what it held that the
    pulled one lacked gone, the new file 0444 too): `warm merge -o` refuses such an OUT (not
    writable by you), `warm run` and `warm clean` cannot write it."""
    store, base, _ = http_store
    other = host_bundle(tmp_path / "other.warm")
    (tmp_path / "w.py").write_text(_ONE_MORE)
    assert warm("run", tmp_path / "w.py", "--bundle", other, "-q").returncode == 0
    store.files["/other.warm"] = other.read_bytes()
    target = host_bundle(tmp_path / "mine.warm")
    target.chmod(0o444)
    before = target.read_bytes()
    for args in ((), ("--force",), ("--json",)):
        refused = _as_a_user(warm, "pull", f"{base}/other.warm", target, *args)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        line = f"{target}: not writable by you: nothing pulled ({target} is as it was)"
        if args == ("--json",):
            assert json.loads(refused.stdout) == {"error": line, "exit": 2}
        assert refused.stderr == f"warm: error: {line}\n"
        assert target.read_bytes() == before and target.stat().st_mode & 0o777 == 0o444
        assert sorted(p.name for p in tmp_path.iterdir() if "mine" in p.name) == [
            "mine.warm",
            "mine.warm.lock",
        ]
    merged = _as_a_user(warm, "merge", other, "-o", target, "--force")  # as merge says it
    assert merged.returncode == 2 and "not writable by you: nothing was merged" in merged.stderr
    target.chmod(0o644)  # its owner's to chmod: then it is pulled
    pulled = _as_a_user(warm, "pull", f"{base}/other.warm", target)
    assert pulled.returncode == 0, pulled.stderr
    assert target.read_bytes() == other.read_bytes()


def test_a_pull_over_a_loop_of_links_is_one_line_of_warm_s_own(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """`warm pull URL PATH --force` where PATH is a link that leads to itself said Python's
    `[Errno 40] Too many levels of symbolic links: '/abs/PATH'`, the OSError's own words (a
    merge says `cannot look at it (...)`); the link stays as it was."""
    store, base, _ = http_store
    store.files["/b.warm"] = host_bundle(tmp_path / "b.warm").read_bytes()
    loop = tmp_path / "loop.warm"
    loop.symlink_to("loop.warm")
    for args in (("--force",), ("--force", "--json")):
        refused = warm("pull", f"{base}/b.warm", loop, *args)
        assert refused.returncode == 2, refused.stdout
        line = f"{loop}: cannot look at it (Too many levels of symbolic links): nothing pulled"
        assert refused.stderr == f"warm: error: {line}\n"
        if "--json" in args:
            assert json.loads(refused.stdout) == {"error": line, "exit": 2}
        assert os.readlink(loop) == "loop.warm"


def test_a_name_too_long_for_a_bundle_to_write_is_warm_s_one_line_and_leaves_nothing(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """A bundle to write named with a folder's name over 255 bytes, or a file name a writer's
    temporary file beside it cannot take (`.NAME.PID.tmp-journal`: 21 bytes more; a merge's
    `..NAME.PID.merge.PID.tmp-journal`: 36), said Python's `[Errno 36] File name too long:
    '...'` (`warm run` leaving a lock file of that name; `warm merge -o` of a 225-byte name,
    which a pull takes). Now one line of warm's, before anything is written; a run into such
    a bundle already there goes on (it writes it in place)."""
    store, base, _ = http_store
    store.files["/b.warm"] = host_bundle(tmp_path / "b.warm").read_bytes()
    (tmp_path / "w.py").write_text(_ONE_MORE)
    folder = tmp_path / "work"
    folder.mkdir()
    too_long = "its file name is 240 bytes, too long for the files a writer makes beside it"
    cases = {
        folder / ("f" * 300) / "b.warm": ("a folder's name in it is over 255 bytes", "", ""),
        folder / ("n" * 235 + ".warm"): (too_long, " (234 at most)", " (219 at most)"),
    }
    for path, (said, most, merge_most) in cases.items():
        for args in (
            ("run", tmp_path / "w.py", "--bundle", path),
            ("pull", f"{base}/b.warm", path),
            ("merge", tmp_path / "b.warm", "-o", path),
        ):
            refused = warm(*args)
            assert refused.returncode == 2, refused.stdout
            most = merge_most if args[0] == "merge" else most
            assert refused.stderr == f"warm: error: {path}: {said}{most}: name the file\n"
            assert list(folder.iterdir()) == []
    named = folder / ("m" * 220 + ".warm")  # 225 bytes: too long for a merge's files only
    refused = warm("merge", tmp_path / "b.warm", "-o", named)
    assert refused.returncode == 2 and "(219 at most): name the file" in refused.stderr
    assert list(folder.iterdir()) == []
    long_name = next(iter(list(cases)[1:]))
    by_env = warm.with_env(WARM_BUNDLE=str(long_name))("run", tmp_path / "w.py")
    assert by_env.returncode == 2, by_env.stdout
    assert by_env.stderr.startswith(f"warm: error: WARM_BUNDLE={long_name}: {too_long}")
    assert warm("pull", f"{base}/b.warm", named).returncode == 0
    host_bundle(long_name)  # one already there: written in place
    done = warm("run", tmp_path / "w.py", "--bundle", long_name, "-q")
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        [long_name.name, f"{long_name.name}.lock", named.name, f"{named.name}.lock"]
    )
