"""A fleet mid-rollout: stop 41's warm (commit 118284a, the last release) and today's over one
bundle.

Today's warm keys every kernel and tune as stop 41 did but one `key=` kind, on purpose: a str
spelling a list's or dict's key text with an int past 10**4300 in hex (`"[0x13...]"`) is
tagged `str:` (it shared one key with that list), so such a tune stored by stop 41 is measured
once again by today's warm. A kernel pre-including a header by its absolute path
(`-include /abs/pre.h`) keeps its key, its `header_files` naming `pre.h` (stop 41: `<header>`);
PyCUDA's `options=` list and `DEFAULT_NVCC_FLAGS` (options=None, which today's pre-build
reads as the script extended it) key as stop 41's explicit list. Each warm serves the other's
bundle under WARM_STRICT=1 compiling and measuring nothing, with a cold start's results;
production write-backs of both land in one bundle (today's at one time per process); each
merges one's and the other's; a bundle signed by one is served under `WARM_TRUSTED_KEYS` by
the other, and re-warmed signed by both; `clean --older-than`/`--max-size` of today
stamping times ahead of now, and `clean --tune`, leave bundles stop 41 serves and re-warms;
`verify`, `check` (also `--device cuda --arch sm_90`), `stats` (`--json`: each kernel's
share of its batch as the other counts it), `diff` and `clean` of the other's bundle never
read it as "corrupt"; a bundle named by a presigned URL is downloaded once more by today's
warm (its kept copy is named by the URL less the query's signing fields, stop 41's by the
whole URL) and stop 41's kept copy still serves after. A changed pre-included header is
explained as `changed: pre.h` by today's warm in either bundle. Real CLI (each command a
fork of a process that imported that warm's CLI once, `tests/forked_cli.py`), real
production processes, real SQLite files, the system C compiler and NVRTC.

Stop 41's warm is the checkout at `/tmp/base41` where one is, else a `git worktree` of
118284a made in a temporary folder (and removed after); skipped where neither can be had.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from forked_cli import Servers
from upgrades import STORED, Fleet, digest, keys, release

from warmcli.backends.cuda.nvrtc import find_nvrtc

BASE = "118284a"
CHECKOUT = Path("/tmp/base41")
WORKLOAD = '''
"""Host kernels pre-including a header by its absolute path; tunes keyed by key= strs."""
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
PRE = ("-include", os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc", "pre.h"))
PART = os.environ.get("PART", "ab")  # which half a production process runs
SRC = r"""
void scale(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) y[j] = x[j] * VAL;
}
"""
ADDS = [Kernel(f"void add{i}(float *y, int n) {{ for (int i = 0; i < n; i++) y[i] += {i}; }}",
               f"add{i}", "Pi") for i in range(4)]


def cands(step):
    return {f"s{s}": Kernel(SRC, "scale", "PPi", defines={"STEP": s}, options=PRE)
            for s in (1, step)}


def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)


TUNABLES = [
    ("a", Tunable("t_rows", cands(4), launch, key=lambda x, y, n: f"rows{n}")),
    ("b", Tunable("t_json", cands(8), launch, check="s1", key=lambda x, y, n: "[1, 2]")),
]


def workload(rt):
    results = []
    x = rt.upload(np.arange(100, dtype=np.float32) * 0.37)
    for part, t in TUNABLES:
        if part not in PART:
            continue
        y = rt.buffer(100, "float32")
        rt.tune(t, x, y, 100)
        for k in ADDS[:2] if part == "a" else ADDS[2:]:
            rt.launch(k, y, 100)
        results.append(y)
    return results
'''
HEX = '''
"""A tune keyed by a str spelling a list with an int past 10**4300 in hex (keyed anew), and
one by a str holding that hex not first (keyed as stop 41 did)."""
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = """void twice(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += STEP) for (int j = i; j < i + STEP && j < n; j++) y[j] = 2 * x[j];
}"""
CANDS = {f"s{s}": Kernel(SRC, "twice", "PPi", defines={"STEP": s}) for s in (1, 2)}
BIG = "[" + hex(10**4300) + "]"
RUN = lambda rt, k, x, y, n, *, stream=None: rt.launch(k, x, y, n)
T = Tunable("t_hex", CANDS, RUN, key=lambda x, y, n: BIG)
KEPT = Tunable("t_kept", CANDS, RUN, key=lambda x, y, n: "rows" + BIG)  # no [ or { first


def workload(rt):
    x = rt.upload(np.arange(100, dtype=np.float32))
    ys = [rt.buffer(100, "float32") for _ in range(2)]
    rt.tune(T, x, ys[0], 100)
    rt.tune(KEPT, x, ys[1], 100)
    return ys
'''
CUDA = '''
from warmcli import Kernel
DEVICE = "cuda"
SOURCE = r"""
extern "C" __global__ void scale(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * SCALE + 1.0f;
}
"""
KERNELS = [Kernel(SOURCE, "scale", "Pi", language="cuda", defines={"SCALE": s}) for s in (2, 3)]


def workload(rt):
    y = rt.buffer(256)
    for k in KERNELS:
        rt.launch(k, y, 256, grid=1, block=256)
'''
PYCUDA = '''
import os
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

PLAIN = """
__global__ void scale(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""


def modules():
    if os.environ.get("FLAGS") == "default":  # today's: options=None read as extended
        from pycuda.compiler import DEFAULT_NVCC_FLAGS

        if not DEFAULT_NVCC_FLAGS:
            DEFAULT_NVCC_FLAGS.append("--use_fast_math")
        return [SourceModule(PLAIN)]
    return [SourceModule(PLAIN), SourceModule(PLAIN, options=["--use_fast_math"])]


def main():
    x = drv.mem_alloc(1024 * 4)
    for mod in modules():
        mod.get_function("scale")(x, np.int32(1024), block=(256, 1, 1), grid=(4, 1))
'''
STRICT = {"WARM_STRICT": "1"}


@pytest.fixture(scope="module")
def old() -> Iterator[Path]:
    """Stop 41's warm: `/tmp/base41`, else a worktree of 118284a made for this module."""
    yield from release(BASE, CHECKOUT)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, old: Path
) -> Iterator[tuple[Fleet, dict[str, object]]]:
    """Both warms, each command forked; `new.warm` and `old.warm`, each warm's bundle of the
    host and CUDA workloads; a cold start's results."""
    folder = tmp_path_factory.mktemp("upgrade41")
    servers = Servers(folder)
    try:
        fleet = Fleet(folder, old, servers)
        (folder / "inc").mkdir()
        (folder / "inc" / "pre.h").write_text("#define VAL 3.0f\n")
        fleet.workload.write_text(WORKLOAD)
        fleet.cuda.write_text(CUDA)
        (folder / "hx.py").write_text(HEX)
        (folder / "pyc.py").write_text(PYCUDA)
        for code, name in ((fleet.new, "new"), (fleet.old, "old")):
            bundle = folder / f"{name}.warm"
            assert fleet.warm(code, bundle) == [
                STORED.format(bundle, 7, 2),
                STORED.format(bundle, 4, 0),
            ]
        cold = fleet.serve(fleet.new, None)
        assert cold["compiled"] == 7 and cold["tuned"] == ["t_json", "t_rows"], cold
        assert fleet.serve(fleet.old, None) == cold
        yield fleet, cold
    finally:
        servers.close()


def test_every_key_is_unchanged_and_the_header_named_by_its_file(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    f, _ = fleet
    assert keys(f.folder / "new.warm") == keys(f.folder / "old.warm")
    named = {}
    for name in ("new", "old"):
        with sqlite3.connect(f.folder / f"{name}.warm") as db:
            rows = [json.loads(c) for (c,) in db.execute("SELECT components FROM kernels")]
        named[name] = sorted(h[0] for c in rows for h in json.loads(c.get("header_files", "[]")))
    assert named == {"new": ["pre.h"] * 3, "old": ["<header>"] * 3}, named


@pytest.mark.parametrize("reader", ["new", "old"])
def test_each_serves_and_reads_the_others_bundle_compiling_and_changing_nothing(
    fleet: tuple[Fleet, dict[str, object]], reader: str
) -> None:
    f, cold = fleet
    code, other = (f.new, f.old) if reader == "new" else (f.old, f.new)
    bundle = f.folder / ("old.warm" if reader == "new" else "new.warm")
    before = digest(bundle)
    assert f.serve(code, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])
    f.ok(code, "verify", "--workload", f.workload, bundle)
    assert "compiled 0" in f.ok(code, "verify", "--workload", f.cuda, "--arch", "sm_90", bundle)
    assert "11 kernel(s)" in f.ok(code, "verify", bundle)
    f.ok(code, "check", bundle)
    f.ok(code, "check", bundle, "--device", "cuda", "--arch", "sm_90")
    f.ok(code, "stats", bundle)
    stats = json.loads(f.ok(code, "stats", bundle, "--json"))
    assert (len(stats["kernels"]), len(stats["tunes"])) == (11, 2), stats
    theirs = json.loads(f.ok(other, "stats", bundle, "--json"))
    shares = [[(k["key"], k["shared_by"], k["bytes"], k["seconds"]) for k in s["kernels"]]
              for s in (stats, theirs)]  # fmt: skip
    assert shares[0] == shares[1] and max(k[1] for k in shares[0]) >= 2, shares
    f.ok(code, "diff", f.folder / "new.warm", f.folder / "old.warm")
    assert digest(bundle) == before
    copy = f.folder / f"clean-{reader}.warm"
    shutil.copy(bundle, copy)
    f.ok(code, "clean", copy)
    assert keys(copy) == keys(bundle)  # nothing of this machine's removed
    assert f.serve(other, copy, **STRICT) == dict(cold, compiled=0, tuned=[])


def test_a_hex_list_str_key_is_measured_once_again_then_both_serve(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """The one key changed on purpose (README: stored by an older warm, measured again)."""
    f, _ = fleet
    hx, bundle = f.folder / "hx.py", f.folder / "hex.warm"

    def stored(code: Path) -> str:
        return f.ok(code, "run", hx, "-b", bundle, "-q").splitlines()[0]

    assert stored(f.old) == STORED.format(bundle, 2, 2)
    cold = f.serve(f.new, None, hx)
    assert cold["compiled"] == 2 and cold["tuned"] == ["t_hex", "t_kept"], cold
    assert stored(f.new) == STORED.format(bundle, 0, 1)  # t_hex only
    for code in (f.old, f.new, f.old):
        assert f.serve(code, bundle, hx, **STRICT) == dict(cold, compiled=0, tuned=[])
        assert stored(code) == STORED.format(bundle, 0, 0)


@pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")
def test_pycuda_options_and_default_nvcc_flags_key_as_stop_41s_list(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    f, _ = fleet
    script, made = f.folder / "pyc.py", {}
    for code, name in ((f.new, "new"), (f.old, "old")):
        made[name] = f.folder / f"pyc-{name}.warm"
        f.ok(code, "run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", made[name])
    assert keys(made["new"]) == keys(made["old"]) and len(keys(made["new"])[0]) == 4
    # Today's options=None with DEFAULT_NVCC_FLAGS extended is stop 41's explicit list.
    done = f.ok(f.new, "run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", made["old"],
                FLAGS="default")  # fmt: skip
    assert done.splitlines()[0] == STORED.format(made["old"], 0, 0), done


def _times(bundle: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Each kernel's last use and each tune's written time, by key."""
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as db:
        kernels = dict(db.execute("SELECT key, last_used FROM kernels"))
        tunes = {bytes(k).hex(): t for k, t in db.execute("SELECT key, updated FROM tunes")}
    return kernels, tunes


def test_production_write_backs_of_both_interleaved(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    f, cold = fleet
    write = {"WARM_BUNDLE_WRITE": "1"}
    bundle = f.folder / "prod.warm"  # stop 41's, of the CUDA workload only
    f.ok(f.old, "run", f.cuda, "--arch", "sm_90", "-b", bundle, "-q")
    started = [
        f.serving(f.old, bundle, PART="a", **write),
        f.serving(f.new, bundle, PART="b", **write),
    ]
    half_a, half_b = map(f.served, started)
    assert half_a["tuned"] == ["t_rows"] and half_b["tuned"] == ["t_json"]
    for code in (f.old, f.new):
        assert f.serve(code, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])
        f.ok(code, "verify", "--workload", f.workload, bundle)
    assert f.warm(f.old, bundle, cuda=False) == [STORED.format(bundle, 0, 0)]
    # Today's write-back of what it was served (stop 41's half) and built, at one time.
    one = f.folder / "one.warm"
    f.ok(f.old, "run", f.cuda, "--arch", "sm_90", "-b", one, "-q")
    f.serve(f.old, one, PART="a", **write)
    before = _times(one)
    assert f.serve(f.new, one, **write) == dict(cold, compiled=3, tuned=["t_json"])
    after = _times(one)
    moved = {t for k, t in after[0].items() if t != before[0].get(k)}
    assert len(moved) == 1 and len(after[0]) == 11, (before, after)
    assert set(after[1].values()) - set(before[1].values()) == moved
    assert f.serve(f.old, one, **STRICT) == dict(cold, compiled=0, tuned=[])


@pytest.mark.parametrize("merger", ["new", "old"])
def test_each_merges_ones_and_the_others_bundle(
    fleet: tuple[Fleet, dict[str, object]], merger: str
) -> None:
    f, cold = fleet
    code = f.new if merger == "new" else f.old
    out = f.folder / f"merged-{merger}.warm"
    f.ok(code, "merge", f.folder / "new.warm", f.folder / "old.warm", "-o", out)
    assert keys(out) == keys(f.folder / "new.warm")
    for reader in (f.old, f.new):
        assert f.serve(reader, out, **STRICT) == dict(cold, compiled=0, tuned=[])
        assert "11 kernel(s)" in f.ok(reader, "verify", out)
    done = f.ok(code, "merge", f.folder / "old.warm", f.folder / "new.warm", "-o", out, "--force")
    assert "kept the binary" not in done, done
    assert f.warm(f.old if merger == "new" else f.new, out, cuda=False) == [
        STORED.format(out, 0, 0)
    ]


@pytest.mark.parametrize("signer", ["new", "old"])
def test_signed_by_one_served_trusted_by_the_other(
    fleet: tuple[Fleet, dict[str, object]], signer: str
) -> None:
    f, cold = fleet
    code, other = (f.new, f.old) if signer == "new" else (f.old, f.new)
    bundle, key = f.folder / f"signed-{signer}.warm", f.folder / f"{signer}.key"
    shutil.copy(f.folder / ("old.warm" if signer == "new" else "new.warm"), bundle)
    f.ok(code, "keygen", key)
    f.ok(code, "sign", bundle, "--key", key)
    trusted = {"WARM_TRUSTED_KEYS": f"{key}.pub"}
    assert "valid, trusted" in f.ok(other, "verify", bundle, **trusted)
    f.ok(other, "check", bundle, **trusted)
    assert f.serve(other, bundle, **STRICT, **trusted) == dict(cold, compiled=0, tuned=[])
    # Each re-warming it in turn, signing: nothing new, still wholly trusted.
    for warm in (other, code):
        stored = f.warm(warm, bundle, "--key", key, cuda=False, **trusted)
        assert stored == [STORED.format(bundle, 0, 0)]
        assert "valid, trusted" in f.ok(warm, "verify", bundle, **trusted)


@pytest.mark.parametrize("clean", [("--older-than", "30d"), ("--max-size", "1G")])
def test_todays_clean_stamps_times_ahead_and_stop_41_reads_and_cleans_it(
    fleet: tuple[Fleet, dict[str, object]], clean: tuple[str, str]
) -> None:
    """Rows dated a century ahead (a bundle from a machine whose clock was wrong): today's
    clean takes now as their time and keeps them; stop 41 serves, reads and cleans it."""
    f, cold = fleet
    bundle = f.folder / f"ahead{clean[0]}.warm"
    shutil.copy(f.folder / "old.warm", bundle)
    ahead = time.time() + 100 * 365 * 86400
    with sqlite3.connect(bundle) as db:
        db.execute("UPDATE kernels SET last_used = ?", (ahead,))
        db.execute("UPDATE tunes SET updated = ?", (ahead,))
    started = time.time()
    f.ok(f.new, "clean", bundle, *clean)
    assert keys(bundle) == keys(f.folder / "old.warm")
    stamped = _times(bundle)
    assert all(started <= t <= time.time() for t in [*stamped[0].values(), *stamped[1].values()])
    assert f.serve(f.old, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])
    assert "11 kernel(s)" in f.ok(f.old, "verify", bundle)
    f.ok(f.old, "stats", bundle, "--json")
    f.ok(f.old, "clean", bundle, "--max-size", "1G")
    assert keys(bundle) == keys(f.folder / "old.warm")
    assert f.warm(f.old, bundle, cuda=False) == [STORED.format(bundle, 0, 0)]


@pytest.mark.parametrize("bundle_of", ["new", "old"])
def test_todays_clean_tune_makes_either_warm_measure_it_again(
    fleet: tuple[Fleet, dict[str, object]], bundle_of: str
) -> None:
    f, cold = fleet
    bundle = f.folder / f"forget-{bundle_of}.warm"
    shutil.copy(f.folder / f"{bundle_of}.warm", bundle)
    f.ok(f.new, "clean", bundle, "--tune", "t_rows")
    assert len(keys(bundle)[1]) == 1 and len(keys(bundle)[0]) == 11
    f.ok(f.old, "verify", bundle)
    rewarm = f.old if bundle_of == "new" else f.new
    assert f.warm(rewarm, bundle, cuda=False) == [STORED.format(bundle, 0, 1)]
    assert keys(bundle) == keys(f.folder / "new.warm")
    for code in (f.old, f.new):
        assert f.serve(code, bundle, **STRICT) == dict(cold, compiled=0, tuned=[])


def test_a_changed_pre_included_header_is_a_miss_each_explains(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """Today's names the changed header `pre.h` in either bundle (stop 41's rows list it as
    `<header>`: today said `new: pre.h` of them, as if the build had not read it); stop 41
    says `new: <header>` of today's rows, as it was released."""
    f, _ = fleet
    changed = f.folder / "changed"
    (changed / "inc").mkdir(parents=True)
    (changed / "inc" / "pre.h").write_text("#define VAL 5.0f\n")
    shutil.copy(f.workload, changed / "wl.py")
    for code, name, said in (
        (f.new, "new", " (changed: pre.h)"),
        (f.new, "old", " (changed: pre.h)"),
        (f.old, "new", " (new: <header>)"),  # stop 41's own words (it names it so)
    ):
        bundle = f.folder / f"{name}.warm"
        done = f.cli(code, "verify", "--workload", changed / "wl.py", bundle, "--explain-misses")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert "corrupt" not in done.stdout + done.stderr, done.stdout + done.stderr
        misses = [ln for ln in done.stdout.splitlines() if ln.startswith("miss: kernel scale")]
        assert len(misses) == 3 and all(ln.endswith(said) for ln in misses), done.stdout


def test_stop_41s_header_mark_is_paired_by_content_else_changed() -> None:
    """Pure logic: a held list naming `<header>` (stop 41's) beside this process's `pre.h`."""
    from warmcli.runtime.shown import changed_headers

    def files(*pairs: tuple[str, str]) -> dict[str, str]:
        return {"header_files": json.dumps([list(p) for p in pairs])}

    held = [files(("<header>", "aaaa"), ("x.h", "1111"))]
    assert changed_headers(held, files(("pre.h", "aaaa"), ("x.h", "2222"))) == " (changed: x.h)"
    assert changed_headers(held, files(("pre.h", "bbbb"), ("x.h", "1111"))) == " (changed: pre.h)"
    assert changed_headers(held, files(("pre.h", "aaaa"), ("x.h", "1111"))) == ""
    both = files(("pre.h", "bbbb"), ("y.h", "3333"), ("x.h", "1111"))
    assert changed_headers(held, both) == " (changed: pre.h; new: y.h)"


class _Store(BaseHTTPRequestHandler):
    """Serves `body` at any path, with its sha256 as ETag (304 to a matching If-None-Match);
    counts the downloads (200s) by path, query included."""

    body: ClassVar[bytes] = b""
    downloads: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:
        etag = '"' + hashlib.sha256(self.body).hexdigest() + '"'
        if self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.end_headers()
            return
        self.downloads[self.path] = self.downloads.get(self.path, 0) + 1
        self.send_response(200)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_url_with_a_query_is_downloaded_once_more_and_stop_41s_copy_still_serves(
    fleet: tuple[Fleet, dict[str, object]],
) -> None:
    """Stop 41 kept a URL's copy by the whole URL, today's by the URL less its query's signing
    fields (a presigned URL signed anew is one copy): today's first start downloads a signed
    one once more, then asks; stop 41's copy, still there, serves it after. A URL whose query
    signs nothing (`?name=`) is one copy to both."""
    f, cold = fleet
    store = type(
        "Store", (_Store,), {"body": (f.folder / "new.warm").read_bytes(), "downloads": {}}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        signed = "/b.warm?name=fleet&X-Amz-Signature=ab12&X-Amz-Date=20261205T000000Z"
        for path, again in ((signed, 1), ("/c.warm?name=fleet", 0)):
            seen = []
            for code in (f.old, f.old, f.new, f.new, f.old):
                assert f.serve(code, base + path, **STRICT) == dict(cold, compiled=0, tuned=[])
                seen.append(store.downloads.get(path, 0))
            assert seen == [1, 1, 1 + again, 1 + again, 1 + again], (path, seen)
    finally:
        server.shutdown()
        server.server_close()
